package ggml

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

var (
	benchOnce  sync.Once
	benchFiles map[string]string
	benchErr   error
	benchDir   string
)

// benchTypes are the weight types benchmarked: one type, or llama.cpp's
// q4_k_m mix (Q4_K and Q6_K), what most published GGUFs are.
var benchTypes = map[string]engine.GenConfig{
	"f32": {DType: engine.F32}, "f16": {DType: engine.F16}, "q8_0": {DType: engine.Q8_0}, "q4_k_m": {Mix: "q4_k_m"},
}

// benchFile generates benchShape in each of benchTypes once per run and
// returns the file of the one named.
func benchFile(b *testing.B, name string) string {
	b.Helper()
	benchOnce.Do(func() {
		benchFiles = map[string]string{}
		for n, t := range benchTypes {
			c := benchShape
			c.DType, c.Mix = t.DType, t.Mix
			benchFiles[n] = filepath.Join(benchDir, n+".gguf")
			if benchErr = engine.GenerateFile(benchFiles[n], c); benchErr != nil {
				return
			}
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchFiles[name]
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ggml-bench")
	if err != nil {
		panic(err)
	}
	benchDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// BenchmarkPrefill: prefill tokens/s of a 512-token prompt, both engines
// in the same run, alternated, and the ratio go/ggml.
//
//	cd engine/ggml && go test -run '^$' -bench Prefill -benchtime 2x
func BenchmarkPrefill(b *testing.B) {
	const n = 512
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i * 37 % benchShape.Vocab)
	}
	for _, dt := range []string{"f16", "q8_0", "q4_k_m"} {
		path := benchFile(b, dt)
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
				var elapsed [2]time.Duration
				b.ResetTimer()
				for range b.N {
					for i, s := range []engine.Stage{gs, ls} {
						se, err := s.NewSession(n)
						if err != nil {
							b.Fatal(err)
						}
						start := time.Now()
						if _, err := s.Forward(context.Background(), engine.Step{Session: se, Tokens: prompt}); err != nil {
							b.Fatal(err)
						}
						elapsed[i] += time.Since(start)
						se.Close()
					}
				}
				g := float64(n*b.N) / elapsed[0].Seconds()
				l := float64(n*b.N) / elapsed[1].Seconds()
				b.ReportMetric(g, "ggml-tok/s")
				b.ReportMetric(l, "go-tok/s")
				b.ReportMetric(l/g, "go/ggml")
			})
		}
	}
}

// benchShape is a small llama: big enough that the matrix products
// dominate, small enough to generate and load in a second.
var benchShape = engine.GenConfig{Arch: "llama", Layers: 4, Dim: 1024, Heads: 16, KVHeads: 4, FFN: 2816, Vocab: 8192,
	Seed: 21, RopeBase: 10000, NormEps: 1e-5}

// decoder decodes one token at a time after a 16-token prompt.
type decoder struct {
	s       engine.Stage
	se      engine.Session
	pos     int
	elapsed time.Duration
}

func newDecoder(b *testing.B, s engine.Stage, steps int) *decoder {
	b.Helper()
	se, err := s.NewSession(16 + steps)
	if err != nil {
		b.Fatal(err)
	}
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32(i * 37 % benchShape.Vocab)
	}
	if _, err := s.Forward(context.Background(), engine.Step{Session: se, Tokens: prompt}); err != nil {
		b.Fatal(err)
	}
	return &decoder{s: s, se: se, pos: 16}
}

func (d *decoder) step(b *testing.B) {
	start := time.Now()
	if _, err := d.s.Forward(context.Background(), engine.Step{Session: d.se, Pos: d.pos, Tokens: []int32{int32(d.pos)}}); err != nil {
		b.Fatal(err)
	}
	d.elapsed += time.Since(start)
	d.pos++
}

func (d *decoder) rate() float64 { return float64(d.pos-16) / d.elapsed.Seconds() }

// BenchmarkDecode: decode tokens/s of engine.Local and of this backend on
// the same file, each measured in the same run, and their ratio
// (go/ggml > 1 means the pure-Go engine is faster). ollama's cgo build of
// ggml targets baseline x86-64; for a fair comparison build it for this
// CPU, as make bench-ggml does:
//
//	cd engine/ggml && CGO_CFLAGS="-O3 -march=native" CGO_CXXFLAGS="-O3 -march=native" \
//		go test -run '^$' -bench Decode -benchtime 32x
func BenchmarkDecode(b *testing.B) {
	for _, dt := range []string{"f32", "f16", "q8_0", "q4_k_m"} {
		path := benchFile(b, dt)
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
				g, l := newDecoder(b, gs, b.N), newDecoder(b, ls, b.N)
				defer g.se.Close()
				defer l.se.Close()
				// Alternate the engines step by step, so that both see the
				// same load from the rest of the machine.
				b.ResetTimer()
				for range b.N {
					g.step(b)
					l.step(b)
				}
				b.ReportMetric(g.rate(), "ggml-tok/s")
				b.ReportMetric(l.rate(), "go-tok/s")
				b.ReportMetric(l.rate()/g.rate(), "go/ggml")
			})
		}
	}
}
