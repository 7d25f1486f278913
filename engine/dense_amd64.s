#include "textflag.h"

// func widenF16(dst *float32, src *byte, n int)
//
// dst[i] = the half at src+2i, for n a multiple of 16 (VCVTPH2PS: exact,
// as f16ToF32).
TEXT ·widenF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   f16done

f16loop:
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       f16loop

f16done:
	VZEROUPPER
	RET

// func widenBF16(dst *float32, src *byte, n int)
//
// dst[i] = the bfloat16 at src+2i, for n a multiple of 16: its bits moved
// to the top half of a float32, as bf16ToF32.
TEXT ·widenBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   bf16done

bf16loop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       bf16loop

bf16done:
	VZEROUPPER
	RET
