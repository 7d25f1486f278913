package node

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rewriteGolden rewrites testdata/golden from what the code encodes now:
// only for a deliberate change of format, never to make a test pass.
var rewriteGolden = flag.Bool("rewrite-golden", false, "rewrite testdata/golden from the current code")

// checkGoldenFile compares got with testdata/golden/name, or writes it
// under -rewrite-golden.
func checkGoldenFile(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *rewriteGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("encodings differ from %s:\n%s\nwant:\n%s", path, got, want)
	}
}

// Every frame of the session protocol (wire.go, wirecode.go), fully
// populated: the samples the fuzz corpus is seeded from, with the
// log-probability frames and a q8 step. Decoding the golden bytes gives
// the value back.
func TestGoldenWireFrames(t *testing.T) {
	msgs := append(append(sampleMessages(t), lpMessages(t)...), q8Sample(t))
	var out strings.Builder
	for i, m := range msgs {
		b, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("%d %T: %v", i, m, err)
		}
		fmt.Fprintf(&out, "%02d %s %s\n", i, m.kind(), hex.EncodeToString(b))
	}
	checkGoldenFile(t, "wire.txt", out.String())

	// Decode from the file's bytes, not from the encoder's output.
	want, err := os.ReadFile(filepath.Join("testdata", "golden", "wire.txt"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(want)), "\n")
	if len(lines) != len(msgs) {
		t.Fatalf("%d golden lines for %d messages", len(lines), len(msgs))
	}
	for i, line := range lines {
		f := strings.Fields(line)
		b, err := hex.DecodeString(f[len(f)-1])
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if s, ok := msgs[i].(*Step); ok && s.DType == DTypeQ8 {
			// q8 is lossy: the decoded rows are the quantised ones, and
			// they encode to the same bytes.
			back, err := Encode(nil, got)
			if err != nil || !bytes.Equal(back, b) {
				t.Fatalf("line %d: q8 step re-encodes to %x (%v), not the golden bytes", i, back, err)
			}
			continue
		}
		if !reflect.DeepEqual(got, msgs[i]) {
			t.Fatalf("line %d: golden bytes decode to\n%+v\nwant\n%+v", i, got, msgs[i])
		}
	}
}
