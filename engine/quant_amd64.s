#include "textflag.h"

// Whole-row dot products of packed rows with one quantised activation row
// (AVX2). Per block: the scales are unpacked, the integer sums formed (exact,
// so their order cannot matter), and the block's float part computed with
// the portable kernel's float32 operations in its order (VMULSS, VSUBSS,
// VADDSS, or their packed forms lane by lane; never FMA), each block added
// in turn into one float32. Halves are widened through f16Table (tab), the
// portable kernels' own conversion, or by VCVTPH2PS (K-quants), which
// gives the same values.
//
// Common arguments: q the row's nb blocks; x its activations, nb*block
// values in [-127, 127]; xd one float32 scale per activation block; tab
// f16Table. Registers: SI q, DI x, R9 xd, R10 bsums, R11 tab, CX nb,
// X10 the row's sum, Y15 0x0f bytes. The Row2 kernels take two
// activation rows, cols apart (R14 the second's x; its xd and bsums at
// R8 = cols/64 and 8·R8 bytes on), sharing each block's unpacking. The frame holds one block's scales
// as int16 (0(SP)...).

// ROW32PROLOGUE loads a 32-element row kernel's arguments (vet reads
// macros as part of the function above them, so this one sits here).
#define ROW32PROLOGUE \
	MOVQ q+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ xd+16(FP), R9 \
	MOVQ ms+24(FP), R10 \
	MOVQ nb+32(FP), CX \
	MOVQ tab+40(FP), R11 \
	NIBMASK \
	MOVL         $0x00010001, AX \
	VMOVD        AX, X12 \
	VPBROADCASTD X12, Y12 \
	VXORPS       X10, X10, X10

// ROW2PROLOGUE and ROW2STORE serve the Row2 kernels below.
#define ROW2PROLOGUE \
	MOVQ q+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ xd+16(FP), R9 \
	MOVQ bsums+24(FP), R10 \
	MOVQ nb+32(FP), CX \
	MOVQ tab+40(FP), R11 \
	MOVQ cols+48(FP), R14 \
	MOVQ R14, R8 \
	SHRQ $6, R8 \
	ADDQ DI, R14 \
	NIBMASK

// ROW2STORE writes the sums in XA and XB to out and out+ostride.
#define ROW2STORE(XA, XB) \
	VZEROUPPER \
	MOVQ  out+56(FP), AX \
	MOVQ  ostride+64(FP), BX \
	MOVSS XA, (AX) \
	MOVSS XB, (AX)(BX*1) \
	RET

// HSUM8 adds the 8 int32 lanes of YA (low half XA) into the 32-bit R.
#define HSUM8(YA, XA, XT, R) \
	VEXTRACTI128 $1, YA, XT \
	VPADDD       XT, XA, XA \
	VPSHUFD      $0x4e, XA, XT \
	VPADDD       XT, XA, XA \
	VPSHUFD      $0xb1, XA, XT \
	VPADDD       XT, XA, XA \
	VMOVD        XA, R

// HSUM2 adds the 8 int32 lanes of YA into RA and those of YB into RB.
#define HSUM2(YA, YB, XA, XT, RA, RB) \
	VPHADDD      YB, YA, YA \
	VEXTRACTI128 $1, YA, XT \
	VPADDD       XT, XA, XA \
	VPHADDD      XA, XA, XA \
	VMOVD        XA, RA \
	VPEXTRD      $1, XA, RB

// HALF widens the f16 at OFF(SI) into XD through the table.
#define HALF(OFF, XD) \
	MOVWLZX OFF(SI), AX \
	VMOVSS  (R11)(AX*4), XD

#define NIBMASK \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X15 \
	VPBROADCASTD X15, Y15

// KHALF: 32 unsigned values in YQ times 32 activations at XOFF(DI),
// weighted by the int16 scale at SOFF(SP), added into Y0.
#define KHALF(YQ, XOFF, SOFF) \
	VPMADDUBSW   XOFF(DI), YQ, YQ \
	VPBROADCASTW SOFF(SP), Y6 \
	VPMADDWD     Y6, YQ, YQ \
	VPADDD       YQ, Y0, Y0

// KSCALES unpacks the 12 scale bytes at 4(SI) of a Q4_K/Q5_K block: the 8
// 6-bit scales to int16 at 0(SP), and the 8 6-bit mins, each times the sum
// of its 32 activations (bsums at (R10)), in the 8 int32 lanes of Y9.
#define KSCALES \
	MOVL  4(SI), AX \
	MOVL  8(SI), BX \
	MOVL  12(SI), DX \
	MOVQ  AX, R12 \
	ANDQ  $0x3f3f3f3f, R12 \
	SHRQ  $6, AX \
	ANDQ  $0x03030303, AX \
	SHLQ  $4, AX \
	MOVQ  DX, R13 \
	ANDQ  $0x0f0f0f0f, R13 \
	ORQ   AX, R13 \
	SHLQ  $32, R13 \
	ORQ   R13, R12 \
	VMOVQ R12, X1 \
	VPMOVZXBW X1, X1 \
	VMOVDQU X1, 0(SP) \
	MOVQ  BX, R12 \
	ANDQ  $0x3f3f3f3f, R12 \
	SHRQ  $6, BX \
	ANDQ  $0x03030303, BX \
	SHLQ  $4, BX \
	MOVQ  DX, R13 \
	SHRQ  $4, R13 \
	ANDQ  $0x0f0f0f0f, R13 \
	ORQ   BX, R13 \
	SHLQ  $32, R13 \
	ORQ   R13, R12 \
	VMOVQ R12, X2 \
	VPUNPCKLBW X2, X2, X2 \
	VPMOVZXBW X2, Y2 \
	VPMADDWD (R10), Y2, Y9

// HSUM2V is HSUM2 leaving the two sums in lanes 0 and 1 of XA.
#define HSUM2V(YA, YB, XA, XT) \
	VPHADDD      YB, YA, YA \
	VEXTRACTI128 $1, YA, XT \
	VPADDD       XT, XA, XA \
	VPHADDD      XA, XA, XA

// KCOMBINE adds a Q4_K/Q5_K block's d·dx·sumi − dmin·dx·summ (sumi and
// summ in lanes 0 and 1 of XS, dx at DXM) into ACC, rounded as combineK
// and dotRowQuant round it: lane by lane the same float32 operations in
// the same operand order, so the same bits. VCVTPH2PS widens d and dmin
// together, exactly as f16Table does (the kernels run only where F16C
// is), without two lookups in that 256 KiB table, which miss the L1 cache.
#define KCOMBINE(XS, DXM, ACC) \
	VCVTDQ2PS    XS, X4 \
	VCVTPH2PS    (SI), X3 \
	VBROADCASTSS DXM, X5 \
	VMULPS       X5, X3, X3 \
	VMULPS       X4, X3, X3 \
	VMOVSHDUP    X3, X5 \
	VSUBSS       X5, X3, X3 \
	VADDSS       X3, ACC, ACC

// Q6COMBINE adds float32(d·dx)·float32(DX − 32·BX) into ACC, the half
// widened as in KCOMBINE.
#define Q6COMBINE(DXM, ACC) \
	SHLL       $5, BX \
	SUBL       BX, DX \
	MOVWLZX    208(SI), AX \
	VMOVD      AX, X3 \
	VCVTPH2PS  X3, X3 \
	VMULSS     DXM, X3, X3 \
	VCVTSI2SSL DX, X4, X4 \
	VMULSS     X4, X3, X3 \
	VADDSS     X3, ACC, ACC

#define Q4KGROUP(G) \
	VMOVDQU (16+32*G)(SI), Y1 \
	VPAND   Y15, Y1, Y2 \
	VPSRLW  $4, Y1, Y3 \
	VPAND   Y15, Y3, Y3 \
	KHALF(Y2, 64*G, 4*G) \
	KHALF(Y3, 64*G+32, 4*G+2)

// func dotQ4KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32
TEXT ·dotQ4KRow(SB), NOSPLIT, $32-52
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xd+16(FP), R9
	MOVQ bsums+24(FP), R10
	MOVQ nb+32(FP), CX
	MOVQ tab+40(FP), R11
	NIBMASK
	VXORPS X10, X10, X10

q4kloop:
	KSCALES
	VPXOR Y0, Y0, Y0
	Q4KGROUP(0)
	Q4KGROUP(1)
	Q4KGROUP(2)
	Q4KGROUP(3)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  q4kloop
	VZEROUPPER
	MOVSS X10, ret+48(FP)
	RET

