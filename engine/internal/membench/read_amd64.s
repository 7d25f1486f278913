#include "textflag.h"

// func readAVX2(p *uint64, n int, pf int) uint64
// Reads n blocks of 256 bytes from p into four sums, prefetching pf bytes
// ahead into L1 and 3·pf bytes ahead into L2 (4 lines a block each), and
// returns the sums' XOR.
TEXT ·readAVX2(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ pf+16(FP), R8
	LEAQ (R8)(R8*2), R9
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11

loop:
	PREFETCHT0 (SI)(R8*1)
	PREFETCHT2 (SI)(R9*1)
	PREFETCHT0 64(SI)(R8*1)
	PREFETCHT2 64(SI)(R9*1)
	PREFETCHT0 128(SI)(R8*1)
	PREFETCHT2 128(SI)(R9*1)
	PREFETCHT0 192(SI)(R8*1)
	PREFETCHT2 192(SI)(R9*1)
	VPADDQ (SI), Y8, Y8
	VPADDQ 32(SI), Y9, Y9
	VPADDQ 64(SI), Y10, Y10
	VPADDQ 96(SI), Y11, Y11
	VPADDQ 128(SI), Y8, Y8
	VPADDQ 160(SI), Y9, Y9
	VPADDQ 192(SI), Y10, Y10
	VPADDQ 224(SI), Y11, Y11
	ADDQ $256, SI
	DECQ CX
	JNZ  loop

	VPXOR Y9, Y8, Y8
	VPXOR Y11, Y10, Y10
	VPXOR Y10, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPXOR X9, X8, X8
	VPSHUFD $0x4e, X8, X9
	VPXOR X9, X8, X8
	VMOVQ X8, AX
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
