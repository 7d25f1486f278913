package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratanet/strata/engine/internal/membench"
)

// BenchmarkPackedMatVec is one decode-sized matrix-vector product per type
// (5632×2048, TinyLlama's ffn_up), in MB/s of packed weights read, by the
// SIMD kernel and (…/portable, the baseline of the same run) by the
// portable one; where the CPU has AVX-512BW, …/avx2 is the AVX2 kernel.
// MB/cpu-s divides by the process's CPU time instead, steadier than wall
// time on a loaded machine. Activation quantisation is included, as in a decode step.
func BenchmarkPackedMatVec(b *testing.B) {
	const rows, cols = 5632, 2048
	src := make([]float32, cols)
	s := uint64(1)
	for i := range src {
		src[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	for _, typ := range []DType{Q4_K, Q5_K, Q6_K, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL} {
		var raw []byte
		for r := 0; r < rows; r++ {
			raw = encodeRow(raw, src, typ)
		}
		w := &matrix{rows: rows, cols: cols, raw: raw, qf: quantFormats[typ], typ: typ}
		out := make([]float32, rows)
		paths := []string{"", "/portable"}
		if hasAVX512Kernel(typ) {
			paths = []string{"", "/avx2", "/portable"}
		}
		for _, path := range paths {
			b.Run(typ.String()+path, func(b *testing.B) {
				useSIMD, useAVX512 = path != "/portable", path == ""
				defer func() { useSIMD, useAVX512 = true, true }()
				b.SetBytes(int64(len(raw)))
				cpu0 := cpuSeconds()
				for b.Loop() {
					a := newAct(src, 1, cols)
					a.prepare(w)
					matmulPacked(out, w, a, 0, rows)
				}
				if cpu := cpuSeconds() - cpu0; cpu > 0 {
					b.ReportMetric(float64(len(raw))*float64(b.N)/cpu/1e6, "MB/cpu-s")
				}
			})
		}
	}
}

// BenchmarkPackedKernelPaths compares the AVX-512BW and AVX2 kernels of
// each type that has both on the same 5632×2048 matrix-vector product,
// alternating them every iteration and keeping each one's fastest run: on
// a loaded machine the minimum is the least disturbed figure. It reports
// both in MB/s of packed weights and their ratio.
func BenchmarkPackedKernelPaths(b *testing.B) {
	const rows, cols = 5632, 2048
	src := make([]float32, cols)
	s := uint64(1)
	for i := range src {
		src[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	for _, typ := range []DType{Q4_K, Q5_K, Q6_K, IQ4_XS, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL} {
		if !hasAVX512Kernel(typ) {
			continue
		}
		var raw []byte
		for r := 0; r < rows; r++ {
			raw = encodeRow(raw, src, typ)
		}
		w := &matrix{rows: rows, cols: cols, raw: raw, qf: quantFormats[typ], typ: typ}
		out := make([]float32, rows)
		a := newAct(src, 1, cols)
		a.prepare(w)
		b.Run(typ.String(), func(b *testing.B) {
			defer func() { useAVX512 = true }()
			best := [2]time.Duration{time.Hour, time.Hour}
			for b.Loop() {
				for p := range best {
					useAVX512 = p == 0
					t0 := time.Now()
					matmulPacked(out, w, a, 0, rows)
					best[p] = min(best[p], time.Since(t0))
				}
			}
			mbs := func(d time.Duration) float64 { return float64(len(raw)) / d.Seconds() / 1e6 }
			b.ReportMetric(mbs(best[0]), "avx512_MB/s")
			b.ReportMetric(mbs(best[1]), "avx2_MB/s")
			b.ReportMetric(float64(best[1])/float64(best[0]), "avx512/avx2")
		})
	}
}

// BenchmarkDecodeKernelPaths times one decode step (one token at position
// 0 through every layer and the head) of a TinyLlama-shaped Q4_K_M file
// with the AVX-512 and with the AVX2 packed kernels, alternating, at 1 and
// 2 threads, and a read of as many bytes as the weights from a buffer of
// that size by as many goroutines, keeping each one's fastest run (the least
// disturbed on a loaded machine; on a machine shared with other work, run
// it under chrt -f 10 for figures near an idle machine's). It reports both rates, their
// ratio, and each path's weight bytes per second over that read's. The
// file is written once under STRATA_BENCH_DIR (or the temp dir), with the
// name refcheck's BenchmarkDecodeVsGGML gives the same shape.
func BenchmarkDecodeKernelPaths(b *testing.B) {
	if !hasAVX512Kernel(Q4_K) {
		b.Skip("this CPU runs the AVX2 kernels only")
	}
	c := GenConfig{Arch: "llama", Layers: 22, Dim: 2048, Heads: 32, KVHeads: 4, FFN: 5632, Vocab: 32000, Seed: 1, RopeBase: 10000, NormEps: 1e-5, Mix: "q4_k_m"}
	dir := os.Getenv("STRATA_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, "strata-bench-tinyllama-1.1b-q4_k_m.gguf")
	if _, err := os.Stat(path); err != nil {
		if err := GenerateFile(path, c); err != nil {
			b.Fatal(err)
		}
	}
	for _, threads := range []int{1, 2} {
		b.Run("tinyllama-1.1b/threads="+string(rune('0'+threads)), func(b *testing.B) {
			// The interleaved layout (kil.go) where the CPU has VNNI, and
			// the plain one with the AVX-512 and the AVX2 row kernels.
			il, err := Open(path, WithThreads(threads))
			if err != nil {
				b.Fatal(err)
			}
			defer il.Close()
			useKILKernels = false
			s, err := Open(path, WithThreads(threads))
			useKILKernels = true
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			defer func() { useAVX512 = true }()
			step := func(s *Local) time.Duration {
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
			step(s)
			step(il)
			readBytes := membench.Read(buf, threads)
			best := [4]time.Duration{time.Hour, time.Hour, time.Hour, time.Hour}
			for b.Loop() {
				for p := range 2 {
					useAVX512 = p == 0
					best[p] = min(best[p], step(s))
				}
				useAVX512 = true
				best[3] = min(best[3], step(il))
				t0 := time.Now()
				membench.Read(buf, threads)
				best[2] = min(best[2], time.Since(t0))
			}
			bw := float64(readBytes) / best[2].Seconds()
			b.ReportMetric(1/best[0].Seconds(), "avx512_tok/s")
			b.ReportMetric(1/best[1].Seconds(), "avx2_tok/s")
			b.ReportMetric(float64(best[1])/float64(best[0]), "avx512/avx2")
			b.ReportMetric(float64(wb)/best[0].Seconds()/bw, "avx512_bw_fraction")
			b.ReportMetric(float64(wb)/best[1].Seconds()/bw, "avx2_bw_fraction")
			if il.Info().WeightBytes != wb { // the interleaved layout in use
				b.ReportMetric(1/best[3].Seconds(), "kil_tok/s")
				b.ReportMetric(float64(il.Info().WeightBytes)/best[3].Seconds()/bw, "kil_bw_fraction")
			}
			b.ReportMetric(bw/1e9, "mem_GB/s")
		})
	}
}

// BenchmarkMXFP4MatVec is one decode-sized MXFP4 matrix-vector product at
// 1 thread (rows of 2880, gpt-oss's width; 67 MB of blocks, twice a
// 32 MB L3), with activation quantisation, by the SIMD kernel (…/avx2: the
// AVX2 one where the CPU has the AVX-512 one) and the portable one, against a read of as many bytes
// from a buffer of that size in the same run, alternating, each one's
// fastest run kept (the least disturbed on a loaded machine). It reports
// the product's weight bytes per second and their fraction of the read's.
func BenchmarkMXFP4MatVec(b *testing.B) {
	const rows, cols = 43520, 2880
	src := make([]float32, cols)
	s := uint64(3)
	for i := range src {
		src[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	row := encodeRow(nil, src, MXFP4)
	raw := make([]byte, 0, rows*len(row))
	for r := 0; r < rows; r++ {
		raw = append(raw, row...)
	}
	w := &matrix{rows: rows, cols: cols, raw: raw, qf: quantFormats[MXFP4], typ: MXFP4}
	out := make([]float32, rows)
	buf := membench.Buffer(len(raw) / 8)
	paths := []string{"simd", "portable"}
	if packedRowsKernel(MXFP4) != nil {
		paths = []string{"simd", "avx2", "portable"}
	}
	for _, path := range paths {
		b.Run(path, func(b *testing.B) {
			useSIMD, useAVX512 = path != "portable", path == "simd"
			defer func() { useSIMD, useAVX512 = true, true }()
			readBytes := membench.Read(buf, 1)
			best := [2]time.Duration{time.Hour, time.Hour}
			for b.Loop() {
				t0 := time.Now()
				a := newAct(src, 1, cols)
				a.prepare(w)
				matmulPacked(out, w, a, 0, rows)
				best[0] = min(best[0], time.Since(t0))
				t0 = time.Now()
				membench.Read(buf, 1)
				best[1] = min(best[1], time.Since(t0))
			}
			bw := float64(readBytes) / best[1].Seconds()
			b.ReportMetric(float64(len(raw))/best[0].Seconds()/1e6, "weight_MB/s")
			b.ReportMetric(bw/1e6, "read_MB/s")
			b.ReportMetric(float64(len(raw))/best[0].Seconds()/bw, "bw_fraction")
		})
	}
}

// BenchmarkDecodeBandwidth is issue 30's bandwidth goal per weight type: a
// decode step (one token at position 4, through every layer and the head)
// of a TinyLlama-shaped file whose 2-D weights are all of one type, at 1
// thread, alternating with a 1-thread read of as many bytes from a buffer
// of that size, each one's fastest run kept (on a machine shared with other
// work, run it under chrt -f 10). The bytes a step reads are
// engine.Info().StepBytes: the weights but one row of the embeddings. It
// reports tokens/s, the read's GB/s and the step's fraction of it, fastest
// against fastest, and bw_fraction_avg, all steps' time against all
// reads' (the same number of each). Files
// are written once under STRATA_BENCH_DIR (or the temp dir).
func BenchmarkDecodeBandwidth(b *testing.B) {
	dir := os.Getenv("STRATA_BENCH_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	for _, t := range []DType{Q4_K, Q5_K, Q6_K, Q8_0, F16, BF16} {
		b.Run(t.String(), func(b *testing.B) {
			c := GenConfig{Arch: "llama", Layers: 22, Dim: 2048, Heads: 32, KVHeads: 4, FFN: 5632, Vocab: 32000, Seed: 1, RopeBase: 10000, NormEps: 1e-5, DType: t}
			path := filepath.Join(dir, "strata-bench-tinyllama-bw-"+t.String()+".gguf")
			if _, err := os.Stat(path); err != nil {
				if err := GenerateFile(path, c); err != nil {
					b.Fatal(err)
				}
			}
			s, err := Open(path, WithThreads(1))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			read := s.Info().StepBytes
			step := func() time.Duration {
				ss, err := s.NewSession(8)
				if err != nil {
					b.Fatal(err)
				}
				defer ss.Close()
				if _, err := s.Forward(context.Background(), Step{Session: ss, Tokens: []int32{1, 2, 3, 4}}); err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				if _, err := s.Forward(context.Background(), Step{Session: ss, Pos: 4, Tokens: []int32{42}}); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			buf := membench.Buffer(int(read / 8))
			step()
			readBytes := membench.Read(buf, 1)
			bestStep, bestRead := time.Hour, time.Hour
			var allSteps, allReads time.Duration
			for b.Loop() {
				d := step()
				bestStep, allSteps = min(bestStep, d), allSteps+d
				t0 := time.Now()
				membench.Read(buf, 1)
				d = time.Since(t0)
				bestRead, allReads = min(bestRead, d), allReads+d
			}
			bw := float64(readBytes) / bestRead.Seconds()
			b.ReportMetric(1/bestStep.Seconds(), "tok/s")
			b.ReportMetric(bw/1e9, "mem_GB/s")
			b.ReportMetric(float64(read)/bestStep.Seconds()/bw, "bw_fraction")
			// Average against average: the host's pass-to-pass spread
			// moves the fastest of each by up to 15%.
			b.ReportMetric(float64(read)/float64(readBytes)*allReads.Seconds()/allSteps.Seconds(), "bw_fraction_avg")
		})
	}
}

// BenchmarkKILStream times the interleaved K-quant kernels (kil.go) at
// one token on a matrix in cache (64 rows) and on one of 160 MB, which
// streams from memory, beside a 1-thread plain read of 160 MB, each the
// fastest of its runs, in GB/s of the layout's bytes. A kernel that keeps
// up with memory reads the large matrix about as fast as the plain read:
// the layouts' order and prefetch were chosen by it (kilgen).
//
//	go test ./engine -run '^$' -bench KILStream -benchtime 20x
func BenchmarkKILStream(b *testing.B) {
	buf := membench.Buffer(160 << 20 / 8)
	b.Run("read", func(b *testing.B) {
		best := time.Hour
		for b.Loop() {
			t0 := time.Now()
			membench.Read(buf, 1)
			best = min(best, time.Since(t0))
		}
		b.ReportMetric(float64(len(buf)*8)/best.Seconds()/1e9, "GB/s")
	})
	// Rows of TinyLlama's 2,048 and of an 8B model's 4,096 and 14,336
	// (ffn_down) columns.
	for _, c := range []struct {
		typ  DType
		cols int
	}{{Q4_K, 2048}, {Q5_K, 2048}, {Q6_K, 2048}, {Q4_K, 4096}, {Q6_K, 4096}, {Q4_K, 14336}, {Q6_K, 14336}} {
		typ, cols := c.typ, c.cols
		if !useKIL(typ) {
			continue
		}
		f := quantFormats[typ]
		rowBytes := cols / 256 * f.bytes
		for _, rows := range []int{64, (160 << 20) / rowBytes / ilRows * ilRows} {
			rng := uint64(5)
			raw := make([]byte, rows*rowBytes)
			for i := range raw {
				raw[i] = byte(splitmix(&rng))
			}
			for bl := 0; bl < rows*cols/256; bl++ {
				for _, o := range halfOffsets[typ] {
					raw[bl*f.bytes+o+1] = 0x3c // f16 scales near 1
				}
			}
			w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: typ}
			w.interleave()
			x := make([]float32, cols)
			for i := range x {
				x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 21)
			}
			a := newAct(x, 1, cols)
			a.prepare(w)
			out := make([]float32, rows)
			reps := 64<<20/len(w.il) + 1 // a small matrix many times a run
			b.Run(fmt.Sprintf("%s/%dx%d", typ, rows, cols), func(b *testing.B) {
				best := time.Hour
				for b.Loop() {
					t0 := time.Now()
					for range reps {
						matmulKIL(out, w, a, 0, rows)
					}
					best = min(best, time.Since(t0)/time.Duration(reps))
				}
				b.ReportMetric(float64(len(w.il))/best.Seconds()/1e9, "GB/s")
			})
		}
	}
}
