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
