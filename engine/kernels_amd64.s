#include "textflag.h"

// The kernels follow the portable order in kernels.go exactly: 16 F32
// lanes in two YMM registers or one ZMM, then the tree l[j]+l[j+8], +4,
// +2, +1; for F32 rows no FMA (VMULPS rounds, then VADDPS), for F16 and
// BF16 rows and dot4FMA each product added by VFMADD231PS (fma32's one
// rounding). (Q8_0's kernels are in q8il_amd64.s.)

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax, edx uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// REDUCE8 sums the 8 lanes of YMM A (low half XA) as (l0+l4 + l2+l6) +
// (l1+l5 + l3+l7) and stores the float at OFF(DX).
#define REDUCE8(A, XA, XT, OFF) \
	VEXTRACTF128 $1, A, XT \
	VADDPS       XT, XA, XA \
	VMOVHLPS     XA, XA, XT \
	VADDPS       XT, XA, XA \
	VMOVSHDUP    XA, XT \
	VADDSS       XT, XA, XA \
	VMOVSS       XA, OFF(DX)

// DOT4SETUP readies dot4F32's and dot4FMA's loop from their arguments (w
// in DI, cols in CX, stride in BX): rows at DI, R8, R9 and R10, CX steps
// of 16 columns, AX the offset, Y0–Y7 the lanes (two registers a row)
// zeroed.
#define DOT4SETUP \
	SHLQ $2, BX \
	LEAQ (DI)(BX*1), R8 \
	LEAQ (R8)(BX*1), R9 \
	LEAQ (R9)(BX*1), R10 \
	SHRQ $4, CX \
	XORQ AX, AX \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

// DOT4DONE sums each row's two registers, then its 8 lanes (reduce16's
// tree), and stores the four floats at (DX).
#define DOT4DONE \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	REDUCE8(Y0, X0, X8, 0) \
	REDUCE8(Y2, X2, X9, 4) \
	REDUCE8(Y4, X4, X10, 8) \
	REDUCE8(Y6, X6, X11, 12)

