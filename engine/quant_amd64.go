package engine

// AVX2 row kernels for every packed type (quant_amd64.s): each computes
// one packed row's dot product with one quantised activation row in a
// single call, blocks in order, with the portable kernel's integer sums and
// float operations, so it gives the portable kernel's bits.

//go:noescape
func dotQ4KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

//go:noescape
func dotQ5KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

//go:noescape
func dotQ6KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

// The Row2 kernels compute the same sums for two activation rows (x and
// x+cols), sharing each block's unpacking, and store them at out and
// out+ostride bytes.

//go:noescape
func dotQ4KRow2(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)

//go:noescape
func dotQ6KRow2(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)

// The AVX-512BW twins of dotQ4KRow, dotQ4KRow2, dotQ5KRow, dotQ6KRow and
// dotQ6KRow2 (same arguments, same bits), used when the CPU has AVX-512BW.

// dotQ4KRows512 computes rows ≥ 1 consecutive Q4_K rows (rowBytes apart)
// against one activation row into out[0…rows-1], as dotQ4KRow512 each.
//
//go:noescape
func dotQ4KRows512(q *byte, rowBytes int, x *int8, xd *float32, bsums *int16, nb int, rows int, out *float32)

// dotQ4KRow512 is dotQ4KRows512 for one row.
func dotQ4KRow512(q *byte, x *int8, xd *float32, bsums *int16, nb int, _ *float32) float32 {
	var out float32
	dotQ4KRows512(q, 0, x, xd, bsums, nb, 1, &out)
	return out
}

//go:noescape
func dotQ4KRow2512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)

//go:noescape
func dotQ5KRow512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

// dotQ6KRows512 is dotQ4KRows512 for Q6_K.
//
//go:noescape
func dotQ6KRows512(q *byte, rowBytes int, x *int8, xd *float32, bsums *int16, nb int, rows int, out *float32)

// dotQ6KRow512 is dotQ6KRows512 for one row.
func dotQ6KRow512(q *byte, x *int8, xd *float32, bsums *int16, nb int, _ *float32) float32 {
	var out float32
	dotQ6KRows512(q, 0, x, xd, bsums, nb, 1, &out)
	return out
}

//go:noescape
func dotQ6KRow2512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)

//go:noescape
func dotIQ4XSRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32

// The 32-element types against Q8_0 activations; ms is the activation
// blocks' f16-rounded d·Σq, read by Q4_1 and Q5_1 only.

//go:noescape
func dotQ4_0Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

//go:noescape
func dotQ4_1Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

//go:noescape
func dotQ5_0Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

//go:noescape
func dotQ5_1Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

