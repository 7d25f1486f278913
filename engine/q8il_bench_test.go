package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stratanet/strata/engine/internal/membench"
)

// q8BenchMatrix is a rows×cols Q8_0 matrix of values quantised from a
// fixed pseudo-random source, and activations of n input rows.
func q8BenchMatrix(rows, cols, n int) (*matrix, []float32) {
	s := uint64(1)
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = unitFloat(&s)
	}
	q, d := make([]int8, rows*cols), make([]float32, rows*cols/32)
	quantizeQ8(w, q, d)
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = unitFloat(&s)
	}
	return &matrix{rows: rows, cols: cols, q8: q8ilFromPlain(q, d, rows, cols)}, x
}

// BenchmarkQ8Prefill is one Q8_0 matrix product of TinyLlama's ffn_up
// shape (5632×2048) and ffn_down's (2048×5632) with 512 input rows (a
// prefill) on 1 thread, activation quantisation included, in GMAC/s; on a
// CPU with VNNI, …/avx2 is the AVX2 kernel.
func BenchmarkQ8Prefill(b *testing.B) {
	const n = 512
	for _, sh := range [][2]int{{5632, 2048}, {2048, 5632}} {
		m, x := q8BenchMatrix(sh[0], sh[1], n)
		out := make([]float32, n*sh[0])
		s := &Local{pool: newPool(1)}
		paths := []string{""}
		if hasVNNIKernel() {
			paths = append(paths, "/avx2")
		}
		for _, path := range paths {
			b.Run(strconv.Itoa(sh[0])+"x"+strconv.Itoa(sh[1])+path, func(b *testing.B) {
				setVNNI(path == "")
				defer setVNNI(true)
				best := time.Hour
				for b.Loop() {
					t0 := time.Now()
					s.matmul(out, m, newAct(x, n, sh[1]))
					best = min(best, time.Since(t0))
				}
				b.ReportMetric(float64(sh[0])*float64(sh[1])*n/best.Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

// BenchmarkQ8Decode times one decode step (one token at position 0
// through every layer and the head) of a TinyLlama-shaped Q8_0 file at 1
// and 2 threads, with the VNNI and (on a CPU with VNNI) the AVX2 kernels,
// alternating with a read of as many bytes as the weights by as many
// goroutines (membench), and keeping each one's fastest run, as
// BenchmarkDecodeKernelPaths does. It reports tokens/s and each path's
// weight bytes per second over that read's (bw_fraction). The file is
// written once under STRATA_BENCH_DIR (or the temp dir).
func BenchmarkQ8Decode(b *testing.B) {
	c := GenConfig{Arch: "llama", Layers: 22, Dim: 2048, Heads: 32, KVHeads: 4, FFN: 5632, Vocab: 32000, Seed: 1, RopeBase: 10000, NormEps: 1e-5, DType: Q8_0}
	dir := os.Getenv("STRATA_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "strata-bench-tinyllama-1.1b-q8_0.gguf")
	if _, err := os.Stat(path); err != nil {
		if err := GenerateFile(path, c); err != nil {
			b.Fatal(err)
		}
	}
	for _, threads := range []int{1, 2} {
		b.Run("tinyllama-1.1b/threads="+strconv.Itoa(threads), func(b *testing.B) {
			s, err := Open(path, WithThreads(threads))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			defer setVNNI(true)
			step := func() time.Duration {
				ss, err := s.NewSession(4)
				if err != nil {
					b.Fatal(err)
				}
				defer ss.Close()
				t0 := time.Now()
				if _, err := s.Forward(context.Background(), Step{Session: ss, Tokens: []int32{42}}); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			wb := s.Info().WeightBytes
			buf := membench.Buffer(int(wb / 8))
			step()
			readBytes := membench.Read(buf, threads)
			paths := 1
			if hasVNNIKernel() {
				paths = 2
			}
			best := [3]time.Duration{time.Hour, time.Hour, time.Hour}
			for b.Loop() {
				for p := range paths {
					setVNNI(p == 0)
					best[p] = min(best[p], step())
				}
				t0 := time.Now()
				membench.Read(buf, threads)
				best[2] = min(best[2], time.Since(t0))
			}
			bw := float64(readBytes) / best[2].Seconds()
			b.ReportMetric(1/best[0].Seconds(), "tok/s")
			b.ReportMetric(float64(wb)/best[0].Seconds()/bw, "bw_fraction")
			if paths == 2 {
				b.ReportMetric(1/best[1].Seconds(), "avx2_tok/s")
				b.ReportMetric(float64(wb)/best[1].Seconds()/bw, "avx2_bw_fraction")
			}
			b.ReportMetric(bw/1e9, "mem_GB/s")
		})
	}
}
