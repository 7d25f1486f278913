#include "textflag.h"

// Activation quantisation to Q8_0 (AVX-512F), the bits of quantizeQ8's
// portable form (dtype.go's quantizeQ8Block): per block amax = max |x|
// (NaNs ignored: VMAXPS against 0 keeps its second operand), s =
// amax/127, id = 1/s (0 when s is 0), values roundAway(x·id) (truncate,
// then ±1 where |x·id - trunc| ≥ 0.5) clamped to [-127, 127] with NaN
// kept NaN (VMINPS/VMAXPS return their second operand, the value, when
// one is NaN), then VCVTTPS2DQ (NaN: 0x80000000, whose low byte is 0, as
// Go's int8 conversion gives) and VPMOVDB; the scale is s rounded to a
// half and back (VCVTPS2PH, ties to even, as f32ToF16 for s ≥ 0).

DATA q8qconst<>+0(SB)/4, $0x7fffffff  // |x| mask
DATA q8qconst<>+4(SB)/4, $0x42fe0000  // 127.0
DATA q8qconst<>+8(SB)/4, $0x3f800000  // 1.0
DATA q8qconst<>+12(SB)/4, $0x3f000000 // 0.5
DATA q8qconst<>+16(SB)/4, $0xc2fe0000 // -127.0
DATA q8qconst<>+20(SB)/4, $0x80000000 // sign mask
GLOBL q8qconst<>(SB), RODATA|NOPTR, $24

// Q8ROUND rounds Z (x·id) half away from zero, clamps it and stores its
// 16 int8s at OFF(DI). Z7–Z9 scratch.
#define Q8ROUND(Z, OFF) \
	VRNDSCALEPS $0x0b, Z, Z7 \
	VSUBPS      Z7, Z, Z8 \
	VPANDD      Z31, Z8, Z8 \
	VCMPPS      $0x1d, Z28, Z8, K1 \
	VPANDD      Z26, Z, Z9 \
	VPORD       Z27, Z9, Z9 \
	VADDPS      Z9, Z7, K1, Z7 \
	VMINPS      Z7, Z30, Z7 \
	VMAXPS      Z7, Z29, Z7 \
	VCVTTPS2DQ  Z7, Z7 \
	VPMOVDB     Z7, OFF(DI)

// func quantizeQ8AVX512(x *float32, q *int8, d *float32, nb int)
TEXT ·quantizeQ8AVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ nb+24(FP), CX
	TESTQ CX, CX
	JZ    done
	VPBROADCASTD q8qconst<>+0(SB), Z31
	VBROADCASTSS q8qconst<>+4(SB), Z30
	VBROADCASTSS q8qconst<>+16(SB), Z29
	VBROADCASTSS q8qconst<>+12(SB), Z28
	VBROADCASTSS q8qconst<>+8(SB), Z27
	VPBROADCASTD q8qconst<>+20(SB), Z26
	VPXORD       Z25, Z25, Z25
	VMOVSS       q8qconst<>+4(SB), X14
	VMOVSS       q8qconst<>+8(SB), X13

loop:
	VMOVUPS       (SI), Z0
	VMOVUPS       64(SI), Z1
	VPANDD        Z31, Z0, Z2
	VPANDD        Z31, Z1, Z3
	VMAXPS        Z25, Z2, Z2
	VMAXPS        Z25, Z3, Z3
	VMAXPS        Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS        Y3, Y2, Y2
	VEXTRACTF128  $1, Y2, X3
	VMAXPS        X3, X2, X2
	VMOVHLPS      X2, X2, X3
	VMAXPS        X3, X2, X2
	VMOVSHDUP     X2, X3
	VMAXSS        X3, X2, X2
	VDIVSS        X14, X2, X4
	VCVTPS2PH     $0, X4, X5
	VCVTPH2PS     X5, X5
	VMOVSS        X5, (DX)
	VXORPS        X6, X6, X6
	VUCOMISS      X6, X4
	JEQ           scaled
	VDIVSS        X4, X13, X6

scaled:
	VBROADCASTSS X6, Z6
	VMULPS       Z6, Z0, Z0
	VMULPS       Z6, Z1, Z1
	Q8ROUND(Z0, 0)
	Q8ROUND(Z1, 16)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNZ  loop
	VZEROUPPER

done:
	RET

// Activation quantisation to Q8_K (AVX-512F), the bits of quantizeQ8KBlock
// for a block whose largest magnitude is finite and whose scale −127/mx
// is finite (the portable form takes the others): amax as the largest
// |x| bit pattern (for finite values the same order), mx the first value
// in the block with that magnitude, iscale = −127/mx, values
// min(127, roundToEven(iscale·x)) (VCVTPS2DQ with round-to-nearest-even;
// |iscale·x| ≤ 127.00002, so nothing falls below −127), the 16 sums of 16,
// and d = 1/iscale. A block of zeros gets zeros.

// Q8KGROUP quantises the 16 values at XOFF(SI) by Z2 (iscale), stores
// them at QOFF(DI) and their sum at SOFF(BX). Z3, Z4 and AX scratch.
#define Q8KGROUP(XOFF, QOFF, SOFF) \
	VMULPS           XOFF(SI), Z2, Z3 \
	VCVTPS2DQ.RN_SAE Z3, Z3 \
	VPMINSD          Z30, Z3, Z3 \
	VPMOVDB          Z3, QOFF(DI) \
	VEXTRACTI64X4    $1, Z3, Y4 \
	VPADDD           Y4, Y3, Y3 \
	VEXTRACTI128     $1, Y3, X4 \
	VPADDD           X4, X3, X3 \
	VPSHUFD          $0x4e, X3, X4 \
	VPADDD           X4, X3, X3 \
	VPSHUFD          $0xb1, X3, X4 \
	VPADDD           X4, X3, X3 \
	VMOVD            X3, AX \
	MOVW             AX, SOFF(BX)