//go:noescape
func dotIQ4NLRow(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

// dotMXFP4Row takes e8m0HalfTable as tab.
//
//go:noescape
func dotMXFP4Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32

// rowKernel computes one packed row's dot products with activation rows t0
// to t1 into out[t*stride].
type rowKernel = func(out []float32, stride int, row []byte, x *act, t0, t1, cols int)

var avx2RowKernels = map[DType]rowKernel{
	Q4_K:   kRowKernel(dotQ4KRow, dotQ4KRow2, 144),
	Q5_K:   kRowKernel(dotQ5KRow, nil, 176),
	Q6_K:   kRowKernel(dotQ6KRow, dotQ6KRow2, 210),
	IQ4_XS: kRowKernel(dotIQ4XSRow, nil, 136),
	Q4_0:   row32Kernel(dotQ4_0Row, 18),
	Q4_1:   row32Kernel(dotQ4_1Row, 20),
	Q5_0:   row32Kernel(dotQ5_0Row, 22),
	Q5_1:   row32Kernel(dotQ5_1Row, 24),
	IQ4_NL: row32Kernel(dotIQ4NLRow, 18),
	MXFP4:  row32KernelTab(dotMXFP4Row, 17, &e8m0HalfTable[0]),
}

// avx512RowKernels replace avx2RowKernels where the CPU has AVX-512BW.
var avx512RowKernels = map[DType]rowKernel{
	Q4_K: kRowKernel(dotQ4KRow512, dotQ4KRow2512, 144),
	Q5_K: kRowKernel(dotQ5KRow512, nil, 176),
	Q6_K: kRowKernel(dotQ6KRow512, dotQ6KRow2512, 210),
}

// hasAVX512Kernel reports whether packedRowKernel(t) is an AVX-512 kernel.
func hasAVX512Kernel(t DType) bool { return hasAVX512BW && hasF16C && avx512RowKernels[t] != nil }

// packedRowKernel returns type t's SIMD row kernel, or nil where only the
// portable one exists.
func packedRowKernel(t DType) rowKernel {
	if !useSIMD || !hasAVX2 || !hasF16C {
		return nil
	}
	if hasAVX512BW && useAVX512 {
		if k := avx512RowKernels[t]; k != nil {
			return k
		}
	}
	return avx2RowKernels[t]
}

// packedRowsKernel returns a kernel computing every row of a packed
// matrix slice (rows, len(out) of them) against one activation row in one
// call, or nil where type t has none (all but Q4_K and Q6_K): the per-row
// call and constant loads cost about a tenth of a 2048-wide Q4_K row. Its
// sums are the row kernel's, so its bits too.
func packedRowsKernel(t DType) func(out []float32, rows []byte, x *act, cols int) {
	if t == MXFP4 && useSIMD && hasAVX2 {
		return mxfp4Rows // its AVX2 four-row kernel where AVX-512's is not
	}
	if !useSIMD || !hasAVX2 || !hasF16C || !hasAVX512BW || !useAVX512 {
		return nil
	}
	return avx512RowsKernels[t]
}

// avx512RowsKernels are built once: packedRowsKernel runs per matrix call.
// MXFP4's needs VBMI and VNNI besides.
var avx512RowsKernels = func() map[DType]func(out []float32, rows []byte, x *act, cols int) {
	m := map[DType]func(out []float32, rows []byte, x *act, cols int){
		Q4_K: kRowsKernel(dotQ4KRows512, 144),
		Q6_K: kRowsKernel(dotQ6KRows512, 210),
	}
	if hasVNNI && hasVBMI {
		m[MXFP4] = mxfp4Rows
	}
	return m
}()

// hasVBMI: AVX512_VBMI (CPUID.(EAX=7,ECX=0):ECX bit 1), for VPERMB and
// VPERMT2B, with AVX-512BW.
var hasVBMI = func() bool {
	if !hasAVX512BW {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<1) != 0
}()

// dotMXFP4Rows512 computes rows (a multiple of 4) consecutive MXFP4 rows
// against one activation row; xs4 and xd4 are act.mxfp4Extras'.
//
//go:noescape
func dotMXFP4Rows512(q *byte, rowBytes int, x *int8, xs4 *int32, xd4 *float32, nb int, rows int, out *float32)

// dotMXFP4Rows4 is dotMXFP4Rows512 on AVX2 (the same arguments and bits).
//
//go:noescape
func dotMXFP4Rows4(q *byte, rowBytes int, x *int8, xs4 *int32, xd4 *float32, nb int, rows int, out *float32)

// mxfp4Rows is MXFP4's many-row decode kernel: mxfp4RowsTok on the one
// activation row.
func mxfp4Rows(out []float32, rows []byte, x *act, cols int) { mxfp4RowsTok(out, rows, x, 0, cols) }

// packedTokRowsKernel returns a kernel computing rows of a packed matrix
// slice against activation row t, or nil: MXFP4's with AVX-512, which a
// prefill uses too.
func packedTokRowsKernel(t DType) func(out []float32, rows []byte, x *act, t, cols int) {
	if t != MXFP4 || packedRowsKernel(MXFP4) == nil {
		return nil
	}
	return mxfp4RowsTok
}

// mxfp4RowsTok computes MXFP4 rows against activation row t: four rows at
// a time by dotMXFP4Rows512, the last one to three by the AVX2 row kernel
// (the same bits).
func mxfp4RowsTok(out []float32, rows []byte, x *act, t, cols int) {
	nb := cols / 32
	if nb == 0 || len(out) == 0 {
		return
	}
	rb := nb * 17
	_ = rows[len(out)*rb-1]
	xq, xd := x.q[t*cols:(t+1)*cols], x.d[t*nb:(t+1)*nb]
	n4 := len(out) &^ 3
	if x.mxs4 == nil {
		n4 = 0 // not prepared for it (prepareOn): the row kernel alone
	}
	if n4 > 0 {
		st := mxfp4Stride(cols)
		xs4, xd4 := x.mxs4[t*st:(t+1)*st], x.mxd4[t*st:(t+1)*st]
		if hasVNNI && hasVBMI && hasAVX512BW && useAVX512 {
			dotMXFP4Rows512(&rows[0], rb, &xq[0], &xs4[0], &xd4[0], nb, n4, &out[0])
		} else {
			dotMXFP4Rows4(&rows[0], rb, &xq[0], &xs4[0], &xd4[0], nb, n4, &out[0])
		}
	}
	for r := n4; r < len(out); r++ {
		out[r] = dotMXFP4Row(&rows[r*rb], &xq[0], &xd[0], &xd[0], nb, &e8m0HalfTable[0])
	}
}

// kRowsKernel adapts a many-row kernel to a matrix slice.
func kRowsKernel(dot func(q *byte, rowBytes int, x *int8, xd *float32, bsums *int16, nb int, rows int, out *float32), blockBytes int) func(out []float32, rows []byte, x *act, cols int) {
	return func(out []float32, rows []byte, x *act, cols int) {
		nb := cols / 256
		if nb == 0 || len(out) == 0 {
			return
		}
		rb := nb * blockBytes
		_ = rows[len(out)*rb-1]
		xq, xd, bs := x.kq[:cols], x.kd[:nb], x.kbsums[:cols/16]
		dot(&rows[0], rb, &xq[0], &xd[0], &bs[0], nb, len(out), &out[0])
	}
}

// kRowKernel adapts a 256-element row kernel (and its two-row twin, if
// any) to activation rows t0 to t1.
func kRowKernel(dot func(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32,
	dot2 func(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int),
	blockBytes int) rowKernel {
	return func(out []float32, stride int, row []byte, x *act, t0, t1, cols int) {
		nb := cols / 256
		if nb == 0 {
			return
		}
		_ = row[nb*blockBytes-1]
		t := t0
		if dot2 != nil {
			for ; t+2 <= t1; t += 2 {
				xq, xd, bs := x.kq[t*cols:(t+2)*cols], x.kd[t*nb:(t+2)*nb], x.kbsums[t*cols/16:(t+2)*cols/16]
				_ = out[(t+1)*stride]
				dot2(&row[0], &xq[0], &xd[0], &bs[0], nb, &f16Table[0], cols, &out[t*stride], 4*stride)
			}
		}
		for ; t < t1; t++ {
			xq, xd, bs := x.kq[t*cols:(t+1)*cols], x.kd[t*nb:(t+1)*nb], x.kbsums[t*cols/16:(t+1)*cols/16]
			out[t*stride] = dot(&row[0], &xq[0], &xd[0], &bs[0], nb, &f16Table[0])
		}
	}
}

// row32Kernel adapts a 32-element row kernel to activation rows t0 to t1.
func row32Kernel(dot func(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32, blockBytes int) rowKernel {
	return row32KernelTab(dot, blockBytes, &f16Table[0])
}

// row32KernelTab is row32Kernel with the kernel's scale table tab.
func row32KernelTab(dot func(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32, blockBytes int, tab *float32) rowKernel {
	return func(out []float32, stride int, row []byte, x *act, t0, t1, cols int) {
		nb := cols / 32
		if nb == 0 {
			return
		}
		_ = row[nb*blockBytes-1]
		for t := t0; t < t1; t++ {
			xq, xd := x.q[t*cols:(t+1)*cols], x.d[t*nb:(t+1)*nb]
			ms := xd // not read by the types without a min
			if x.sums != nil {
				ms = x.sums[t*nb : (t+1)*nb]
			}
			out[t*stride] = dot(&row[0], &xq[0], &xd[0], &ms[0], nb, tab)
		}
	}
}