// Q5KGROUP: as Q4KGROUP, with the fifth bits of group G from the 32 qh
// bytes in Y14 (bit 2G for the low nibbles, 2G+1 for the high ones).
#define Q5KGROUP(G) \
	VMOVDQU (48+32*G)(SI), Y1 \
	VPAND   Y15, Y1, Y2 \
	VPSRLW  $(2*G), Y14, Y4 \
	VPAND   Y13, Y4, Y4 \
	VPSLLW  $4, Y4, Y4 \
	VPOR    Y4, Y2, Y2 \
	VPSRLW  $4, Y1, Y3 \
	VPAND   Y15, Y3, Y3 \
	VPSRLW  $(2*G+1), Y14, Y4 \
	VPAND   Y13, Y4, Y4 \
	VPSLLW  $4, Y4, Y4 \
	VPOR    Y4, Y3, Y3 \
	KHALF(Y2, 64*G, 4*G) \
	KHALF(Y3, 64*G+32, 4*G+2)

// func dotQ5KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32
TEXT ·dotQ5KRow(SB), NOSPLIT, $32-52
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xd+16(FP), R9
	MOVQ bsums+24(FP), R10
	MOVQ nb+32(FP), CX
	MOVQ tab+40(FP), R11
	NIBMASK
	MOVL         $0x01010101, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	VXORPS X10, X10, X10

q5kloop:
	KSCALES
	VMOVDQU 16(SI), Y14
	VPXOR   Y0, Y0, Y0
	Q5KGROUP(0)
	Q5KGROUP(1)
	Q5KGROUP(2)
	Q5KGROUP(3)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)
	ADDQ $176, SI
	ADDQ $256, DI
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  q5kloop
	VZEROUPPER
	MOVSS X10, ret+48(FP)
	RET

// Q6KQUARTER: 32 unsigned 6-bit values in YU times 32 activations at
// XOFF(DI); int16 scales for its two 16-element halves at SOFF(SP) and
// SOFF+2(SP); added into Y0.
#define Q6KQUARTER(YU, XOFF, SOFF) \
	VPMADDUBSW   XOFF(DI), YU, YU \
	VPBROADCASTW SOFF(SP), X6 \
	VPBROADCASTW SOFF+2(SP), X7 \
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

// func dotQ6KRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32
// Values are taken unsigned (0..63) and 32·Σ sc_j·bsum_j subtracted.
TEXT ·dotQ6KRow(SB), NOSPLIT, $32-52
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xd+16(FP), R9
	MOVQ bsums+24(FP), R10
	MOVQ nb+32(FP), CX
	MOVQ tab+40(FP), R11
	NIBMASK
	MOVL $0x30303030, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS X10, X10, X10

q6kloop:
	VPMOVSXBW 192(SI), Y1
	VMOVDQU   Y1, 0(SP)
	VPMADDWD  (R10), Y1, Y8
	VPXOR Y0, Y0, Y0
	Q6KHALF(0)
	Q6KHALF(1)
	HSUM2(Y0, Y8, X0, X1, DX, BX)
	Q6COMBINE((R9), X10)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  q6kloop
	VZEROUPPER
	MOVSS X10, ret+48(FP)
	RET


// iq4nlGrid is kvaluesIQ4NL, the 4-bit grid of IQ4_NL and IQ4_XS, as
// VPSHUFB's table.
DATA iq4nlGrid<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA iq4nlGrid<>+8(SB)/8, $0x7159453526190d01
GLOBL iq4nlGrid<>(SB), RODATA|NOPTR, $16

