package engine

//go:noescape
func widenF16(dst *float32, src *byte, n int)

//go:noescape
func widenBF16(dst *float32, src *byte, n int)

// widenRows is widenRow 16 values an instruction where the CPU has
// AVX-512 (VCVTPH2PS; a bfloat16 is a shift): the same float32 values,
// except that a signalling NaN half comes out quiet, which the products
// that read it would make it anyway.
func widenRows(dst []float32, raw []byte, t DType) {
	n := len(dst) &^ 15
	if useSIMD && hasAVX512 && n > 0 {
		_ = raw[2*n-1]
		if t == BF16 {
			widenBF16(&dst[0], &raw[0], n)
		} else {
			widenF16(&dst[0], &raw[0], n)
		}
	}
	widenRow(dst[n:], raw[2*n:], t)
}
