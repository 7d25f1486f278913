package engine

// The AMX kernel of the interleaved Q4_K layout (kil_amd64.s, written by
// kilgen's amx.go): 16 rows against 16 tokens, a sub-block's 32 columns
// one tile product, with the VNNI kernels' bits. A prefill and a batch of
// 16 or more go through it where the CPU has AMX (Intel's Sapphire Rapids
// and later), as llama.cpp's sapphirerapids build does.

//go:noescape
func gemmQ4K16AMX(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte)

// amxQ4K reports whether Q4_K products of 16 tokens or more take the AMX
// kernel.
func amxQ4K() bool { return useAMX && hasAMX && useKIL(Q4_K) }
