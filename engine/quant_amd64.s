#include "textflag.h"

// Integer block sums of packed rows against Q8_K activations (AVX2). Each
// writes, per 256-block, Σ_j sc_j · Σ_{i∈j} q_i·x_i as one int32: an exact
// integer, so its order cannot matter and the float part stays in Go
// (quant.go), the same for every kernel.

// HSUM8 adds the 8 int32 lanes of YA (low half XA) and stores them at (DX).
#define HSUM8(YA, XA, XT) \
	VEXTRACTI128 $1, YA, XT \
	VPADDD       XT, XA, XA \
	VPSHUFD      $0x4e, XA, XT \
	VPADDD       XT, XA, XA \
	VPSHUFD      $0xb1, XA, XT \
	VPADDD       XT, XA, XA \
	VMOVD        XA, (DX)

// Q4KHALF: nibbles Q (unsigned, in YQ) times 32 activations at XOFF(DI),
// weighted by the int16 scale at SOFF(R8), added into Y0.
#define Q4KHALF(YQ, XOFF, SOFF) \
	VPMADDUBSW   XOFF(DI), YQ, YQ \
	VPBROADCASTW SOFF(R8), Y6 \
	VPMADDWD     Y6, YQ, YQ \
	VPADDD       YQ, Y0, Y0

#define Q4KGROUP(G) \
	VMOVDQU (16+32*G)(SI), Y1 \
	VPAND   Y15, Y1, Y2 \
	VPSRLW  $4, Y1, Y3 \
	VPAND   Y15, Y3, Y3 \
	Q4KHALF(Y2, 64*G, 4*G) \
	Q4KHALF(Y3, 64*G+32, 4*G+2)

// func sumsQ4K(q *byte, x *int8, sc *int16, nb int, out *int32)
// q: nb Q4_K blocks (144 bytes); x: nb*256 activations in [-127, 127];
// sc: 8 int16 sub-block scales per block.
TEXT ·sumsQ4K(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), DX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

q4kloop:
	VPXOR Y0, Y0, Y0
	Q4KGROUP(0)
	Q4KGROUP(1)
	Q4KGROUP(2)
	Q4KGROUP(3)
	HSUM8(Y0, X0, X1)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $16, R8
	ADDQ $4, DX
	DECQ CX
	JNZ  q4kloop
	VZEROUPPER
	RET

// Q6KQUARTER: 32 unsigned 6-bit values in YU times 32 activations at
// XOFF(DI); int16 scales for its two 16-element halves at SOFF(R8) and
// SOFF+2(R8); added into Y0.
#define Q6KQUARTER(YU, XOFF, SOFF) \
	VPMADDUBSW   XOFF(DI), YU, YU \
	VPBROADCASTW SOFF(R8), X6 \
	VPBROADCASTW SOFF+2(R8), X7 \
	VINSERTI128  $1, X7, Y6, Y6 \
	VPMADDWD     Y6, YU, YU \
	VPADDD       YU, Y0, Y0

#define Q6KHALF(N) \
	VMOVDQU (64*N)(SI), Y1 \
	VMOVDQU (64*N+32)(SI), Y2 \
	VMOVDQU (128+32*N)(SI), Y3 \
	VPAND   Y15, Y1, Y4 \
	VPSLLW  $4, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER(Y4, 128*N, 16*N) \
	VPAND   Y15, Y2, Y4 \
	VPSLLW  $2, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER(Y4, 128*N+32, 16*N+4) \
	VPSRLW  $4, Y1, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y14, Y3, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER(Y4, 128*N+64, 16*N+8) \
	VPSRLW  $4, Y2, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPSRLW  $2, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER(Y4, 128*N+96, 16*N+12)

// func sumsQ6K(q *byte, x *int8, sc *int16, nb int, out *int32)
// q: nb Q6_K blocks (210 bytes); x: nb*256 activations in [-127, 127];
// sc: 16 int16 scales per block. Values are taken unsigned (0..63): the
// caller subtracts 32·Σ sc_j·bsum_j.
TEXT ·sumsQ6K(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), DX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x30303030, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14

q6kloop:
	VPXOR Y0, Y0, Y0
	Q6KHALF(0)
	Q6KHALF(1)
	HSUM8(Y0, X0, X1)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $32, R8
	ADDQ $4, DX
	DECQ CX
	JNZ  q6kloop
	VZEROUPPER
	RET