// bitBytes spreads a 32-bit word over 32 bytes: VPSHUFB with bitShuf puts
// byte i/8 at byte i, and OR with bitMask leaves 0xff where bit i is set.
DATA bitShuf<>+0(SB)/8, $0x0000000000000000
DATA bitShuf<>+8(SB)/8, $0x0101010101010101
DATA bitShuf<>+16(SB)/8, $0x0202020202020202
DATA bitShuf<>+24(SB)/8, $0x0303030303030303
GLOBL bitShuf<>(SB), RODATA|NOPTR, $32
DATA bitMask<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitMask<>+8(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitMask<>+16(SB)/8, $0x7fbfdfeff7fbfdfe
DATA bitMask<>+24(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL bitMask<>(SB), RODATA|NOPTR, $32

// SIGNEDDOT: 32 signed values in YQ times the 32 activations in YX, as
// 16 int16 pair sums in YQ (|q| · x·sign(q): VPMADDUBSW needs one unsigned
// operand; |q|, |x| ≤ 127, so no pair sum saturates). Uses Y5.
#define SIGNEDDOT(YQ, YX) \
	VPSIGNB    YQ, YQ, Y5 \
	VPSIGNB    YQ, YX, YX \
	VPMADDUBSW YX, Y5, YQ

// NIBBLES32: the 16 bytes at OFF(SI) as 32 nibbles in YQ, low nibbles
// first (elements 0..15), then high ones (16..31). Uses Y2.
#define NIBBLES32(OFF, YQ) \
	VMOVDQU     OFF(SI), X1 \
	VPSRLW      $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, YQ \
	VPAND       Y15, YQ, YQ

// IQ4XSSUB: sub-block IB of an IQ4_XS block (scales_h in R12), with
// scale nibble SHIFT of byte SB at 4(SI), added into Y0.
#define IQ4XSSUB(IB, SB, SHIFT) \
	NIBBLES32(8+16*IB, Y1) \
	VPSHUFB      Y1, Y13, Y1 \
	VMOVDQU      (32*IB)(DI), Y3 \
	SIGNEDDOT(Y1, Y3) \
	MOVBLZX      (4+SB)(SI), AX \
	SHRL         $SHIFT, AX \
	ANDL         $15, AX \
	MOVL         R12, BX \
	SHRL         $(2*IB), BX \
	ANDL         $3, BX \
	SHLL         $4, BX \
	ORL          BX, AX \
	SUBL         $32, AX \
	VMOVD        AX, X6 \
	VPBROADCASTW X6, Y6 \
	VPMADDWD     Y6, Y1, Y1 \
	VPADDD       Y1, Y0, Y0

// func dotIQ4XSRow(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32
TEXT ·dotIQ4XSRow(SB), NOSPLIT, $0-52
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xd+16(FP), R9
	MOVQ nb+32(FP), CX
	MOVQ tab+40(FP), R11
	NIBMASK
	VBROADCASTI128 iq4nlGrid<>(SB), Y13
	VXORPS X10, X10, X10

iq4xsloop:
	MOVWLZX 2(SI), R12
	VPXOR   Y0, Y0, Y0
	IQ4XSSUB(0, 0, 0)
	IQ4XSSUB(1, 0, 4)
	IQ4XSSUB(2, 1, 0)
	IQ4XSSUB(3, 1, 4)
	IQ4XSSUB(4, 2, 0)
	IQ4XSSUB(5, 2, 4)
	IQ4XSSUB(6, 3, 0)
	IQ4XSSUB(7, 3, 4)
	HSUM8(Y0, X0, X1, DX)
	HALF(0, X3)
	VMULSS     (R9), X3, X3
	VCVTSI2SSL DX, X4, X4
	VMULSS     X4, X3, X3
	VADDSS     X3, X10, X10
	ADDQ $136, SI
	ADDQ $256, DI
	ADDQ $4, R9
	DECQ CX
	JNZ  iq4xsloop
	VZEROUPPER
	MOVSS X10, ret+48(FP)
	RET

// The 32-element types, against Q8_0 activations (xd one scale per 32;
// for Q4_1 and Q5_1, ms the blocks' f16-rounded d·Σq). Each block's
// 16 int16 pair sums in Y1 are summed (VPMADDWD by ones in Y12) into DX.

#define BLOCKSUM \
	VPMADDWD Y12, Y1, Y1 \
	HSUM8(Y1, X1, X3, DX)

// D32COMBINE adds float32(d·dx)·float32(sumi) into X10.
#define D32COMBINE \
	HALF(0, X3) \
	VMULSS     (R9), X3, X3 \
	VCVTSI2SSL DX, X4, X4 \
	VMULSS     X4, X3, X3 \
	VADDSS     X3, X10, X10

// M32COMBINE adds float32(d·dx)·float32(sumi) + float32(m·ms) into X10.
#define M32COMBINE \
	HALF(0, X3) \
	VMULSS     (R9), X3, X3 \
	VCVTSI2SSL DX, X4, X4 \
	VMULSS     X4, X3, X3 \
	HALF(2, X5) \
	VMULSS     (R10), X5, X5 \
	VADDSS     X5, X3, X3 \
	VADDSS     X3, X10, X10

// HIGHBITS ORs bit i of the 32-bit word at OFF(SI) as 0x10 into byte i of YQ.
#define HIGHBITS(OFF, YQ) \
	VPBROADCASTD OFF(SI), Y2 \
	VPSHUFB      Y14, Y2, Y2 \
	VPOR         Y13, Y2, Y2 \
	VPCMPEQB     Y11, Y2, Y2 \
	VPAND        Y9, Y2, Y2 \
	VPOR         Y2, YQ, YQ

#define ROW32NEXT(BYTES, LOOP) \
	ADDQ $BYTES, SI \
	ADDQ $32, DI \
	ADDQ $4, R9 \
	ADDQ $4, R10 \
	DECQ CX \
	JNZ  LOOP \
	VZEROUPPER \
	MOVSS X10, ret+48(FP) \
	RET

// HIGHBITSCONST loads HIGHBITS' constants.
#define HIGHBITSCONST \
	VMOVDQU  bitShuf<>(SB), Y14 \
	VMOVDQU  bitMask<>(SB), Y13 \
	VPCMPEQB Y11, Y11, Y11 \
	MOVL         $0x10101010, AX \
	VMOVD        AX, X9 \
	VPBROADCASTD X9, Y9

// func dotQ4_0Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
TEXT ·dotQ4_0Row(SB), NOSPLIT, $0-52
	ROW32PROLOGUE
	MOVL         $0x08080808, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8

q40loop:
	NIBBLES32(2, Y1)
	VPSUBB  Y8, Y1, Y1
	VMOVDQU (DI), Y3
	SIGNEDDOT(Y1, Y3)
	BLOCKSUM
	D32COMBINE
	ROW32NEXT(18, q40loop)

// func dotIQ4NLRow(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
TEXT ·dotIQ4NLRow(SB), NOSPLIT, $0-52
	ROW32PROLOGUE
	VBROADCASTI128 iq4nlGrid<>(SB), Y13

iq4nlloop:
	NIBBLES32(2, Y1)
	VPSHUFB Y1, Y13, Y1
	VMOVDQU (DI), Y3
	SIGNEDDOT(Y1, Y3)
	BLOCKSUM
	D32COMBINE
	ROW32NEXT(18, iq4nlloop)

// mxfp4Grid is kvaluesMXFP4, E2M1 doubled, as VPSHUFB's table.
DATA mxfp4Grid<>+0(SB)/8, $0x0c08060403020100
DATA mxfp4Grid<>+8(SB)/8, $0xf4f8fafcfdfeff00
GLOBL mxfp4Grid<>(SB), RODATA|NOPTR, $16

// func dotMXFP4Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
// As dotIQ4NLRow on MXFP4's grid; the scale is the E8M0 byte at 0(SI),
// halved through tab (e8m0HalfTable).
TEXT ·dotMXFP4Row(SB), NOSPLIT, $0-52
	ROW32PROLOGUE
	VBROADCASTI128 mxfp4Grid<>(SB), Y13

mxfp4loop:
	NIBBLES32(1, Y1)
	VPSHUFB Y1, Y13, Y1
	VMOVDQU (DI), Y3
	SIGNEDDOT(Y1, Y3)
	BLOCKSUM
	MOVBLZX    (SI), AX
	VMOVSS     (R11)(AX*4), X3
	VMULSS     (R9), X3, X3
	VCVTSI2SSL DX, X4, X4
	VMULSS     X4, X3, X3
	VADDSS     X3, X10, X10
	ROW32NEXT(17, mxfp4loop)

// func dotQ5_0Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
TEXT ·dotQ5_0Row(SB), NOSPLIT, $0-52
	ROW32PROLOGUE
	HIGHBITSCONST
	MOVL         $0x10101010, AX
	VMOVD        AX, X8
	VPBROADCASTD X8, Y8

q50loop:
	NIBBLES32(6, Y1)
	HIGHBITS(2, Y1)
	VPSUBB  Y8, Y1, Y1
	VMOVDQU (DI), Y3
	SIGNEDDOT(Y1, Y3)
	BLOCKSUM
	D32COMBINE
	ROW32NEXT(22, q50loop)

// func dotQ4_1Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
TEXT ·dotQ4_1Row(SB), NOSPLIT, $0-52
	ROW32PROLOGUE

q41loop:
	NIBBLES32(4, Y1)
	VPMADDUBSW (DI), Y1, Y1
	BLOCKSUM
	M32COMBINE
	ROW32NEXT(20, q41loop)

// func dotQ5_1Row(q *byte, x *int8, xd *float32, ms *float32, nb int, tab *float32) float32
TEXT ·dotQ5_1Row(SB), NOSPLIT, $0-52
	ROW32PROLOGUE
	HIGHBITSCONST

q51loop:
	NIBBLES32(8, Y1)
	HIGHBITS(4, Y1)
	VPMADDUBSW (DI), Y1, Y1
	BLOCKSUM
	M32COMBINE
	ROW32NEXT(24, q51loop)

// Two activation rows at once: KHALF2 is KHALF into Y0 (first row) and Y8
// (second, at R14).
#define KHALF2(YQ, XOFF, SOFF) \
	VPBROADCASTW SOFF(SP), Y6 \
	VPMADDUBSW   XOFF(R14), YQ, Y7 \
	VPMADDUBSW   XOFF(DI), YQ, YQ \
	VPMADDWD     Y6, Y7, Y7 \
	VPMADDWD     Y6, YQ, YQ \
	VPADDD       Y7, Y8, Y8 \
	VPADDD       YQ, Y0, Y0

#define Q4KGROUP2(G) \
	VMOVDQU (16+32*G)(SI), Y1 \
	VPAND   Y15, Y1, Y2 \
	VPSRLW  $4, Y1, Y3 \
	VPAND   Y15, Y3, Y3 \
	KHALF2(Y2, 64*G, 4*G) \
	KHALF2(Y3, 64*G+32, 4*G+2)

// func dotQ4KRow2(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)
TEXT ·dotQ4KRow2(SB), NOSPLIT, $32-72
	ROW2PROLOGUE
	VXORPS X10, X10, X10
	VXORPS X12, X12, X12

q4k2loop:
	KSCALES
	VPMADDWD (R10)(R8*8), Y2, Y11
	VPXOR Y0, Y0, Y0
	VPXOR Y8, Y8, Y8
	Q4KGROUP2(0)
	Q4KGROUP2(1)
	Q4KGROUP2(2)
	Q4KGROUP2(3)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)
	HSUM2V(Y8, Y11, X8, X1)
	KCOMBINE(X8, (R9)(R8*1), X12)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $256, R14
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  q4k2loop
	ROW2STORE(X10, X12)

#define Q6KQUARTER2(YU, XOFF, SOFF) \
	VPBROADCASTW SOFF(SP), X6 \
	VPBROADCASTW SOFF+2(SP), X7 \
	VINSERTI128  $1, X7, Y6, Y6 \
	VPMADDUBSW   XOFF(R14), YU, Y7 \
	VPMADDUBSW   XOFF(DI), YU, YU \
	VPMADDWD     Y6, Y7, Y7 \
	VPMADDWD     Y6, YU, YU \
	VPADDD       Y7, Y9, Y9 \
	VPADDD       YU, Y0, Y0

#define Q6KHALF2(N) \
	VMOVDQU (64*N)(SI), Y1 \
	VMOVDQU (64*N+32)(SI), Y2 \
	VMOVDQU (128+32*N)(SI), Y3 \
	VPAND   Y15, Y1, Y4 \
	VPSLLW  $4, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER2(Y4, 128*N, 16*N) \
	VPAND   Y15, Y2, Y4 \
	VPSLLW  $2, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER2(Y4, 128*N+32, 16*N+4) \
	VPSRLW  $4, Y1, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPAND   Y14, Y3, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER2(Y4, 128*N+64, 16*N+8) \
	VPSRLW  $4, Y2, Y4 \
	VPAND   Y15, Y4, Y4 \
	VPSRLW  $2, Y3, Y5 \
	VPAND   Y14, Y5, Y5 \
	VPOR    Y5, Y4, Y4 \
	Q6KQUARTER2(Y4, 128*N+96, 16*N+12)

// func dotQ6KRow2(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)
TEXT ·dotQ6KRow2(SB), NOSPLIT, $32-72
	ROW2PROLOGUE
	MOVL $0x30303030, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	VXORPS X10, X10, X10
	VXORPS X13, X13, X13

q6k2loop:
	VPMOVSXBW 192(SI), Y1
	VMOVDQU   Y1, 0(SP)
	VPMADDWD  (R10), Y1, Y11
	VPMADDWD  (R10)(R8*8), Y1, Y12
	VPXOR Y0, Y0, Y0
	VPXOR Y9, Y9, Y9
	Q6KHALF2(0)
	Q6KHALF2(1)
	HSUM2(Y0, Y11, X0, X1, DX, BX)
	Q6COMBINE((R9), X10)
	HSUM2(Y9, Y12, X9, X1, DX, BX)
	Q6COMBINE((R9)(R8*1), X13)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $256, R14
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  q6k2loop
	ROW2STORE(X10, X13)

// --- AVX-512BW (512-bit) Q4_K, Q5_K and Q6_K row kernels ---
//
// The same integer sums as the AVX2 kernels, 64 values per instruction:
// a zmm holds one 64-element group (Q4_K) or quarter (Q6_K) of a block,
// laid out as its activations are, and VPERMW spreads the block's scales
// over the VPMADDUBSW pair sums. The float part is KCOMBINE/Q6COMBINE, so
// the bits are the portable kernels'. Q5_K follows Q4_K. Extra registers: Z15 0x0f bytes,
// Z16–Z19 VPERMW indices, Z20/Z21 shift counts.

// q4kPerm: VPERMW indices spreading a Q4_K block's 8 int16 scales over
// its four 64-element groups (group G at 64·G bytes): 16 words of
// scale 2G, then 16 of scale 2G+1, one per VPMADDUBSW pair sum.
DATA q4kPerm<>+0(SB)/8, $0x0000000000000000
DATA q4kPerm<>+8(SB)/8, $0x0000000000000000
DATA q4kPerm<>+16(SB)/8, $0x0000000000000000
DATA q4kPerm<>+24(SB)/8, $0x0000000000000000
DATA q4kPerm<>+32(SB)/8, $0x0001000100010001
DATA q4kPerm<>+40(SB)/8, $0x0001000100010001
DATA q4kPerm<>+48(SB)/8, $0x0001000100010001
DATA q4kPerm<>+56(SB)/8, $0x0001000100010001
DATA q4kPerm<>+64(SB)/8, $0x0002000200020002
DATA q4kPerm<>+72(SB)/8, $0x0002000200020002
DATA q4kPerm<>+80(SB)/8, $0x0002000200020002
DATA q4kPerm<>+88(SB)/8, $0x0002000200020002
DATA q4kPerm<>+96(SB)/8, $0x0003000300030003
DATA q4kPerm<>+104(SB)/8, $0x0003000300030003
DATA q4kPerm<>+112(SB)/8, $0x0003000300030003
DATA q4kPerm<>+120(SB)/8, $0x0003000300030003
DATA q4kPerm<>+128(SB)/8, $0x0004000400040004
DATA q4kPerm<>+136(SB)/8, $0x0004000400040004
DATA q4kPerm<>+144(SB)/8, $0x0004000400040004
DATA q4kPerm<>+152(SB)/8, $0x0004000400040004
DATA q4kPerm<>+160(SB)/8, $0x0005000500050005
DATA q4kPerm<>+168(SB)/8, $0x0005000500050005
DATA q4kPerm<>+176(SB)/8, $0x0005000500050005
DATA q4kPerm<>+184(SB)/8, $0x0005000500050005
DATA q4kPerm<>+192(SB)/8, $0x0006000600060006
DATA q4kPerm<>+200(SB)/8, $0x0006000600060006
DATA q4kPerm<>+208(SB)/8, $0x0006000600060006
DATA q4kPerm<>+216(SB)/8, $0x0006000600060006
DATA q4kPerm<>+224(SB)/8, $0x0007000700070007
DATA q4kPerm<>+232(SB)/8, $0x0007000700070007
DATA q4kPerm<>+240(SB)/8, $0x0007000700070007
DATA q4kPerm<>+248(SB)/8, $0x0007000700070007
GLOBL q4kPerm<>(SB), RODATA|NOPTR, $256

// q6kPerm: the same for Q6_K's 16 scales, one per 16 elements: quarter
// M (64 elements) takes scales 4M to 4M+3, 8 words each.
DATA q6kPerm<>+0(SB)/8, $0x0000000000000000
DATA q6kPerm<>+8(SB)/8, $0x0000000000000000
DATA q6kPerm<>+16(SB)/8, $0x0001000100010001
DATA q6kPerm<>+24(SB)/8, $0x0001000100010001
DATA q6kPerm<>+32(SB)/8, $0x0002000200020002
DATA q6kPerm<>+40(SB)/8, $0x0002000200020002
DATA q6kPerm<>+48(SB)/8, $0x0003000300030003
DATA q6kPerm<>+56(SB)/8, $0x0003000300030003
DATA q6kPerm<>+64(SB)/8, $0x0004000400040004
DATA q6kPerm<>+72(SB)/8, $0x0004000400040004
DATA q6kPerm<>+80(SB)/8, $0x0005000500050005
DATA q6kPerm<>+88(SB)/8, $0x0005000500050005
DATA q6kPerm<>+96(SB)/8, $0x0006000600060006
DATA q6kPerm<>+104(SB)/8, $0x0006000600060006
DATA q6kPerm<>+112(SB)/8, $0x0007000700070007
DATA q6kPerm<>+120(SB)/8, $0x0007000700070007
DATA q6kPerm<>+128(SB)/8, $0x0008000800080008
DATA q6kPerm<>+136(SB)/8, $0x0008000800080008
DATA q6kPerm<>+144(SB)/8, $0x0009000900090009
DATA q6kPerm<>+152(SB)/8, $0x0009000900090009
DATA q6kPerm<>+160(SB)/8, $0x000a000a000a000a
DATA q6kPerm<>+168(SB)/8, $0x000a000a000a000a
DATA q6kPerm<>+176(SB)/8, $0x000b000b000b000b
DATA q6kPerm<>+184(SB)/8, $0x000b000b000b000b
DATA q6kPerm<>+192(SB)/8, $0x000c000c000c000c
DATA q6kPerm<>+200(SB)/8, $0x000c000c000c000c
DATA q6kPerm<>+208(SB)/8, $0x000d000d000d000d
DATA q6kPerm<>+216(SB)/8, $0x000d000d000d000d
DATA q6kPerm<>+224(SB)/8, $0x000e000e000e000e
DATA q6kPerm<>+232(SB)/8, $0x000e000e000e000e
DATA q6kPerm<>+240(SB)/8, $0x000f000f000f000f
DATA q6kPerm<>+248(SB)/8, $0x000f000f000f000f
GLOBL q6kPerm<>(SB), RODATA|NOPTR, $256

// Per-qword shift counts: the low 256 bits by the first, the high 256
// bits by the second (a broadcast 32 bytes serves both halves).
DATA shift0and4<>+0(SB)/8, $0
DATA shift0and4<>+8(SB)/8, $0
DATA shift0and4<>+16(SB)/8, $0
DATA shift0and4<>+24(SB)/8, $0
DATA shift0and4<>+32(SB)/8, $4
DATA shift0and4<>+40(SB)/8, $4
DATA shift0and4<>+48(SB)/8, $4
DATA shift0and4<>+56(SB)/8, $4
GLOBL shift0and4<>(SB), RODATA|NOPTR, $64
DATA shift4and2<>+0(SB)/8, $4
DATA shift4and2<>+8(SB)/8, $4
DATA shift4and2<>+16(SB)/8, $4
DATA shift4and2<>+24(SB)/8, $4
DATA shift4and2<>+32(SB)/8, $2
DATA shift4and2<>+40(SB)/8, $2
DATA shift4and2<>+48(SB)/8, $2
DATA shift4and2<>+56(SB)/8, $2
GLOBL shift4and2<>(SB), RODATA|NOPTR, $64
DATA shift0and2<>+0(SB)/8, $0
DATA shift0and2<>+8(SB)/8, $0
DATA shift0and2<>+16(SB)/8, $0
DATA shift0and2<>+24(SB)/8, $0
DATA shift0and2<>+32(SB)/8, $2
DATA shift0and2<>+40(SB)/8, $2
DATA shift0and2<>+48(SB)/8, $2
DATA shift0and2<>+56(SB)/8, $2
GLOBL shift0and2<>(SB), RODATA|NOPTR, $64

#define ZNIBMASK \
	MOVL         $0x0f0f0f0f, AX \
	VMOVD        AX, X15 \
	VPBROADCASTD X15, Z15

// ZPERMS loads the four VPERMW index vectors at TAB into Z16–Z19.
#define ZPERMS(TAB) \
	VMOVDQU64 TAB+0(SB), Z16 \
	VMOVDQU64 TAB+64(SB), Z17 \
	VMOVDQU64 TAB+128(SB), Z18 \
	VMOVDQU64 TAB+192(SB), Z19

// ZFOLD adds the high 256 bits of ZA into its low half YA (uses Y3).
#define ZFOLD(ZA, YA) \
	VEXTRACTI64X4 $1, ZA, Y3 \
	VPADDD        Y3, YA, YA

// Z4KQUANTS: group G's 64 unsigned nibbles into Z2 (the 32 bytes
// broadcast to both halves, the high half shifted to its high nibbles)
// and its scales, one per pair sum, into Z3.
#define Z4KQUANTS(G, ZP) \
	VBROADCASTI64X4 (16+32*G)(SI), Z2 \
	VPSRLVQ         Z20, Z2, Z2 \
	VPANDQ          Z15, Z2, Z2 \
	VPERMW          Z1, ZP, Z3

#define Z4KGROUP(G, ZP) \
	Z4KQUANTS(G, ZP) \
	VPMADDUBSW (64*G)(DI), Z2, Z2 \
	VPMADDWD   Z3, Z2, Z2 \
	VPADDD     Z2, Z0, Z0

// Z4KGRPB: group G of the block at SOFF(SI) (activations at XOFF(DI)),
// its scales spread by VPSHUFB (indices ZP) from ZSC, added into ACC.
#define Z4KGRPB(G, ZP, ZSC, SOFF, XOFF, ACC) \
	VBROADCASTI64X4 (SOFF+16+32*G)(SI), Z2 \
	VPSRLVQ         Z20, Z2, Z2 \
	VPANDQ          Z15, Z2, Z2 \
	VPSHUFB         ZP, ZSC, Z3 \
	VPMADDUBSW      (XOFF+64*G)(DI), Z2, Z2 \
	VPMADDWD        Z3, Z2, Z2 \
	VPADDD          Z2, ACC, ACC

// func dotQ4KRows512(q *byte, rowBytes int, x *int8, xd *float32, bsums *int16, nb int, rows int, out *float32)
// The dot products of rows ≥ 1 consecutive rows (rowBytes apart) with one
// activation row, into out[0…rows-1]: one call per matrix slice instead of
// one per row, and the constants loaded once.
// Two blocks per iteration: both blocks' scales unpacked at once by
// shuffles (one block per 128-bit lane), their min sums in one zmm, and
// the four sums reduced together; the float part, per block in order, is
// KCOMBINE's operations lane by lane. An odd last block takes the
// one-block path.
TEXT ·dotQ4KRows512(SB), NOSPLIT, $32-64
	MOVQ q+0(FP), R11
	ZNIBMASK
	VMOVDQU64 shift0and4<>(SB), Z20
	VMOVDQU64 q4kScaleB<>+0(SB), Z21
	VMOVDQU64 q4kScaleB<>+64(SB), Z22
	VMOVDQU64 q4kScaleB<>+128(SB), Z23
	VMOVDQU64 q4kScaleB<>+192(SB), Z24
	VMOVDQU64 q4kUnpackLo<>(SB), Y25
	VMOVDQU64 q4kUnpackHi<>(SB), Y26
	VMOVDQU64 q4kUnpackShift<>(SB), Y27
	VMOVDQU64 q4kUnpackMask<>(SB), Y28
	VMOVDQU64 q4kMinDup<>(SB), Y29
	MOVL         $0x30303030, AX
	VMOVD        AX, X30
	VPBROADCASTD X30, Y30

zq4krow:
	MOVQ   R11, SI
	MOVQ   x+16(FP), DI
	MOVQ   xd+24(FP), R9
	MOVQ   bsums+32(FP), R10
	MOVQ   nb+40(FP), CX
	VXORPS X10, X10, X10
	MOVQ CX, R8
	SHRQ $1, CX
	JZ   zq4ktail

zq4kpair:
	// Scales and mins of blocks A (SI) and B (SI+144).
	VMOVDQU      4(SI), X1
	VINSERTI128  $1, 148(SI), Y1, Y1
	VPSHUFB      Y25, Y1, Y2
	VPSRLVD      Y27, Y2, Y2
	VPANDD       Y28, Y2, Y2
	VPSHUFB      Y26, Y1, Y3
	VPSRLW       $2, Y3, Y3
	VPANDD       Y30, Y3, Y3
	VPOR         Y3, Y2, Y2
	VPSHUFB      Y29, Y2, Y3
	VPMOVZXBW    Y3, Z3
	VPMADDWD     (R10), Z3, Z9
	VPMOVZXBW    X2, Y4
	VSHUFI32X4   $0, Z4, Z4, Z4
	VEXTRACTI128 $1, Y2, X5
	VPMOVZXBW    X5, Y5
	VSHUFI32X4   $0, Z5, Z5, Z5
	VPXORD       Z0, Z0, Z0
	VPXORD       Z8, Z8, Z8
	Z4KGRPB(0, Z21, Z4, 0, 0, Z0)
	Z4KGRPB(0, Z21, Z5, 144, 256, Z8)
	Z4KGRPB(1, Z22, Z4, 0, 0, Z0)
	Z4KGRPB(1, Z22, Z5, 144, 256, Z8)
	Z4KGRPB(2, Z23, Z4, 0, 0, Z0)
	Z4KGRPB(2, Z23, Z5, 144, 256, Z8)
	Z4KGRPB(3, Z24, Z4, 0, 0, Z0)
	Z4KGRPB(3, Z24, Z5, 144, 256, Z8)
	// Reduce to [sumi A, summ A, sumi B, summ B] in X4.
	VEXTRACTI64X4 $1, Z0, Y6
	VPADDD        Y6, Y0, Y0
	VEXTRACTI64X4 $1, Z8, Y6
	VPADDD        Y6, Y8, Y8
	VINSERTI64X4  $1, Y8, Z0, Z0
	VPUNPCKLQDQ   Z9, Z0, Z6
	VPUNPCKHQDQ   Z9, Z0, Z7
	VPADDD        Z7, Z6, Z6
	VSHUFI64X2    $0xb1, Z6, Z6, Z7
	VPADDD        Z7, Z6, Z6
	VEXTRACTI32X4 $2, Z6, X7
	VPHADDD       X7, X6, X4
	// KCOMBINE for A then B.
	VCVTDQ2PS    X4, X4
	VMOVD        (SI), X3
	VPINSRD      $1, 144(SI), X3, X3
	VCVTPH2PS    X3, X3
	VMOVQ        (R9), X5
	VUNPCKLPS    X5, X5, X5
	VMULPS       X5, X3, X3
	VMULPS       X4, X3, X3
	VMOVSHDUP    X3, X5
	VSUBPS       X5, X3, X3
	VADDSS       X3, X10, X10
	VMOVHLPS     X3, X3, X5
	VADDSS       X5, X10, X10
	ADDQ $288, SI
	ADDQ $512, DI
	ADDQ $8, R9
	ADDQ $64, R10
	DECQ CX
	JNZ  zq4kpair

zq4ktail:
	TESTQ $1, R8
	JZ    zq4kdone
	KSCALES
	VSHUFI32X4 $0, Z1, Z1, Z4
	VPXORD     Z0, Z0, Z0
	Z4KGRPB(0, Z21, Z4, 0, 0, Z0)
	Z4KGRPB(1, Z22, Z4, 0, 0, Z0)
	Z4KGRPB(2, Z23, Z4, 0, 0, Z0)
	Z4KGRPB(3, Z24, Z4, 0, 0, Z0)
	ZFOLD(Z0, Y0)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)

