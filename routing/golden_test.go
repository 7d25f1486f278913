package routing

import (
	"reflect"
	"testing"

	"github.com/stratanet/strata/internal/goldentest"
)

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
	gb := goldentest.Lines(t, "prefix.txt", []goldentest.Line{{Name: "prefix-summary", Bytes: b}})[0].Bytes
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
