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