zq4kdone:
	MOVQ  out+56(FP), AX
	MOVSS X10, (AX)
	ADDQ  $4, AX
	MOVQ  AX, out+56(FP)
	ADDQ  rowBytes+8(FP), R11
	DECQ  rows+48(FP)
	JNZ   zq4krow
	VZEROUPPER
	RET

#define Z4KGROUP2(G, ZP) \
	Z4KQUANTS(G, ZP) \
	VPMADDUBSW (64*G)(DI), Z2, Z4 \
	VPMADDUBSW (64*G)(R14), Z2, Z5 \
	VPMADDWD   Z3, Z4, Z4 \
	VPMADDWD   Z3, Z5, Z5 \
	VPADDD     Z4, Z0, Z0 \
	VPADDD     Z5, Z8, Z8

// func dotQ4KRow2512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)
TEXT ·dotQ4KRow2512(SB), NOSPLIT, $32-72
	ROW2PROLOGUE
	ZNIBMASK
	ZPERMS(q4kPerm<>)
	VMOVDQU64 shift0and4<>(SB), Z20
	VXORPS X10, X10, X10
	VXORPS X12, X12, X12

zq4k2loop:
	KSCALES
	VPMADDWD (R10)(R8*8), Y2, Y11
	VPXORD Z0, Z0, Z0
	VPXORD Z8, Z8, Z8
	Z4KGROUP2(0, Z16)
	Z4KGROUP2(1, Z17)
	Z4KGROUP2(2, Z18)
	Z4KGROUP2(3, Z19)
	ZFOLD(Z0, Y0)
	ZFOLD(Z8, Y8)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)
	HSUM2V(Y8, Y11, X8, X1)
	KCOMBINE(X8, (R9)(R8*1), X12)
	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $256, R14
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  zq4k2loop
	ROW2STORE(X10, X12)

