package engine

// Assembly kernels (kernels_amd64.s): AVX for F32, AVX2 for Q8_0, used
// when the CPU and OS support them; otherwise the portable kernels. Both
// compute in the same order, so the choice never changes a bit.

//go:noescape
func dot4F32(out *float32, w *float32, x *float32, cols, stride int)

//go:noescape
func dot4Q8(out *float32, wq *int8, wd *float32, xq *int8, xd *float32, nb int)

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

var hasAVX, hasAVX2 = detectAVX()

// useSIMD lets tests compare the kernels; it is never turned off otherwise.
var useSIMD = true

func detectAVX() (avx, avx2 bool) {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 1 {
		return false, false
	}
	_, _, ecx, _ := cpuid(1, 0)
	const osxsave, avxBit = 1 << 27, 1 << 28
	if ecx&osxsave == 0 || ecx&avxBit == 0 {
		return false, false
	}
	if xcr0, _ := xgetbv0(); xcr0&6 != 6 { // OS saves XMM and YMM state
		return false, false
	}
	if maxID < 7 {
		return true, false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return true, ebx&(1<<5) != 0
}

var simdKernel = func() string {
	switch {
	case hasAVX2:
		return "avx2"
	case hasAVX:
		return "avx"
	}
	return "portable Go"
}()

func dotRowsF32(out, w, x []float32) {
	c := len(x)
	if useSIMD && hasAVX && len(out) == 4 && c > 0 && c%16 == 0 && len(w) >= 4*c {
		dot4F32(&out[0], &w[0], &x[0], c, c)
		return
	}
	dotRowsF32Portable(out, w, x)
}

// dotStridedF32 writes len(out) dot products of x with the rows of w that
// start stride apart (attention's q·K over a KV cache).
func dotStridedF32(out, w, x []float32, stride int) {
	c, n := len(x), len(out)
	i := 0
	if useSIMD && hasAVX && c > 0 && c%16 == 0 && stride >= c {
		for ; i+4 <= n; i += 4 {
			_ = w[(i+3)*stride+c-1]
			dot4F32(&out[i], &w[i*stride], &x[0], c, stride)
		}
	}
	for ; i < n; i++ {
		out[i] = dotF32(w[i*stride:i*stride+c], x)
	}
}

func dotRowsQ8(out []float32, wq []int8, wd []float32, xq []int8, xd []float32) {
	nb := len(xd)
	if useSIMD && hasAVX2 && len(out) == 4 && nb > 0 && len(xq) >= nb*32 && len(wq) >= 4*nb*32 && len(wd) >= 4*nb {
		dot4Q8(&out[0], &wq[0], &wd[0], &xq[0], &xd[0], nb)
		return
	}
	dotRowsQ8Portable(out, wq, wd, xq, xd)
}
