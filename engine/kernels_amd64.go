package engine

// Assembly kernels (kernels_amd64.s): AVX for F32 (Q8_0's are in
// q8il_amd64.s), used when the CPU and OS support them; otherwise the
// portable kernels. Both compute in the same order, so the choice never
// changes a bit.

//go:noescape
func dot4F32(out *float32, w *float32, x *float32, cols, stride int)

//go:noescape
func dot4FMA(out *float32, w *float32, x *float32, cols, stride int)

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

var hasAVX, hasAVX2, hasAVX512, hasAVX512BW = detectAVX()

// hasFMA: AVX with FMA3 (CPUID.1:ECX bit 12), which dot4FMA needs for
// fma32's single rounding (AVX-512F has it on ZMM).
var hasFMA = func() bool {
	if !hasAVX {
		return false
	}
	_, _, ecx, _ := cpuid(1, 0)
	return ecx&(1<<12) != 0
}()

// hasF16C: the packed kernels widen halves with VCVTPH2PS (every AVX2 CPU
// has it; checked all the same).
var hasF16C = func() bool {
	if maxID, _, _, _ := cpuid(0, 0); maxID < 1 {
		return false
	}
	_, _, ecx, _ := cpuid(1, 0)
	return ecx&(1<<29) != 0
}()

// cpuIntel: CPUID's vendor string is GenuineIntel.
var cpuIntel = func() bool {
	_, b, c, d := cpuid(0, 0)
	return b == 0x756e6547 && d == 0x49656e69 && c == 0x6c65746e // "Genu" "ineI" "ntel"
}()

// useSIMD lets tests compare the kernels; it is never turned off otherwise.
var useSIMD = true

// useAVX512 lets tests and benchmarks run the AVX2 packed kernels on a CPU
// with AVX-512BW, so that both stay tested; it is never turned off
// otherwise.
var useAVX512 = true

func detectAVX() (avx, avx2, avx512, avx512bw bool) {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 1 {
		return
	}
	_, _, ecx, _ := cpuid(1, 0)
	const osxsave, avxBit = 1 << 27, 1 << 28
	if ecx&osxsave == 0 || ecx&avxBit == 0 {
		return
	}
	xcr0, _ := xgetbv0()
	if xcr0&6 != 6 { // OS saves XMM and YMM state
		return
	}
	if maxID < 7 {
		return true, false, false, false
	}
	_, ebx, _, _ := cpuid(7, 0)
	// AVX-512F, with the OS saving opmask and ZMM state; BW adds the byte
	// and word instructions the packed kernels use, VL their EVEX forms on
	// ymm registers (Y16–Y31), which the Q4_K kernel's scale unpack uses.
	avx512 = ebx&(1<<16) != 0 && xcr0&0xe0 == 0xe0
	return true, ebx&(1<<5) != 0, avx512, avx512 && ebx&(1<<30) != 0 && ebx&(1<<31) != 0
}

var simdKernel = func() string {
	f32, q8 := "portable Go", "portable Go"
	if hasAVX {
		f32 = "avx (4 rows)"
	}
	if hasAVX512 {
		f32 = "avx512 (8 rows)"
	}
	if hasAVX2 {
		q8 = "avx2 (16 rows)"
	}
	if hasVNNI {
		q8 = "avx512-vnni (16 rows × 8 tokens)"
	}
	return "f32 " + f32 + ", q8_0 " + q8
}()

// dotRowsF32 writes len(out) dot products of consecutive rows of w with x.
func dotRowsF32(out, w, x []float32) { dotStridedF32(out, w, x, len(x)) }

// dotRowsHalf writes len(out) dotFused products of consecutive widened
// F16 or BF16 rows of w with x, 4 rows a call where the CPU has FMA.
func dotRowsHalf(out, w, x []float32) {
	c, i := len(x), 0
	if useSIMD && hasFMA && c > 0 && c%16 == 0 {
		_ = w[len(out)*c-1]
		for ; i+4 <= len(out); i += 4 {
			dot4FMA(&out[i], &w[i*c], &x[0], c, c)
		}
	}
	for ; i < len(out); i++ {
		out[i] = dotFused(w[i*c:(i+1)*c], x)
	}
}

// dotStridedF32 writes len(out) dot products of x with the rows of w that
// start stride apart (attention's q·K over a KV cache).
func dotStridedF32(out, w, x []float32, stride int) {
	c, n := len(x), len(out)
	i := 0
	if useSIMD && hasAVX && c > 0 && c%16 == 0 && stride >= c && n > 0 {
		_ = w[(n-1)*stride+c-1]
		if hasAVX512 {
			for ; i+8 <= n; i += 8 {
				dot8F32(&out[i], &w[i*stride], &x[0], c, stride)
			}
		}
		for ; i+4 <= n; i += 4 {
			dot4F32(&out[i], &w[i*stride], &x[0], c, stride)
		}
	}
	for ; i < n; i++ {
		out[i] = dotF32(w[i*stride:i*stride+c], x)
	}
}

//go:noescape
func dot8F32(out *float32, w *float32, x *float32, cols, stride int)