// Z6KQUANTS: quarters 2N and 2N+1 of a Q6_K block as unsigned 6-bit
// values in Z4 and Z5: the 64 ql bytes at 64·N give the low nibbles of
// quarter 2N and the high nibbles of 2N+1; the 32 qh bytes, broadcast to
// both halves, give the two high bits of each (bits 0–1 and 2–3 for
// quarter 2N, 4–5 and 6–7 for 2N+1), shifted into 0x30.
#define Z6KQUANTS(N) \
	VMOVDQU64       (64*N)(SI), Z2 \
	VBROADCASTI64X4 (128+32*N)(SI), Z3 \
	VPANDQ          Z15, Z2, Z4 \
	VPSLLVQ         Z20, Z3, Z6 \
	VPANDQ          Z14, Z6, Z6 \
	VPORQ           Z6, Z4, Z4 \
	VPSRLQ          $4, Z2, Z5 \
	VPANDQ          Z15, Z5, Z5 \
	VPSRLVQ         Z21, Z3, Z6 \
	VPANDQ          Z14, Z6, Z6 \
	VPORQ           Z6, Z5, Z5

// Z6KQUARTER: the 64 values in ZU times the activations at XOFF(DI),
// weighted by their scales (VPERMW with indices ZP), added into Z0.
#define Z6KQUARTER(ZU, XOFF, ZP) \
	VPMADDUBSW XOFF(DI), ZU, ZU \
	VPERMW     Z1, ZP, Z6 \
	VPMADDWD   Z6, ZU, ZU \
	VPADDD     ZU, Z0, Z0

