package engine

import "testing"

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
