package routing

import (
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rewriteGolden rewrites testdata/golden from what the code encodes now:
// only for a deliberate change of format, never to make a test pass.
var rewriteGolden = flag.Bool("rewrite-golden", false, "rewrite testdata/golden from the current code")

// The prefix summary as heartbeats carry it (swarm's section 1): a
// summary of 256 bits with a few prefix hashes in it. Decoding the golden
// bytes gives the summary back, holding the same hashes.
func TestGoldenPrefixSummary(t *testing.T) {
	held := []uint64{1, 0xdeadbeefcafef00d, 1 << 63, 424242}
	s := NewPrefixSummary(256)
	s.Add(held...)
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", "prefix.txt")
	line := "prefix-summary " + hex.EncodeToString(b) + "\n"
	if *rewriteGolden {
		if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if line != string(want) {
		t.Fatalf("encoding differs from %s:\n%s\nwant:\n%s", path, line, want)
	}
	gb, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(string(want)), "prefix-summary "))
	if err != nil {
		t.Fatal(err)
	}
	var got PrefixSummary
	if err := got.UnmarshalBinary(gb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, s) {
		t.Fatalf("golden bytes decode to %+v, want %+v", &got, s)
	}
	if n := got.Match(held); n != len(held) {
		t.Fatalf("decoded summary matches %d of the %d held hashes", n, len(held))
	}
}