#define Z6KHALF(N, ZPA, ZPB) \
	Z6KQUANTS(N) \
	Z6KQUARTER(Z4, 128*N, ZPA) \
	Z6KQUARTER(Z5, 128*N+64, ZPB)

#define Z6KCONSTS \
	ZNIBMASK \
	MOVL         $0x30303030, AX \
	VMOVD        AX, X14 \
	VPBROADCASTD X14, Z14 \
	ZPERMS(q6kPerm<>) \
	VMOVDQU64    shift4and2<>(SB), Z20 \
	VMOVDQU64    shift0and2<>(SB), Z21

// func dotQ6KRows512(q *byte, rowBytes int, x *int8, xd *float32, bsums *int16, nb int, rows int, out *float32)
// As dotQ6KRow, for rows ≥ 1 consecutive rows (rowBytes apart) into
// out[0…rows-1] (as dotQ4KRows512): values unsigned (0..63),
// 32·Σ sc_j·bsum_j subtracted.
TEXT ·dotQ6KRows512(SB), NOSPLIT, $0-64
	MOVQ q+0(FP), R11
	Z6KCONSTS

zq6krow:
	MOVQ   R11, SI
	MOVQ   x+16(FP), DI
	MOVQ   xd+24(FP), R9
	MOVQ   bsums+32(FP), R10
	MOVQ   nb+40(FP), CX
	VXORPS X10, X10, X10

zq6kloop:
	VPMOVSXBW 192(SI), Y1
	VPMADDWD  (R10), Y1, Y8
	VPXORD    Z0, Z0, Z0
	Z6KHALF(0, Z16, Z17)
	Z6KHALF(1, Z18, Z19)
	ZFOLD(Z0, Y0)
	HSUM2(Y0, Y8, X0, X1, DX, BX)
	Q6COMBINE((R9), X10)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  zq6kloop
	MOVQ  out+56(FP), AX
	MOVSS X10, (AX)
	ADDQ  $4, AX
	MOVQ  AX, out+56(FP)
	ADDQ  rowBytes+8(FP), R11
	DECQ  rows+48(FP)
	JNZ   zq6krow
	VZEROUPPER
	RET

#define Z6KQUARTER2(ZU, XOFF, ZP) \
	VPERMW     Z1, ZP, Z6 \
	VPMADDUBSW XOFF(R14), ZU, Z7 \
	VPMADDUBSW XOFF(DI), ZU, ZU \
	VPMADDWD   Z6, Z7, Z7 \
	VPMADDWD   Z6, ZU, ZU \
	VPADDD     Z7, Z9, Z9 \
	VPADDD     ZU, Z0, Z0

#define Z6KHALF2(N, ZPA, ZPB) \
	Z6KQUANTS(N) \
	Z6KQUARTER2(Z4, 128*N, ZPA) \
	Z6KQUARTER2(Z5, 128*N+64, ZPB)

// func dotQ6KRow2512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32, cols int, out *float32, ostride int)
TEXT ·dotQ6KRow2512(SB), NOSPLIT, $0-72
	ROW2PROLOGUE
	Z6KCONSTS
	VXORPS X10, X10, X10
	VXORPS X13, X13, X13

zq6k2loop:
	VPMOVSXBW 192(SI), Y1
	VPMADDWD  (R10), Y1, Y11
	VPMADDWD  (R10)(R8*8), Y1, Y12
	VPXORD    Z0, Z0, Z0
	VPXORD    Z9, Z9, Z9
	Z6KHALF2(0, Z16, Z17)
	Z6KHALF2(1, Z18, Z19)
	ZFOLD(Z0, Y0)
	ZFOLD(Z9, Y9)
	HSUM2(Y0, Y11, X0, X1, DX, BX)
	Q6COMBINE((R9), X10)
	HSUM2(Y9, Y12, X9, X1, DX, BX)
	Q6COMBINE((R9)(R8*1), X13)
	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $256, R14
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  zq6k2loop
	ROW2STORE(X10, X13)

// Z5KGROUP: as Z4KGROUP, with the fifth bits of group G from the 32 qh
// bytes broadcast in Z14, shifted right by 2G (Z14 >>= 2 after each
// group): bit 0 for the low nibbles, bit 1 for the high ones, moved to
// 0x10 by the shift counts in Z21 and masked by Z13.
#define Z5KGROUP(G, ZP) \
	VBROADCASTI64X4 (48+32*G)(SI), Z2 \
	VPSRLVQ         Z20, Z2, Z2 \
	VPANDQ          Z15, Z2, Z2 \
	VPSLLVQ         Z21, Z14, Z4 \
	VPANDQ          Z13, Z4, Z4 \
	VPORQ           Z4, Z2, Z2 \
	VPSRLQ          $2, Z14, Z14 \
	VPERMW          Z1, ZP, Z3 \
	VPMADDUBSW      (64*G)(DI), Z2, Z2 \
	VPMADDWD        Z3, Z2, Z2 \
	VPADDD          Z2, Z0, Z0

// func dotQ5KRow512(q *byte, x *int8, xd *float32, bsums *int16, nb int, tab *float32) float32
TEXT ·dotQ5KRow512(SB), NOSPLIT, $32-52
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xd+16(FP), R9
	MOVQ bsums+24(FP), R10
	MOVQ nb+32(FP), CX
	MOVQ tab+40(FP), R11
	ZNIBMASK
	ZPERMS(q4kPerm<>)
	VMOVDQU64    shift0and4<>(SB), Z20
	VMOVDQU64    shift4and3<>(SB), Z21
	MOVL         $0x10101010, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Z13
	VXORPS       X10, X10, X10

zq5kloop:
	KSCALES
	VBROADCASTI64X4 16(SI), Z14
	VPXORD          Z0, Z0, Z0
	Z5KGROUP(0, Z16)
	Z5KGROUP(1, Z17)
	Z5KGROUP(2, Z18)
	Z5KGROUP(3, Z19)
	ZFOLD(Z0, Y0)
	HSUM2V(Y0, Y9, X0, X1)
	KCOMBINE(X0, (R9), X10)
	ADDQ $176, SI
	ADDQ $256, DI
	ADDQ $4, R9
	ADDQ $32, R10
	DECQ CX
	JNZ  zq5kloop
	VZEROUPPER
	MOVSS X10, ret+48(FP)
	RET

DATA shift4and3<>+0(SB)/8, $4
DATA shift4and3<>+8(SB)/8, $4
DATA shift4and3<>+16(SB)/8, $4
DATA shift4and3<>+24(SB)/8, $4
DATA shift4and3<>+32(SB)/8, $3
DATA shift4and3<>+40(SB)/8, $3
DATA shift4and3<>+48(SB)/8, $3
DATA shift4and3<>+56(SB)/8, $3
GLOBL shift4and3<>(SB), RODATA|NOPTR, $64

// --- Two-block AVX-512BW Q4_K kernel constants ---

