package ggml

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

// benchShape is a small llama: big enough that the matrix products
// dominate, small enough to generate and load in a second.
var benchShape = engine.GenConfig{Arch: "llama", Layers: 4, Dim: 1024, Heads: 16, KVHeads: 4, FFN: 2816, Vocab: 8192,
	Seed: 21, RopeBase: 10000, NormEps: 1e-5}

// decodeRate decodes steps tokens one at a time after a 16-token prompt
// and returns tokens per second.
func decodeRate(b *testing.B, s engine.Stage, steps int) float64 {
	b.Helper()
	ctx := context.Background()
	se, err := s.NewSession(16 + steps)
	if err != nil {
		b.Fatal(err)
	}
	defer se.Close()
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32(i * 37 % benchShape.Vocab)
	}
	if _, err := s.Forward(ctx, engine.Step{Session: se, Tokens: prompt}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range steps {
		if _, err := s.Forward(ctx, engine.Step{Session: se, Pos: 16 + i, Tokens: []int32{int32(i)}}); err != nil {
			b.Fatal(err)
		}
	}
	return float64(steps) / time.Since(start).Seconds()
}

// BenchmarkDecode: decode tokens/s of engine.Local and of this backend on
// the same file, each measured in the same run, and their ratio
// (go/ggml > 1 means the pure-Go engine is faster).
//
//	cd engine/ggml && go test -run '^$' -bench Decode -benchtime 16x
func BenchmarkDecode(b *testing.B) {
	for _, dt := range []engine.DType{engine.F32, engine.F16, engine.Q8_0} {
		c := benchShape
		c.DType = dt
		path := filepath.Join(b.TempDir(), dt.String()+".gguf")
		if err := engine.GenerateFile(path, c); err != nil {
			b.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", dt, threads), func(b *testing.B) {
				gs, err := Open(path, WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer gs.Close()
				ls, err := engine.Open(path, engine.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer ls.Close()
				b.ResetTimer()
				g := decodeRate(b, gs, b.N)
				l := decodeRate(b, ls, b.N)
				b.ReportMetric(g, "ggml-tok/s")
				b.ReportMetric(l, "go-tok/s")
				b.ReportMetric(l/g, "go/ggml")
			})
		}
	}
}
