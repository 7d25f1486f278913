package refcheck

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/internal/membench"
)

// benchShapes are real models' shapes, written as Q4_K_M by model gen.
var benchShapes = map[string]engine.GenConfig{
	"tinyllama-1.1b": {Arch: "llama", Layers: 22, Dim: 2048, Heads: 32, KVHeads: 4, FFN: 5632, Vocab: 32000, Seed: 1, RopeBase: 10000, NormEps: 1e-5, Mix: "q4_k_m"},
	"llama-8b":       {Arch: "llama", Layers: 32, Dim: 4096, Heads: 32, KVHeads: 8, FFN: 14336, Vocab: 128256, Seed: 1, RopeBase: 500000, NormEps: 1e-5, Mix: "q4_k_m"},
}

// benchModel writes (once, under STRATA_BENCH_DIR or the temp dir) the
// named shape as Q4_K_M.
func benchModel(b *testing.B, name string) (string, engine.GenConfig) {
	c := benchShapes[name]
	dir := os.Getenv("STRATA_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "strata-bench-"+name+"-q4_k_m.gguf")
	if _, err := os.Stat(path); err != nil {
		if err := engine.GenerateFile(path, c); err != nil {
			b.Fatal(err)
		}
	}
	return path, c
}

// BenchmarkDecodeVsGGML times one decode step (one token through every
// layer and the head, at position 0, so attention is trivial for both) of
// the engine and of ggml's CPU backend on the same Q4_K_M file, at 1 and 2
// threads, and reports both rates, their ratio, and the engine's weight
// bytes read per second over the memory bandwidth: after every step, as
// many bytes as the weights are read from a buffer of that size by as many
// goroutines as threads, so that a loaded machine slows both alike. The
// best_ metrics take each one's fastest step instead of the mean.
// The TinyLlama shape runs by default; STRATA_BENCH_8B=1 adds the 8B one.
func BenchmarkDecodeVsGGML(b *testing.B) {
	names := []string{"tinyllama-1.1b"}
	if os.Getenv("STRATA_BENCH_8B") != "" {
		names = append(names, "llama-8b")
	}
	for _, name := range names {
		path, c := benchModel(b, name)
		g, err := openGGML(path, c)
		if err != nil {
			b.Fatal(err)
		}
		for _, threads := range []int{1, 2} {
			b.Run(name+"/threads="+string(rune('0'+threads)), func(b *testing.B) {
				s, err := engine.Open(path, engine.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				tok := []int32{42}
				step := func() {
					ss, err := s.NewSession(4)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.Forward(ctx, engine.Step{Session: ss, Tokens: tok}); err != nil {
						b.Fatal(err)
					}
					ss.Close()
				}
				wb := s.Info().WeightBytes
				buf := membench.Buffer(int(wb / 8))
				step()
				if _, err := g.logits(tok, threads); err != nil {
					b.Fatal(err)
				}
				readBytes := membench.Read(buf, threads)
				b.ResetTimer()
				var ours, theirs, reads time.Duration
				best := [3]time.Duration{time.Hour, time.Hour, time.Hour}
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					step()
					t1 := time.Now()
					if _, err := g.logits(tok, threads); err != nil {
						b.Fatal(err)
					}
					t2 := time.Now()
					membench.Read(buf, threads)
					t3 := time.Now()
					ours += t1.Sub(t0)
					theirs += t2.Sub(t1)
					reads += t3.Sub(t2)
					for j, d := range []time.Duration{t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)} {
						best[j] = min(best[j], d)
					}
				}
				n := float64(b.N)
				b.ReportMetric(n/ours.Seconds(), "engine_tok/s")
				b.ReportMetric(n/theirs.Seconds(), "ggml_tok/s")
				b.ReportMetric(theirs.Seconds()/ours.Seconds(), "engine/ggml")
				bw := float64(readBytes) * n / reads.Seconds()
				b.ReportMetric(float64(wb)*n/ours.Seconds()/bw, "bw_fraction")
				b.ReportMetric(bw/1e9, "mem_GB/s")
				// The fastest of each, the least disturbed on a loaded
				// machine.
				b.ReportMetric(1/best[0].Seconds(), "best_engine_tok/s")
				b.ReportMetric(1/best[1].Seconds(), "best_ggml_tok/s")
				bestBW := float64(readBytes) / best[2].Seconds()
				b.ReportMetric(float64(wb)/best[0].Seconds()/bestBW, "best_bw_fraction")
			})
		}
		g.close()
	}
}

// BenchmarkPrefillVsGGML times a 512-token prompt (one Forward of every
// token, last position's logits) through the engine on the TinyLlama-shaped
// Q4_K_M file, at 1 and 2 threads, in prompt tokens/s. The refcheck ggml is
// a baseline x86-64 build that needs minutes for one such prompt, so its
// side runs only with STRATA_BENCH_GGML_PREFILL=1 (then also the ratio).
func BenchmarkPrefillVsGGML(b *testing.B) {
	const n = 512
	path, c := benchModel(b, "tinyllama-1.1b")
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i * 37 % c.Vocab)
	}
	var g *ggmlModel
	if os.Getenv("STRATA_BENCH_GGML_PREFILL") != "" {
		var err error
		if g, err = openGGML(path, c); err != nil {
			b.Fatal(err)
		}
		defer g.close()
	}
	for _, threads := range []int{1, 2} {
		b.Run("tinyllama-1.1b/threads="+string(rune('0'+threads)), func(b *testing.B) {
			s, err := engine.Open(path, engine.WithThreads(threads))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b.ResetTimer()
			var ours, theirs time.Duration
			for i := 0; i < b.N; i++ {
				ss, err := s.NewSession(n)
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if _, err := s.Forward(ctx, engine.Step{Session: ss, Tokens: prompt}); err != nil {
					b.Fatal(err)
				}
				ours += time.Since(t0)
				ss.Close()
				if g != nil {
					t1 := time.Now()
					if _, err := g.logits(prompt, threads); err != nil {
						b.Fatal(err)
					}
					theirs += time.Since(t1)
				}
			}
			b.ReportMetric(float64(n*b.N)/ours.Seconds(), "engine_tok/s")
			if g != nil {
				b.ReportMetric(float64(n*b.N)/theirs.Seconds(), "ggml_tok/s")
				b.ReportMetric(theirs.Seconds()/ours.Seconds(), "engine/ggml")
			}
		})
	}
}