// q4kScaleB: VPSHUFB indices spreading a block's 8 int16 scales, broadcast
// to every 128-bit lane, over its four 64-element groups (as q4kPerm).
DATA q4kScaleB<>+0(SB)/8, $0x0100010001000100
DATA q4kScaleB<>+8(SB)/8, $0x0100010001000100
DATA q4kScaleB<>+16(SB)/8, $0x0100010001000100
DATA q4kScaleB<>+24(SB)/8, $0x0100010001000100
DATA q4kScaleB<>+32(SB)/8, $0x0302030203020302
DATA q4kScaleB<>+40(SB)/8, $0x0302030203020302
DATA q4kScaleB<>+48(SB)/8, $0x0302030203020302
DATA q4kScaleB<>+56(SB)/8, $0x0302030203020302
DATA q4kScaleB<>+64(SB)/8, $0x0504050405040504
DATA q4kScaleB<>+72(SB)/8, $0x0504050405040504
DATA q4kScaleB<>+80(SB)/8, $0x0504050405040504
DATA q4kScaleB<>+88(SB)/8, $0x0504050405040504
DATA q4kScaleB<>+96(SB)/8, $0x0706070607060706
DATA q4kScaleB<>+104(SB)/8, $0x0706070607060706
DATA q4kScaleB<>+112(SB)/8, $0x0706070607060706
DATA q4kScaleB<>+120(SB)/8, $0x0706070607060706
DATA q4kScaleB<>+128(SB)/8, $0x0908090809080908
DATA q4kScaleB<>+136(SB)/8, $0x0908090809080908
DATA q4kScaleB<>+144(SB)/8, $0x0908090809080908
DATA q4kScaleB<>+152(SB)/8, $0x0908090809080908
DATA q4kScaleB<>+160(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScaleB<>+168(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScaleB<>+176(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScaleB<>+184(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kScaleB<>+192(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScaleB<>+200(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScaleB<>+208(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScaleB<>+216(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kScaleB<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScaleB<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScaleB<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kScaleB<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q4kScaleB<>(SB), RODATA|NOPTR, $256

// q4kUnpack*: the 12 scale bytes b0…b11 (loaded from 4(SI), one block per
// 128-bit lane) become [sc0…sc7, m0…m7]: the low bits by q4kUnpackLo
// (b0–3, b8–11, b4–7, b8–11; the last dword shifted right by 4), masked by
// q4kUnpackMask; the top two bits of sc4–7 and m4–7 from b0–3 and b4–7
// (q4kUnpackHi), moved to 0x30.
DATA q4kUnpackLo<>+0(SB)/8, $0x0b0a090803020100
DATA q4kUnpackLo<>+8(SB)/8, $0x0b0a090807060504
DATA q4kUnpackLo<>+16(SB)/8, $0x0b0a090803020100
DATA q4kUnpackLo<>+24(SB)/8, $0x0b0a090807060504
GLOBL q4kUnpackLo<>(SB), RODATA|NOPTR, $32
DATA q4kUnpackHi<>+0(SB)/8, $0x0302010080808080
DATA q4kUnpackHi<>+8(SB)/8, $0x0706050480808080
DATA q4kUnpackHi<>+16(SB)/8, $0x0302010080808080
DATA q4kUnpackHi<>+24(SB)/8, $0x0706050480808080
GLOBL q4kUnpackHi<>(SB), RODATA|NOPTR, $32
DATA q4kUnpackShift<>+0(SB)/8, $0x0000000000000000
DATA q4kUnpackShift<>+8(SB)/8, $0x0000000400000000
DATA q4kUnpackShift<>+16(SB)/8, $0x0000000000000000
DATA q4kUnpackShift<>+24(SB)/8, $0x0000000400000000
GLOBL q4kUnpackShift<>(SB), RODATA|NOPTR, $32
DATA q4kUnpackMask<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kUnpackMask<>+8(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kUnpackMask<>+16(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA q4kUnpackMask<>+24(SB)/8, $0x0f0f0f0f3f3f3f3f
GLOBL q4kUnpackMask<>(SB), RODATA|NOPTR, $32

// q4kMinDup: each of the 8 mins (bytes 8–15) twice, one per bsum.
DATA q4kMinDup<>+0(SB)/8, $0x0b0b0a0a09090808
DATA q4kMinDup<>+8(SB)/8, $0x0f0f0e0e0d0d0c0c
DATA q4kMinDup<>+16(SB)/8, $0x0b0b0a0a09090808
DATA q4kMinDup<>+24(SB)/8, $0x0f0f0e0e0d0d0c0c
GLOBL q4kMinDup<>(SB), RODATA|NOPTR, $32

// MXFP4 on AVX-512 (VBMI, VNNI): four rows at a time, two blocks per zmm.
// Each row's block pair (34 bytes, a masked load) is spread by VPERMB into
// [A's 16 quant bytes twice, B's twice], low nibbles kept in the first and
// third 128-bit lanes, high ones in the others, and looked up in the grid
// biased by 12 (0…24, unsigned for VPDPBUSD) against the pair's 64
// activations; 12·Σx per block (xs4) is taken off after the four rows'
// sums are reduced together. Each lane of the float part is one row: the
// scale float32(d·dx) by VSCALEFPS (dx·2^(e−128), rounded once, as the
// product with the exact power of two is), times float32(sumi), added
// into that row's sum (X16), block A before B: the portable kernel's
// operations row by row, so its bits.

// mxfp4Nib is VPERMB's index: lanes 0 and 1 bytes 1…16 (block A's
// quants), lanes 2 and 3 bytes 18…33 (B's).
DATA mxfp4Nib<>+0(SB)/8, $0x0807060504030201
DATA mxfp4Nib<>+8(SB)/8, $0x100f0e0d0c0b0a09
DATA mxfp4Nib<>+16(SB)/8, $0x0807060504030201
DATA mxfp4Nib<>+24(SB)/8, $0x100f0e0d0c0b0a09
DATA mxfp4Nib<>+32(SB)/8, $0x1918171615141312
DATA mxfp4Nib<>+40(SB)/8, $0x21201f1e1d1c1b1a
DATA mxfp4Nib<>+48(SB)/8, $0x1918171615141312
DATA mxfp4Nib<>+56(SB)/8, $0x21201f1e1d1c1b1a
GLOBL mxfp4Nib<>(SB), RODATA|NOPTR, $64

// mxfp4Shift: 16-bit shift counts, 0 in lanes 0 and 2, 4 in lanes 1 and 3.
DATA mxfp4Shift<>+0(SB)/8, $0
DATA mxfp4Shift<>+8(SB)/8, $0
DATA mxfp4Shift<>+16(SB)/8, $0x0004000400040004
DATA mxfp4Shift<>+24(SB)/8, $0x0004000400040004
DATA mxfp4Shift<>+32(SB)/8, $0
DATA mxfp4Shift<>+40(SB)/8, $0
DATA mxfp4Shift<>+48(SB)/8, $0x0004000400040004
DATA mxfp4Shift<>+56(SB)/8, $0x0004000400040004
GLOBL mxfp4Shift<>(SB), RODATA|NOPTR, $64

// mxfp4GridBiased is kvaluesMXFP4 + 12, four times over: VPERMB reads
// an index's low 6 bits, so a nibble with garbage in bits 4 and 5 (a
// shifted word's) still finds its value.
DATA mxfp4GridBiased<>+0(SB)/8, $0x181412100f0e0d0c
DATA mxfp4GridBiased<>+8(SB)/8, $0x00040608090a0b0c
DATA mxfp4GridBiased<>+16(SB)/8, $0x181412100f0e0d0c
DATA mxfp4GridBiased<>+24(SB)/8, $0x00040608090a0b0c
DATA mxfp4GridBiased<>+32(SB)/8, $0x181412100f0e0d0c
DATA mxfp4GridBiased<>+40(SB)/8, $0x00040608090a0b0c
DATA mxfp4GridBiased<>+48(SB)/8, $0x181412100f0e0d0c
DATA mxfp4GridBiased<>+56(SB)/8, $0x00040608090a0b0c
GLOBL mxfp4GridBiased<>(SB), RODATA|NOPTR, $64

// mxfp4E1 gathers two rows' scale bytes (0 and 17 of each, the second row
// in the second table) as bytes 0, 1 (block A) and 4, 5 (block B);
// mxfp4E2 merges two such results as [A r0…r3, B r0…r3].
DATA mxfp4E1<>+0(SB)/8, $0x0000511100004000
GLOBL mxfp4E1<>(SB), RODATA|NOPTR, $64
DATA mxfp4E2<>+0(SB)/8, $0x4544050441400100
GLOBL mxfp4E2<>(SB), RODATA|NOPTR, $64

// MXROW: one row's block pair at ADDR (load mask KW) against the pair's
// activations in Z24: raw bytes into ZR, the biased quants' dot products
// with the activations in ZD's 16 int32 lanes (A in the low 256 bits).
#define MXROW(ADDR, KW, ZR, ZQ, ZD) \
	VMOVDQU8.Z ADDR, KW, ZR \
	VPERMB     ZR, Z31, ZQ \
	VPSRLVW    Z30, ZQ, ZQ \
	VPERMB     Z28, ZQ, ZQ \
	VPXORD     ZD, ZD, ZD \
	VPDPBUSD   Z24, ZQ, ZD

// MXCOMBINE reduces Z0…Z3 (rows 0…3) to [A r0…r3, B r0…r3] in Y6, takes
// off 12·Σx (xs4 at R10), and leaves float32(d·dx)·float32(sumi) in Y5
// (scales from the raw pairs in Z8…Z11, dx4 at R9).
#define MXCOMBINE \
	VPUNPCKLDQ    Z1, Z0, Z4 \
	VPUNPCKHDQ    Z1, Z0, Z5 \
	VPADDD        Z5, Z4, Z4 \
	VPUNPCKLDQ    Z3, Z2, Z5 \
	VPUNPCKHDQ    Z3, Z2, Z6 \
	VPADDD        Z6, Z5, Z5 \
	VPUNPCKLQDQ   Z5, Z4, Z6 \
	VPUNPCKHQDQ   Z5, Z4, Z7 \
	VPADDD        Z7, Z6, Z6 \
	VSHUFI32X4    $0xb1, Z6, Z6, Z7 \
	VPADDD        Z7, Z6, Z6 \
	VSHUFI32X4    $0x08, Z6, Z6, Z6 \
	VPSUBD        (R10), Y6, Y6 \
	VCVTDQ2PS     Y6, Y6 \
	VPERMT2B      Z9, Z27, Z8 \
	VPERMT2B      Z11, Z27, Z10 \
	VPERMT2B      Z10, Z26, Z8 \
	VPMOVZXBD     X8, Y8 \
	VPSUBD        Y25, Y8, Y8 \
	VCVTDQ2PS     Y8, Y8 \
	VMOVUPS       (R9), Y5 \
	VSCALEFPS     Y8, Y5, Y5 \
	VMULPS        Y6, Y5, Y5

// func dotMXFP4Rows512(q *byte, rowBytes int, x *int8, xs4 *int32, xd4 *float32, nb int, rows int, out *float32)
// rows (a multiple of 4) consecutive MXFP4 rows, rowBytes apart, against
// one activation row x of nb blocks, into out[0…rows-1]. xs4 and xd4 hold
// each block's 12·Σx and dx four times over, and one block more (read,
// unused, after an odd last block).
TEXT ·dotMXFP4Rows512(SB), NOSPLIT, $0-64
	MOVQ q+0(FP), R11
	MOVQ rowBytes+8(FP), BX
	LEAQ (BX)(BX*2), DX
	MOVQ out+56(FP), R12
	MOVQ rows+48(FP), R13
	VMOVDQU64 mxfp4Nib<>(SB), Z31
	VMOVDQU64 mxfp4Shift<>(SB), Z30
	VMOVDQU64 mxfp4GridBiased<>(SB), Z28
	VMOVDQU64 mxfp4E1<>(SB), Z27
	VMOVDQU64 mxfp4E2<>(SB), Z26
	MOVL         $128, AX
	VPBROADCASTD AX, Y25
	MOVQ $0x3ffffffff, AX
	KMOVQ AX, K1
	MOVQ $0x1ffff, AX
	KMOVQ AX, K2
	MOVL $0xffffffff, AX
	KMOVQ AX, K3

mxgroup:
	MOVQ   R11, SI
	LEAQ   (R11)(BX*4), R14
	MOVQ   x+16(FP), DI
	MOVQ   xs4+24(FP), R10
	MOVQ   xd4+32(FP), R9
	MOVQ   nb+40(FP), CX
	VPXORD X16, X16, X16
	SHRQ   $1, CX
	JZ     mxtail

mxpair:
	// The four rows are four short streams, which the hardware
	// prefetchers follow poorly; the next group's rows are prefetched as
	// one (3 lines a pair: more than its 136 bytes a pair).
	PREFETCHT0 (R14)
	PREFETCHT0 64(R14)
	PREFETCHT0 128(R14)
	ADDQ       $192, R14
	VMOVDQU64 (DI), Z24
	MXROW((SI), K1, Z8, Z12, Z0)
	MXROW((SI)(BX*1), K1, Z9, Z13, Z1)
	MXROW((SI)(BX*2), K1, Z10, Z14, Z2)
	MXROW((SI)(DX*1), K1, Z11, Z15, Z3)
	MXCOMBINE
	VADDPS       X5, X16, X16
	VEXTRACTF128 $1, Y5, X5
	VADDPS       X5, X16, X16
	ADDQ $34, SI
	ADDQ $64, DI
	ADDQ $32, R10
	ADDQ $32, R9
	DECQ CX
	JNZ  mxpair

mxtail:
	MOVQ  nb+40(FP), AX
	TESTQ $1, AX
	JZ    mxdone
	VMOVDQU8.Z (DI), K3, Z24
	MXROW((SI), K2, Z8, Z12, Z0)
	MXROW((SI)(BX*1), K2, Z9, Z13, Z1)
	MXROW((SI)(BX*2), K2, Z10, Z14, Z2)
	MXROW((SI)(DX*1), K2, Z11, Z15, Z3)
	MXCOMBINE
	VADDPS X5, X16, X16

mxdone:
	VMOVUPS X16, (R12)
	ADDQ    $16, R12
	LEAQ    (R11)(BX*4), R11
	SUBQ    $4, R13
	JNZ     mxgroup
	VZEROUPPER
	RET

// A4ROW: one row's MXFP4 block (quants at QADDR) against its 32
// activations in Y8: the biased grid values' 8 int32 pair-of-pair sums in
// YD. Uses Y1, Y2.
#define A4ROW(QADDR, YD) \
	VMOVDQU     QADDR, X1 \
	VPSRLW      $4, X1, X2 \
	VINSERTI128 $1, X2, Y1, Y1 \
	VPAND       Y15, Y1, Y1 \
	VPSHUFB     Y1, Y14, Y1 \
	VPMADDUBSW  Y8, Y1, Y1 \
	VPMADDWD    Y13, Y1, YD

// func dotMXFP4Rows4(q *byte, rowBytes int, x *int8, xs4 *int32, xd4 *float32, nb int, rows int, out *float32)
// dotMXFP4Rows512 on AVX2: four rows a block, one row per float lane of
// X10, the grid biased by 12 for VPMADDUBSW and 12·Σx (xs4) taken off; the
// scales 2^(e−128) built from the four exponent bytes as e8m0Half builds
// them ((e−1)<<23, or 0x200000<<e below 2), times dx rounded once.
TEXT ·dotMXFP4Rows4(SB), NOSPLIT, $0-64
	MOVQ q+0(FP), R11
	MOVQ rowBytes+8(FP), BX
	LEAQ (BX)(BX*2), DX
	MOVQ out+56(FP), R12
	MOVQ rows+48(FP), R13
	NIBMASK
	VBROADCASTI128 mxfp4GridBiased<>(SB), Y14
	MOVL         $0x00010001, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	MOVL         $0xff, AX
	VMOVD        AX, X12
	VPBROADCASTD X12, X12
	MOVL         $1, AX
	VMOVD        AX, X11
	VPBROADCASTD X11, X11
	MOVL         $0x00200000, AX
	VMOVD        AX, X9
	VPBROADCASTD X9, X9

a4group:
	MOVQ   R11, SI
	MOVQ   x+16(FP), DI
	MOVQ   xs4+24(FP), R10
	MOVQ   xd4+32(FP), R9
	MOVQ   nb+40(FP), CX
	LEAQ   (R11)(BX*4), R14
	VXORPS X10, X10, X10

a4loop:
	// As dotMXFP4Rows512, the next four rows as one stream (2 lines a
	// block: more than its 68 bytes).
	PREFETCHT0 (R14)
	PREFETCHT0 64(R14)
	ADDQ       $128, R14
	VMOVDQU (DI), Y8
	A4ROW(1(SI), Y0)
	A4ROW(1(SI)(BX*1), Y3)
	A4ROW(1(SI)(BX*2), Y4)
	A4ROW(1(SI)(DX*1), Y5)
	VPHADDD      Y3, Y0, Y0
	VPHADDD      Y5, Y4, Y4
	VPHADDD      Y4, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD       X1, X0, X0
	VPSUBD       (R10), X0, X0
	VCVTDQ2PS    X0, X0
	VMOVD        (SI), X4
	VPINSRD      $1, (SI)(BX*1), X4, X4
	VPINSRD      $2, (SI)(BX*2), X4, X4
	VPINSRD      $3, (SI)(DX*1), X4, X4
	VPAND        X12, X4, X4
	VPSUBD       X11, X4, X5
	VPSLLD       $23, X5, X5
	VPSLLVD      X4, X9, X6
	VPCMPGTD     X11, X4, X7
	VBLENDVPS    X7, X5, X6, X5
	VMULPS       (R9), X5, X5
	VMULPS       X0, X5, X5
	VADDPS       X5, X10, X10
	ADDQ $17, SI
	ADDQ $32, DI
	ADDQ $16, R10
	ADDQ $16, R9
	DECQ CX
	JNZ  a4loop
	VMOVUPS X10, (R12)
	ADDQ    $16, R12
	LEAQ    (R11)(BX*4), R11
	SUBQ    $4, R13
	JNZ     a4group
	VZEROUPPER
	RET
