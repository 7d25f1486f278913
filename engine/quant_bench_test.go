package engine

import "testing"

// BenchmarkPackedMatVec is one decode-sized matrix-vector product per type
// (5632×2048, TinyLlama's ffn_up), in GB/s of packed weights read.
func BenchmarkPackedMatVec(b *testing.B) {
	const rows, cols = 5632, 2048
	src := make([]float32, cols)
	s := uint64(1)
	for i := range src {
		src[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	for _, typ := range []DType{Q4_K, Q6_K, Q5_K, Q4_0, IQ4_XS} {
		b.Run(typ.String(), func(b *testing.B) {
			var raw []byte
			for r := 0; r < rows; r++ {
				raw = encodeRow(raw, src, typ)
			}
			w := &matrix{rows: rows, cols: cols, raw: raw, qf: quantFormats[typ], typ: typ}
			out := make([]float32, rows)
			b.SetBytes(int64(len(raw)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a := newAct(src, 1, cols)
				a.prepare(w)
				matmulPacked(out, w, a, 0, rows)
			}
		})
	}
}
