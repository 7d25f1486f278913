package engine

// AVX2 row kernels for the K-quants (quant_amd64.s): each computes one
// packed row's dot product with one quantised activation row in a single
// call, blocks in order, with the portable kernel's integer sums and float
// operations, so it gives the portable kernel's bits.

//go:noescape
func dotQ4KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

//go:noescape
func dotQ5KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

//go:noescape
func dotQ6KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

// packedRowKernel returns a kernel computing one packed row's dot products
// with every activation row, or nil where only the portable one exists.
func packedRowKernel(t DType) func(out []float32, stride int, row []byte, x *act, cols int) {
	if !useSIMD || !hasAVX2 {
		return nil
	}
	switch t {
	case Q4_K:
		return kRowKernel(dotQ4KRow, 144)
	case Q5_K:
		return kRowKernel(dotQ5KRow, 176)
	case Q6_K:
		return kRowKernel(dotQ6KRow, 210)
	}
	return nil
}

// kRowKernel adapts a 256-element row kernel to every activation row.
func kRowKernel(dot func(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32, blockBytes int) func(out []float32, stride int, row []byte, x *act, cols int) {
	return func(out []float32, stride int, row []byte, x *act, cols int) {
		nb := cols / 256
		if nb == 0 {
			return
		}
		_ = row[nb*blockBytes-1]
		for t := 0; t < x.n; t++ {
			xq, xd, bs := x.kq[t*cols:(t+1)*cols], x.kd[t*nb:(t+1)*nb], x.kbsums[t*cols/16:(t+1)*cols/16]
			out[t*stride] = dot(&row[0], &xq[0], &xd[0], &bs[0], nb, &f16Table[0])
		}
	}
}
