package engine

// The AMX kernels of the interleaved Q4_K layout (kil_amd64.s, written by
// kilgen's amx.go), with the VNNI kernels' bits: expandQ4KAMX multiplies a
// group's nibbles by two parts of their sub-blocks' scales, once per
// group and 128 tokens, and gemmQ4K16AMX takes the group against 16
// tokens at a time, a super-block two tile products. A prefill and a
// batch of 16 or more go through them where the CPU has AMX (Intel's
// Sapphire Rapids and later), as llama.cpp's sapphirerapids build does.

//go:noescape
func expandQ4KAMX(w *byte, nb int, dst *byte)

//go:noescape
func gemmQ4K16AMX(e *byte, w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte, nt int)

// amxQ4K reports whether Q4_K products of 16 tokens or more take the AMX
// kernel.
func amxQ4K() bool { return useAMX && hasAMX && useKIL(Q4_K) }