// func dot4F32(out *float32, w *float32, x *float32, cols, stride int)
// out[r] = w[r*stride:r*stride+cols]·x for r < 4; cols is a positive
// multiple of 16.
TEXT ·dot4F32(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ stride+32(FP), BX
	DOT4SETUP

f32loop:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS 32(SI)(AX*1), Y9
	VMULPS  (DI)(AX*1), Y8, Y10
	VMULPS  32(DI)(AX*1), Y9, Y11
	VMULPS  (R8)(AX*1), Y8, Y12
	VMULPS  32(R8)(AX*1), Y9, Y13
	VADDPS  Y10, Y0, Y0
	VADDPS  Y11, Y1, Y1
	VADDPS  Y12, Y2, Y2
	VADDPS  Y13, Y3, Y3
	VMULPS  (R9)(AX*1), Y8, Y10
	VMULPS  32(R9)(AX*1), Y9, Y11
	VMULPS  (R10)(AX*1), Y8, Y12
	VMULPS  32(R10)(AX*1), Y9, Y13
	VADDPS  Y10, Y4, Y4
	VADDPS  Y11, Y5, Y5
	VADDPS  Y12, Y6, Y6
	VADDPS  Y13, Y7, Y7
	ADDQ    $64, AX
	DECQ    CX
	JNZ     f32loop

	DOT4DONE
	VZEROUPPER
	RET

// func dot4FMA(out *float32, w *float32, x *float32, cols, stride int)
// dot4F32 with each product added by VFMADD231PS (AVX and FMA3): dotFused's
// bits, the widened F16 and BF16 rows' dot products.
// out[r] = w[r*stride:r*stride+cols]·x for r < 4; cols is a positive
// multiple of 16.
TEXT ·dot4FMA(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ stride+32(FP), BX
	DOT4SETUP

fmaloop:
	VMOVUPS (SI)(AX*1), Y8
	VMOVUPS 32(SI)(AX*1), Y9
	VFMADD231PS (DI)(AX*1), Y8, Y0
	VFMADD231PS 32(DI)(AX*1), Y9, Y1
	VFMADD231PS (R8)(AX*1), Y8, Y2
	VFMADD231PS 32(R8)(AX*1), Y9, Y3
	VFMADD231PS (R9)(AX*1), Y8, Y4
	VFMADD231PS 32(R9)(AX*1), Y9, Y5
	VFMADD231PS (R10)(AX*1), Y8, Y6
	VFMADD231PS 32(R10)(AX*1), Y9, Y7
	ADDQ    $64, AX
	DECQ    CX
	JNZ     fmaloop

	DOT4DONE
	VZEROUPPER
	RET

// REDUCE8ROWS sums the 16 lanes of each of Z0–Z7 in the portable order
// (reduce16), the eight rows' reductions at once, and stores the eight
// floats at (DX). Each add keeps the lower half as its first operand:
// s[j] += s[j+8] (two rows a register), s[j] += s[j+4] (four rows), s0 +=
// s2 and s1 += s3, s0 + s1; row r is then in lane r%4, element r/4.
// Z8, Z9 and Z16–Z25 are clobbered.
#define REDUCE8ROWS \
	VSHUFF64X2 $0x44, Z1, Z0, Z8 \
	VSHUFF64X2 $0xee, Z1, Z0, Z9 \
	VADDPS     Z9, Z8, Z16 \
	VSHUFF64X2 $0x44, Z3, Z2, Z8 \
	VSHUFF64X2 $0xee, Z3, Z2, Z9 \
	VADDPS     Z9, Z8, Z17 \
	VSHUFF64X2 $0x44, Z5, Z4, Z8 \
	VSHUFF64X2 $0xee, Z5, Z4, Z9 \
	VADDPS     Z9, Z8, Z18 \
	VSHUFF64X2 $0x44, Z7, Z6, Z8 \
	VSHUFF64X2 $0xee, Z7, Z6, Z9 \
	VADDPS     Z9, Z8, Z19 \
	VSHUFF32X4 $0x88, Z17, Z16, Z8 \
	VSHUFF32X4 $0xdd, Z17, Z16, Z9 \
	VADDPS     Z9, Z8, Z20 \
	VSHUFF32X4 $0x88, Z19, Z18, Z8 \
	VSHUFF32X4 $0xdd, Z19, Z18, Z9 \
	VADDPS     Z9, Z8, Z21 \
	VSHUFPS    $0x44, Z21, Z20, Z8 \
	VSHUFPS    $0xee, Z21, Z20, Z9 \
	VADDPS     Z9, Z8, Z22 \
	VSHUFPS    $0x88, Z22, Z22, Z8 \
	VSHUFPS    $0xdd, Z22, Z22, Z9 \
	VADDPS     Z9, Z8, Z23 \
	VPMOVZXBD  reduceRows<>(SB), Z24 \
	VPERMPS    Z23, Z24, Z25 \
	VMOVUPS    Y25, (DX)

// reduceRows: where REDUCE8ROWS leaves row r (a float's index).
DATA reduceRows<>+0(SB)/8, $0x0d0905010c080400
DATA reduceRows<>+8(SB)/8, $0
GLOBL reduceRows<>(SB), RODATA|NOPTR, $16

// func dot8F32(out *float32, w *float32, x *float32, cols, stride int)
// out[r] = w[r*stride:r*stride+cols]·x for r < 8 (AVX-512F); cols is a
// positive multiple of 16. One ZMM per row holds the 16 lanes.
TEXT ·dot8F32(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ stride+32(FP), BX
	SHLQ $2, BX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	SHRQ $4, CX
	XORQ AX, AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

f32loop8:
	VMOVUPS (SI)(AX*1), Z8
	VMULPS  (DI)(AX*1), Z8, Z16
	VMULPS  (R8)(AX*1), Z8, Z17
	VMULPS  (R9)(AX*1), Z8, Z18
	VMULPS  (R10)(AX*1), Z8, Z19
	VMULPS  (R11)(AX*1), Z8, Z20
	VMULPS  (R12)(AX*1), Z8, Z21
	VMULPS  (R13)(AX*1), Z8, Z22
	VMULPS  (R14)(AX*1), Z8, Z23
	VADDPS  Z16, Z0, Z0
	VADDPS  Z17, Z1, Z1
	VADDPS  Z18, Z2, Z2
	VADDPS  Z19, Z3, Z3
	VADDPS  Z20, Z4, Z4
	VADDPS  Z21, Z5, Z5
	VADDPS  Z22, Z6, Z6
	VADDPS  Z23, Z7, Z7
	ADDQ    $64, AX
	DECQ    CX
	JNZ     f32loop8

	REDUCE8ROWS
	VZEROUPPER
	RET

// func dot8F16(out *float32, w *byte, x *float32, cols, stride int)
// dot8F32 on F16 rows (stride halves apart), each half widened exactly by
// VCVTPH2PS as it is loaded and each product added by VFMADD231PS:
// dotFused's bits.
TEXT ·dot8F16(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ stride+32(FP), BX
	SHLQ $1, BX
	LEAQ (DI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), R14
	SHRQ $4, CX
	XORQ AX, AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

f16loop8:
	VMOVUPS   (SI)(AX*2), Z8
	VCVTPH2PS (DI)(AX*1), Z16
	VCVTPH2PS (R8)(AX*1), Z17
	VCVTPH2PS (R9)(AX*1), Z18
	VCVTPH2PS (R10)(AX*1), Z19
	VCVTPH2PS (R11)(AX*1), Z20
	VCVTPH2PS (R12)(AX*1), Z21
	VCVTPH2PS (R13)(AX*1), Z22
	VCVTPH2PS (R14)(AX*1), Z23
	VFMADD231PS Z16, Z8, Z0
	VFMADD231PS Z17, Z8, Z1
	VFMADD231PS Z18, Z8, Z2
	VFMADD231PS Z19, Z8, Z3
	VFMADD231PS Z20, Z8, Z4
	VFMADD231PS Z21, Z8, Z5
	VFMADD231PS Z22, Z8, Z6
	VFMADD231PS Z23, Z8, Z7
	ADDQ      $32, AX
	DECQ      CX
	JNZ       f16loop8

	REDUCE8ROWS
	VZEROUPPER
	RET

// func dot8F16IL(out *float32, w *byte, x *float32, cols, pf int)
// dot8F16 on 8 F16 rows interleaved by 16 columns (hil.go): each step's
// 8 × 16 halves are 256 consecutive bytes, so the rows are one stream,
// prefetched pf bytes ahead into L1 and 3·pf into L2 (0: the step's own
// lines, no prefetch).
// dot8F16's products and sums, so its bits.
TEXT ·dot8F16IL(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ pf+32(FP), R8
	LEAQ (R8)(R8*2), R9
	SHRQ $4, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

f16illoop:
	PREFETCHT0 (DI)(R8*1)
	PREFETCHT2 (DI)(R9*1)
	PREFETCHT0 64(DI)(R8*1)
	PREFETCHT2 64(DI)(R9*1)
	PREFETCHT0 128(DI)(R8*1)
	PREFETCHT2 128(DI)(R9*1)
	PREFETCHT0 192(DI)(R8*1)
	PREFETCHT2 192(DI)(R9*1)
	VMOVUPS    (SI), Z8
	VCVTPH2PS (DI), Z16
	VCVTPH2PS 32(DI), Z17
	VCVTPH2PS 64(DI), Z18
	VCVTPH2PS 96(DI), Z19
	VCVTPH2PS 128(DI), Z20
	VCVTPH2PS 160(DI), Z21
	VCVTPH2PS 192(DI), Z22
	VCVTPH2PS 224(DI), Z23
	VFMADD231PS Z16, Z8, Z0
	VFMADD231PS Z17, Z8, Z1
	VFMADD231PS Z18, Z8, Z2
	VFMADD231PS Z19, Z8, Z3
	VFMADD231PS Z20, Z8, Z4
	VFMADD231PS Z21, Z8, Z5
	VFMADD231PS Z22, Z8, Z6
	VFMADD231PS Z23, Z8, Z7
	ADDQ      $64, SI
	ADDQ      $256, DI
	DECQ      CX
	JNZ       f16illoop

	REDUCE8ROWS
	VZEROUPPER
	RET

// func dot8BF16IL(out *float32, w *byte, x *float32, cols, pf int)
// dot8F16IL on BF16 rows: a bfloat16 widens exactly by a shift into the
// top half of a float32, so the products and sums, and the bits, are
// dotFused's of the widened values, as dot8F16IL's are.
TEXT ·dot8BF16IL(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DX
	MOVQ w+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ cols+24(FP), CX
	MOVQ pf+32(FP), R8
	LEAQ (R8)(R8*2), R9
	SHRQ $4, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

bf16illoop:
	PREFETCHT0 (DI)(R8*1)
	PREFETCHT2 (DI)(R9*1)
	PREFETCHT0 64(DI)(R8*1)
	PREFETCHT2 64(DI)(R9*1)
	PREFETCHT0 128(DI)(R8*1)
	PREFETCHT2 128(DI)(R9*1)
	PREFETCHT0 192(DI)(R8*1)
	PREFETCHT2 192(DI)(R9*1)
	VMOVUPS    (SI), Z8
	VPMOVZXWD (DI), Z16
	VPSLLD    $16, Z16, Z16
	VPMOVZXWD 32(DI), Z17
	VPSLLD    $16, Z17, Z17
	VPMOVZXWD 64(DI), Z18
	VPSLLD    $16, Z18, Z18
	VPMOVZXWD 96(DI), Z19
	VPSLLD    $16, Z19, Z19
	VPMOVZXWD 128(DI), Z20
	VPSLLD    $16, Z20, Z20
	VPMOVZXWD 160(DI), Z21
	VPSLLD    $16, Z21, Z21
	VPMOVZXWD 192(DI), Z22
	VPSLLD    $16, Z22, Z22
	VPMOVZXWD 224(DI), Z23
	VPSLLD    $16, Z23, Z23
	VFMADD231PS Z16, Z8, Z0
	VFMADD231PS Z17, Z8, Z1
	VFMADD231PS Z18, Z8, Z2
	VFMADD231PS Z19, Z8, Z3
	VFMADD231PS Z20, Z8, Z4
	VFMADD231PS Z21, Z8, Z5
	VFMADD231PS Z22, Z8, Z6
	VFMADD231PS Z23, Z8, Z7
	ADDQ      $64, SI
	ADDQ      $256, DI
	DECQ      CX
	JNZ       bf16illoop

	REDUCE8ROWS
	VZEROUPPER
	RET
