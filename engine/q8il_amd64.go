package engine

// The Q8_0 kernels over the interleaved layout (q8il_amd64.s): AVX-512
// VNNI, 16 rows × 1–8 tokens per call (q8ilVNNI1 … q8ilVNNI8), or AVX2, 16
// rows × 1 token; both give q8ilPortable's bits.

//go:noescape
func q8ilVNNI1(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI2(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI3(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI4(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI5(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI6(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI7(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilVNNI8(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

// q8ilVNNI1PF is q8ilVNNI1 prefetching 4 KB ahead (kilgen's q8.go), the
// one-token kernel on Intel CPUs.
//
//go:noescape
func q8ilVNNI1PF(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int)

//go:noescape
func q8ilAVX2(out *float32, w *uint8, wd *uint16, x *byte, nb int, T int, groups int)

var q8ilVNNI = [q8TokTile + 1]func(out *float32, ostride int, w *uint8, wd *uint16, x *byte, nb int, groups int){
	nil, q8ilVNNI1, q8ilVNNI2, q8ilVNNI3, q8ilVNNI4, q8ilVNNI5, q8ilVNNI6, q8ilVNNI7, q8ilVNNI8,
}

// A decode's Q8_0 products read weights at the speed of memory; on the
// Intel VM software prefetch made them faster, and on AMD's EPYC it had
// slowed the K-quant kernels (kilgen's main.go), so only Intel gets it.
func init() {
	if cpuIntel {
		q8ilVNNI[1] = q8ilVNNI1PF
	}
}

// hasVNNI: AVX512_VNNI (CPUID.(EAX=7,ECX=0):ECX bit 11) with AVX-512F,
// BW and VL and the OS saving ZMM state.
var hasVNNI = func() bool {
	if !hasAVX512BW {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<11) != 0
}()

// useVNNI lets tests and benchmarks run the AVX2 Q8_0 kernel on a CPU with
// AVX512_VNNI; it is never turned off otherwise.
var useVNNI = true

// q8ilTile computes groups 16-row groups from g against the input rows
// [t0, t0+T) of x (one activation tile: t0 is a multiple of q8TokTile and
// T is the tile's size), token t's outputs at out[t*ostride:], 16 on per
// group.
func q8ilTile(out []float32, ostride int, q *q8il, g, groups int, a *act, t0, T int) {
	nb := q.nb
	switch {
	case !useSIMD || !hasAVX2 || !hasF16C || nb == 0 || groups <= 0:
		q8ilPortable(out, ostride, q, g, groups, a, t0, T)
		return
	}
	_ = out[(T-1)*ostride+groups*q8Group-1]
	_ = q.w[(g+groups)*nb*q8BlockBytes-1]
	_ = q.d[(g+groups)*nb*q8Group-1]
	_ = a.xil[(t0+T)*nb*q8ActBlock-1]
	w, wd, x := &q.w[g*nb*q8BlockBytes], &q.d[g*nb*q8Group], &a.xil[t0*nb*q8ActBlock]
	if hasVNNI && useVNNI {
		q8ilVNNI[T](&out[0], ostride, w, wd, x, nb, groups)
		return
	}
	for t := 0; t < T; t++ {
		q8ilAVX2(&out[t*ostride], w, wd, &a.xil[t0*nb*q8ActBlock+4*t], nb, T, groups)
	}
}

//go:noescape
func quantizeQ8AVX512(x *float32, q *int8, d *float32, nb int)

// quantizeQ8SIMD is quantizeQ8 by quantizeQ8AVX512 where the CPU has
// AVX-512F (same bits); false where it leaves the work to the caller.
func quantizeQ8SIMD(x []float32, q []int8, d []float32) bool {
	nb := len(d)
	if !useSIMD || !hasAVX512 || nb == 0 {
		return false
	}
	_, _ = x[32*nb-1], q[32*nb-1]
	quantizeQ8AVX512(&x[0], &q[0], &d[0], nb)
	return true
}

//go:noescape
func quantizeQ8KAVX512(x *float32, q *int8, d *float32, bsums *int16, nb int) int

// quantizeQ8KSIMD quantises the blocks of x to Q8_K by quantizeQ8KAVX512
// where the CPU has AVX-512F (same bits), from the first until the first
// it leaves to the portable form; it returns how many it did.
func quantizeQ8KSIMD(x []float32, q []int8, d []float32, bsums []int16) int {
	nb := len(d)
	if !useSIMD || !hasAVX512 || nb == 0 {
		return 0
	}
	_, _, _ = x[256*nb-1], q[256*nb-1], bsums[16*nb-1]
	return quantizeQ8KAVX512(&x[0], &q[0], &d[0], &bsums[0], nb)
}
