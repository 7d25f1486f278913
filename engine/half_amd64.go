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
	n := 0
	if useSIMD && hasAVX512 {
		n = len(dst) &^ 15
	}
	if n > 0 {
		_ = raw[2*n-1]
		if t == BF16 {
			widenBF16(&dst[0], &raw[0], n)
		} else {
			widenF16(&dst[0], &raw[0], n)
		}
	}
	widenRow(dst[n:], raw[2*n:], t)
}

//go:noescape
func dot8F16(out *float32, w *byte, x *float32, cols, stride int)

// halfDecode computes rows r0 to r1 of F16 matrix w against the one
// activation row x in place, 8 rows a call, where it can (AVX-512, F16,
// whole 16-lane steps), and reports whether it did.
func halfDecode(out []float32, w *matrix, x []float32, r0, r1 int) bool {
	c := w.cols
	if !useSIMD || !hasAVX512 || w.typ != F16 || c%16 != 0 || (r1-r0)%rowBlock != 0 {
		return false
	}
	_ = w.raw[2*r1*c-1]
	_ = out[r1-1]
	for r := r0; r < r1; r += rowBlock {
		dot8F16(&out[r], &w.raw[2*r*c], &x[0], c, c)
	}
	return true
}