// func quantizeQ8KAVX512(x *float32, q *int8, d *float32, bsums *int16, nb int) int
//
// Quantises blocks from the first until nb or the first block it leaves
// to the portable form; returns how many it did.
TEXT ·quantizeQ8KAVX512(SB), NOSPLIT, $0-48
	MOVQ         x+0(FP), SI
	MOVQ         q+8(FP), DI
	MOVQ         d+16(FP), DX
	MOVQ         bsums+24(FP), BX
	MOVQ         nb+32(FP), CX
	XORQ         R8, R8
	VPBROADCASTD q8qconst<>+0(SB), Z31
	MOVL         $127, AX
	VPBROADCASTD AX, Z30

kblock:
	CMPQ R8, CX
	JAE  kdone

	// amax bits: the largest |x| pattern of the block.
	VPANDD        (SI), Z31, Z0
	VPANDD        64(SI), Z31, Z1
	VPANDD        128(SI), Z31, Z2
	VPANDD        192(SI), Z31, Z3
	VPANDD        256(SI), Z31, Z4
	VPANDD        320(SI), Z31, Z5
	VPANDD        384(SI), Z31, Z6
	VPANDD        448(SI), Z31, Z7
	VPANDD        512(SI), Z31, Z8
	VPANDD        576(SI), Z31, Z9
	VPANDD        640(SI), Z31, Z10
	VPANDD        704(SI), Z31, Z11
	VPANDD        768(SI), Z31, Z12
	VPANDD        832(SI), Z31, Z13
	VPANDD        896(SI), Z31, Z14
	VPANDD        960(SI), Z31, Z15
	VPMAXUD       Z1, Z0, Z0
	VPMAXUD       Z3, Z2, Z2
	VPMAXUD       Z5, Z4, Z4
	VPMAXUD       Z7, Z6, Z6
	VPMAXUD       Z9, Z8, Z8
	VPMAXUD       Z11, Z10, Z10
	VPMAXUD       Z13, Z12, Z12
	VPMAXUD       Z15, Z14, Z14
	VPMAXUD       Z2, Z0, Z0
	VPMAXUD       Z6, Z4, Z4
	VPMAXUD       Z10, Z8, Z8
	VPMAXUD       Z14, Z12, Z12
	VPMAXUD       Z4, Z0, Z0
	VPMAXUD       Z12, Z8, Z8
	VPMAXUD       Z8, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPMAXUD       Y1, Y0, Y0
	VEXTRACTI128  $1, Y0, X1
	VPMAXUD       X1, X0, X0
	VPSHUFD       $0x4e, X0, X1
	VPMAXUD       X1, X0, X0
	VPSHUFD       $0xb1, X0, X1
	VPMAXUD       X1, X0, X0
	VMOVD         X0, AX
	TESTL         AX, AX
	JZ            kzero
	CMPL          AX, $0x7f800000
	JAE           kdone

	// mx: the first value whose magnitude is amax.
	VPBROADCASTD AX, Z16
	MOVQ         SI, R9

kfind:
	VPANDD   (R9), Z31, Z17
	VPCMPEQD Z16, Z17, K1
	KMOVW    K1, R10
	TESTL    R10, R10
	JNZ      kfound
	ADDQ     $64, R9
	JMP      kfind

kfound:
	BSFL   R10, R10
	VMOVSS (R9)(R10*4), X1
	VMOVSS q8qconst<>+16(SB), X2
	VDIVSS X1, X2, X2 // iscale = −127/mx
	VMOVD  X2, AX
	ANDL   $0x7fffffff, AX
	CMPL   AX, $0x7f800000
	JAE    kdone
	VMOVSS q8qconst<>+8(SB), X3
	VDIVSS X2, X3, X3 // d = 1/iscale
	VMOVSS X3, (DX)
	VBROADCASTSS X2, Z2
	Q8KGROUP(0, 0, 0)
	Q8KGROUP(64, 16, 2)
	Q8KGROUP(128, 32, 4)
	Q8KGROUP(192, 48, 6)
	Q8KGROUP(256, 64, 8)
	Q8KGROUP(320, 80, 10)
	Q8KGROUP(384, 96, 12)
	Q8KGROUP(448, 112, 14)
	Q8KGROUP(512, 128, 16)
	Q8KGROUP(576, 144, 18)
	Q8KGROUP(640, 160, 20)
	Q8KGROUP(704, 176, 22)
	Q8KGROUP(768, 192, 24)
	Q8KGROUP(832, 208, 26)
	Q8KGROUP(896, 224, 28)
	Q8KGROUP(960, 240, 30)
	JMP kNext

kzero:
	VPXORD    Z0, Z0, Z0
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z0, 64(DI)
	VMOVDQU32 Z0, 128(DI)
	VMOVDQU32 Z0, 192(DI)
	VMOVDQU32 Y0, (BX)
	MOVL      $0, (DX)

kNext:
	ADDQ $1024, SI
	ADDQ $256, DI
	ADDQ $4, DX
	ADDQ $32, BX
	INCQ R8
	JMP  kblock

kdone:
	VZEROUPPER
	MOVQ R8, ret+40(FP)
	RET
