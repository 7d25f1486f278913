package engine

// The AMX kernels of the interleaved Q4_K and Q6_K layouts (kil_amd64.s,
// written by kilgen's amx.go), with the VNNI kernels' bits: an expand
// kernel multiplies a group's quants by parts of their sub-blocks'
// scales, once per group and 128 tokens, and the gemm kernel takes the
// group against 16 tokens at a time, a super-block a few tile products.
// A prefill and a batch of 16 or more go through them where the CPU has
// AMX (Intel's Sapphire Rapids and later), as llama.cpp's sapphirerapids
// build does.

//go:noescape
func expandQ4KAMX(w *byte, nb int, dst *byte)

//go:noescape
func expandQ6KAMX(w *byte, nb int, dst *byte)

// bs is Q4_K's per-block extras; Q6_K's kernel does not read it.
//
//go:noescape
func gemmQ4K16AMX(e *byte, w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte, nt int)

//go:noescape
func gemmQ6K16AMX(e *byte, w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte, nt int)

// useAMXFor reports whether products of 16 tokens or more with a matrix
// of this type take the AMX kernels.
func useAMXFor(t DType) bool { return useAMX && hasAMX && (t == Q4_K || t == Q6_K) && useKIL(t) }
