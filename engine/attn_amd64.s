#include "textflag.h"

// func attnAV64(out *float32, v *float32, vstride int, p *float32, np int)
//
// out[i] += Σ_j p[j]·v[j·vstride + i] for i < 64, j = 0 … np−1 in order:
// each product rounded (VMULPS), then added (VADDPS) to the running sum,
// eight lanes of eight outputs each: the scalar loop's bits.
TEXT ·attnAV64(SB), NOSPLIT, $0-40
	MOVQ   v+8(FP), SI
	MOVQ   vstride+16(FP), BX
	SHLQ   $2, BX
	MOVQ   p+24(FP), DX
	MOVQ   np+32(FP), CX
	MOVQ   out+0(FP), DI
	VMOVUPS (DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	TESTQ  CX, CX
	JZ     avdone

avloop:
	VBROADCASTSS (DX), Y8
	VMULPS       (SI), Y8, Y9
	VADDPS       Y9, Y0, Y0
	VMULPS       32(SI), Y8, Y10
	VADDPS       Y10, Y1, Y1
	VMULPS       64(SI), Y8, Y11
	VADDPS       Y11, Y2, Y2
	VMULPS       96(SI), Y8, Y12
	VADDPS       Y12, Y3, Y3
	VMULPS       128(SI), Y8, Y13
	VADDPS       Y13, Y4, Y4
	VMULPS       160(SI), Y8, Y14
	VADDPS       Y14, Y5, Y5
	VMULPS       192(SI), Y8, Y15
	VADDPS       Y15, Y6, Y6
	VMULPS       224(SI), Y8, Y9
	VADDPS       Y9, Y7, Y7
	ADDQ         BX, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          avloop

avdone:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	VZEROUPPER
	RET

// func attnAV64Z(out *float32, v *float32, vstride int, p *float32, np int)
//
// attnAV64 with AVX-512: four lanes of sixteen outputs, the same products
// and sums, half the instructions.
TEXT ·attnAV64Z(SB), NOSPLIT, $0-40
	MOVQ    v+8(FP), SI
	MOVQ    vstride+16(FP), BX
	SHLQ    $2, BX
	MOVQ    p+24(FP), DX
	MOVQ    np+32(FP), CX
	MOVQ    out+0(FP), DI
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	TESTQ   CX, CX
	JZ      avzdone

avzloop:
	VBROADCASTSS (DX), Z8
	VMULPS       (SI), Z8, Z9
	VADDPS       Z9, Z0, Z0
	VMULPS       64(SI), Z8, Z10
	VADDPS       Z10, Z1, Z1
	VMULPS       128(SI), Z8, Z11
	VADDPS       Z11, Z2, Z2
	VMULPS       192(SI), Z8, Z12
	VADDPS       Z12, Z3, Z3
	ADDQ         BX, SI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          avzloop

avzdone:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VZEROUPPER
	RET

// Softmax's parts (see softmax in kernels.go), AVX-512.

// func maxF32(s *float32, n int) float32
//
// The largest of s[0…n−1] (n ≥ 1), skipping NaNs as softmax's v > m does.
TEXT ·maxF32(SB), NOSPLIT, $0-20
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         $0xff800000, AX
	VPBROADCASTD AX, Z0
	CMPQ         CX, $16
	JB           maxtail

maxloop:
	VMOVUPS (SI), Z1
	VMAXPS  Z0, Z1, Z0 // Z0 = Z1 > Z0 ? Z1 : Z0
	ADDQ    $64, SI
	SUBQ    $16, CX
	CMPQ    CX, $16
	JAE     maxloop

maxtail:
	TESTQ   CX, CX
	JZ      maxreduce
	MOVL    $1, AX
	SHLL    CX, AX
	DECL    AX
	KMOVW   AX, K1
	VMOVUPS (SI), K1, Z1
	VMAXPS  Z0, Z1, K1, Z0

maxreduce:
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y0, Y1, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X0, X1, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X0, X1, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X0, X1, X0
	VMOVSS        X0, ret+16(FP)
	VZEROUPPER
	RET

// EXPSETUP loads expf's constants from DX (expConsts) into Z20–Z28 for
// EXPF.
#define EXPSETUP \
	VBROADCASTSS 0(DX), Z20 \
	VBROADCASTSS 4(DX), Z21 \
	VBROADCASTSS 8(DX), Z22 \
	VBROADCASTSS 12(DX), Z23 \
	VBROADCASTSS 36(DX), Z24 \
	VBROADCASTSS 40(DX), Z25 \
	VBROADCASTSS 44(DX), Z26 \
	VCVTPS2PD    Y26, Z26 \
	VBROADCASTSS 48(DX), Z27 \
	VBROADCASTSS 52(DX), Z28

// EXPF sets Z6 = expf(Z1), sixteen lanes: expf's operations in its order,
// each rounded to float32, the floor taken in float64 as its math.Floor.
// Constants: Z20 log2(e), Z21 ln2 hi, Z22 ln2 lo, Z23 p0 (p1–p5 read from
// DX), Z24 the overflow bound, Z25 the underflow bound, Z26 0.5 (float64),
// Z27 1, Z28 +Inf. It clobbers AX, Z2–Z15 and K2–K6.
//
// k = floor(float64(x·log2e) + 0.5), in float64; r = x − k·ln2hi −
// k·ln2lo; p = ((((p0·r + p1)·r + p2)·r + p3)·r + p4)·r + p5; y = p·r² +
// r + 1; then 2^k in two factors: y·2^k (normal), y·2·2^(k−1) (k > 127),
// y·2^(k+126)·2^−126 (k < −126), the second factor 1 when normal; last,
// expf's first cases: past the bounds and NaN.
#define EXPF \
	VMULPS        Z20, Z1, Z2 \
	VCVTPS2PD     Y2, Z3 \
	VEXTRACTF64X4 $1, Z2, Y4 \
	VCVTPS2PD     Y4, Z4 \
	VADDPD        Z26, Z3, Z3 \
	VADDPD        Z26, Z4, Z4 \
	VRNDSCALEPD   $1, Z3, Z3 \
	VRNDSCALEPD   $1, Z4, Z4 \
	VCVTPD2PS     Z3, Y3 \
	VCVTPD2PS     Z4, Y4 \
	VINSERTF64X4  $1, Y4, Z3, Z3 \
	VMULPS        Z21, Z3, Z5 \
	VSUBPS        Z5, Z1, Z5 \
	VMULPS        Z22, Z3, Z6 \
	VSUBPS        Z6, Z5, Z5 \
	VMOVAPS       Z23, Z6 \
	VMULPS        Z5, Z6, Z6 \
	VADDPS.BCST   16(DX), Z6, Z6 \
	VMULPS        Z5, Z6, Z6 \
	VADDPS.BCST   20(DX), Z6, Z6 \
	VMULPS        Z5, Z6, Z6 \
	VADDPS.BCST   24(DX), Z6, Z6 \
	VMULPS        Z5, Z6, Z6 \
	VADDPS.BCST   28(DX), Z6, Z6 \
	VMULPS        Z5, Z6, Z6 \
	VADDPS.BCST   32(DX), Z6, Z6 \
	VMULPS        Z5, Z5, Z7 \
	VMULPS        Z7, Z6, Z6 \
	VADDPS        Z5, Z6, Z6 \
	VADDPS        Z27, Z6, Z6 \
	VCVTTPS2DQ    Z3, Z8 \
	MOVL          $127, AX \
	VPBROADCASTD  AX, Z9 \
	VPCMPGTD      Z9, Z8, K2 \
	MOVL          $-126, AX \
	VPBROADCASTD  AX, Z10 \
	VPCMPGTD      Z8, Z10, K3 \
	VMOVDQA32     Z8, Z11 \
	VPXORD        Z12, Z12, Z12 \
	MOVL          $1, AX \
	VPBROADCASTD  AX, Z13 \
	VMOVDQA32     Z13, K2, Z11 \
	VPSUBD        Z13, Z8, K2, Z12 \
	MOVL          $126, AX \
	VPBROADCASTD  AX, Z14 \
	VPADDD        Z14, Z8, K3, Z11 \
	VMOVDQA32     Z10, K3, Z12 \
	VPADDD        Z9, Z11, Z11 \
	VPSLLD        $23, Z11, Z11 \
	VPADDD        Z9, Z12, Z12 \
	VPSLLD        $23, Z12, Z12 \
	VMULPS        Z11, Z6, Z6 \
	VMULPS        Z12, Z6, Z6 \
	VCMPPS        $0x1e, Z24, Z1, K4 \
	VMOVAPS       Z28, K4, Z6 \
	VCMPPS        $0x11, Z25, Z1, K5 \
	VPXORD        Z15, Z15, Z15 \
	VMOVAPS       Z15, K5, Z6 \
	VCMPPS        $3, Z1, Z1, K6 \
	VMOVAPS       Z1, K6, Z6

// TAILMASK sets K1 to CX's low lanes and CX to 16 when fewer than 16 are
// left, and jumps to DONE when none are.
#define TAILMASK(FULL, DONE) \
	CMPQ  CX, $16 \
	JAE   FULL \
	TESTQ CX, CX \
	JZ    DONE \
	MOVL  $1, AX \
	SHLL  CX, AX \
	DECL  AX \
	KMOVW AX, K1 \
	MOVQ  $16, CX

// func expF32(s *float32, n int, m float32, c *float32)
//
// s[i] = expf(s[i] − m) for i < n; c holds expf's constants (expConsts).
TEXT ·expF32(SB), NOSPLIT, $0-32
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS m+16(FP), Z31
	MOVQ         c+24(FP), DX
	EXPSETUP
	MOVL         $0xffff, AX
	KMOVW        AX, K1

exploop:
	TAILMASK(expfull, expdone)

expfull:
	VMOVUPS.Z (SI), K1, Z1
	VSUBPS    Z31, Z1, Z1 // x = s − m
	EXPF
	VMOVUPS   Z6, K1, (SI)
	ADDQ      $64, SI
	SUBQ      $16, CX
	JNZ       exploop

expdone:
	VZEROUPPER
	RET

// func siluMulF32(gate, up *float32, n int, c *float32)
//
// gate[i] = gate[i] / (1 + expf(−gate[i])) · up[i] for i < n, siluMul's operations in
// its order; c holds expf's constants (expConsts).
TEXT ·siluMulF32(SB), NOSPLIT, $0-32
	MOVQ         gate+0(FP), SI
	MOVQ         up+8(FP), DI
	MOVQ         n+16(FP), CX
	MOVQ         c+24(FP), DX
	EXPSETUP
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z30 // the sign bit
	MOVL         $0xffff, AX
	KMOVW        AX, K1

siluloop:
	TAILMASK(silufull, siludone)

silufull:
	VMOVUPS.Z (SI), K1, Z0
	VPXORD    Z30, Z0, Z1 // −g
	EXPF
	VADDPS    Z27, Z6, Z6 // 1 + expf(−g)
	VDIVPS    Z6, Z0, Z6  // g / (1 + expf(−g))
	VMOVUPS.Z (DI), K1, Z7
	VMULPS    Z7, Z6, Z6
	VMOVUPS   Z6, K1, (SI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       siluloop

siludone:
	VZEROUPPER
	RET

// func scaleF32(s *float32, n int, f float32)
//
// s[i] *= f for i < n.
TEXT ·scaleF32(SB), NOSPLIT, $0-20
	MOVQ         s+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS f+16(FP), Z0
	MOVL         $0xffff, AX
	KMOVW        AX, K1

scaleloop:
	TAILMASK(scalefull, scaledone)

scalefull:
	VMOVUPS.Z (SI), K1, Z1
	VMULPS  Z0, Z1, Z1
	VMOVUPS Z1, K1, (SI)
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     scaleloop

scaledone:
	VZEROUPPER
	RET
