package engine

//go:generate go run ./internal/kilgen -out kil_amd64.s -q8 q8il_amd64.s -gemm gemm_amd64.s

// The interleaved K-quant kernels (kil_amd64.s, generated): 16 rows
// against 1 or 4 tokens; token t's activations at x+t·xs, its scales at
// xd+t·4nb, its extras (act.kilExtras) at bs+t·nb·(16 or 64), and its 16
// outputs stored at out+t·os bytes.

//go:noescape
func gemmQ4K1(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ4K4(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ5K1(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ5K4(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ6K1(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ6K4(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

// The one-token kernels prefetching 4 KB ahead of the group's blocks.
//
//go:noescape
func gemmQ4K1PF(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ5K1PF(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

//go:noescape
func gemmQ6K1PF(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)

// kilPrefetch: a one-token product takes the PF kernels. A decode reads
// weights at the speed of memory; on the Intel VM prefetch made it faster,
// and on AMD's EPYC it had slowed these kernels (kilgen's main.go), so
// only Intel gets it. Tests turn it over to run both.
var kilPrefetch = cpuIntel

// hasGFNI: GF2P8AFFINEQB (CPUID.(7,0):ECX bit 8), which the Q6_K kernels
// unpack with.
var hasGFNI = func() bool {
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<8) != 0
}()

// useKILKernels lets tests and benchmarks load K-quant and F16 matrices
// in the plain layout (kil.go, hil.go) on a CPU that has the interleaved
// kernels; it is never turned off otherwise.
var useKILKernels = true

// useKIL reports whether matrices of type t loaded now take the
// interleaved layout.
func useKIL(t DType) bool {
	return useSIMD && useKILKernels && hasVNNI && (t != Q6_K || hasGFNI) && ilGroupBlock(t) != 0
}

func kilKernel(t DType, nt int, w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int) {
	switch {
	case t == Q4_K && nt == 4:
		gemmQ4K4(w, nb, x, xs, xd, bs, out, os)
	case t == Q4_K && kilPrefetch:
		gemmQ4K1PF(w, nb, x, xs, xd, bs, out, os)
	case t == Q4_K:
		gemmQ4K1(w, nb, x, xs, xd, bs, out, os)
	case t == Q5_K && nt == 4:
		gemmQ5K4(w, nb, x, xs, xd, bs, out, os)
	case t == Q5_K && kilPrefetch:
		gemmQ5K1PF(w, nb, x, xs, xd, bs, out, os)
	case t == Q5_K:
		gemmQ5K1(w, nb, x, xs, xd, bs, out, os)
	case nt == 4:
		gemmQ6K4(w, nb, x, xs, xd, bs, out, os)
	case kilPrefetch:
		gemmQ6K1PF(w, nb, x, xs, xd, bs, out, os)
	default:
		gemmQ6K1(w, nb, x, xs, xd, bs, out, os)
	}
}
