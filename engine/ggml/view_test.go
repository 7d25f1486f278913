package ggml

import (
	"errors"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestSubMatchesSplit: views of one stage over parts of its range
// compute what stages opened over those parts do, bit for bit (the same
// kernels on the same weights), for a first, middle and last part, on a
// stage that starts at layer 0 and on one that starts later, also with
// the tied head; a view holds no weights, and refuses a range outside
// its stage's.
func TestSubMatchesSplit(t *testing.T) {
	// phi3 and llama3.1: views read the stage's global RoPE factors too.
	for _, name := range []string{"llama-gqa", "llama-tied", "phi3", "llama3.1"} {
		c := shapes[name]
		c.Layers = 4
		path := gen(t, name, c, engine.F32)
		decode := []int32{8, 9, 10}
		ref := run(t, []engine.Stage{open(t, path, WithRange(0, 1), WithThreads(2)), open(t, path, WithRange(1, 3), WithThreads(2)),
			open(t, path, WithRange(3, 4), WithThreads(2))}, decode)

		whole := open(t, path, WithThreads(2))
		tail := open(t, path, WithRange(1, 4), WithThreads(2))
		sub := func(s *Stage, lo, hi int) engine.Stage {
			t.Helper()
			v, err := s.Sub(lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { v.Close() })
			if in := v.Info(); in.Lo != lo || in.Hi != hi || in.WeightBytes != 0 || in.KVBytesPerToken*int64(c.Layers) != whole.Info().KVBytesPerToken*int64(hi-lo) {
				t.Fatalf("view [%d, %d): info %+v", lo, hi, in)
			}
			return v
		}
		for k, stages := range [][]engine.Stage{
			{sub(whole, 0, 1), sub(whole, 1, 3), sub(whole, 3, 4)},
			{sub(whole, 0, 1), sub(tail, 1, 3), sub(tail, 3, 4)},
			{open(t, path, WithRange(0, 1), WithThreads(2)), sub(tail, 1, 2), sub(tail, 2, 4)},
		} {
			got := run(t, stages, decode)
			for i := range ref {
				if d := relDist(ref[i], got[i]); d != 0 {
					t.Errorf("%s, pipeline %d, step %d: views differ from split stages by %.3g relative", name, k, i, d)
				}
			}
		}
		for _, r := range [][2]int{{0, 1}, {1, 5}, {2, 2}} {
			if _, err := tail.Sub(r[0], r[1]); !errors.Is(err, engine.ErrRange) {
				t.Errorf("Sub(%d, %d) of [1, 4): %v, want ErrRange", r[0], r[1], err)
			}
		}
	}
}
