package main

import "fmt"

// The AMX kernel of the interleaved Q4_K layout: 16 rows against 16
// tokens. A sub-block's 32 columns are one tile product (TDPBSUD: the
// tokens' signed Q8_K bytes by the rows' unsigned nibbles), whose exact
// int32 sums are scaled by the sub-block's scales as the VNNI kernels
// scale theirs. The per-super-block float combine is q4k's, operation for
// operation, so the outputs are the same bits as gemmQ4K1's and gemmQ4K4's.
//
// The Go assembler knows no AMX instructions; they are written as bytes
// (VEX encodings from Intel's SDM, checked against the VNNI kernels by
// engine's tests).

// The scratch (tmp) the caller passes: the tile configuration, the
// unpacked nibbles of one super-block's 8 sub-blocks (each a B tile of 8
// rows of 64 bytes), two stored product tiles, and the 16 tokens' float
// accumulators (16 × 64 bytes: engine's amxScratch ends there).
const (
	amxB   = 64
	amxC   = amxB + 8*512
	amxAcc = amxC + 2*16*64
)

// vex3 writes a 3-byte-VEX instruction of map 0F38 as bytes.
func (g *gen) vex3(comment string, rxb, vvvvLpp byte, rest ...byte) {
	b := append([]byte{0xC4, rxb<<5 | 0x02, vvvvLpp}, rest...)
	s := ""
	for i, v := range b {
		if i > 0 {
			s += "; "
		}
		s += fmt.Sprintf("BYTE $0x%02X", v)
	}
	g.f("%s // %s", s, comment)
}

// tileLoad writes TILELOADD of tile t from base+index+disp (a SIB byte;
// rxb the VEX's inverted R, X and B bits).
func (g *gen) tileLoad(t int, mem string, rxb, sib byte, disp int) {
	g.vex3(fmt.Sprintf("TILELOADD %d%s, tmm%d", disp, mem, t), rxb, 0x7B, append([]byte{0x4B, 0x84 | byte(t)<<3, sib}, le32(disp)...)...)
}

func le32(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// q4kAMX writes gemmQ4K16AMX. Registers: Z0–Z15 the tokens' integer sums
// of the super-block, Z16–Z17 unpacking, Z18–Z21 the mins, Z24–Z25 a
// sub-block's scales and product, Z26–Z29 and Z22–Z23 the float combine,
// Z30 an accumulator, Z31 the nibble mask. DI the scratch, DX 64 (the
// tiles' stride in it). The accumulators stay in the scratch: the sums
// take half the registers.
func (g *gen) q4kAMX() {
	name := "gemmQ4K16AMX"
	fmt.Fprintf(&g.Buffer, "\n// func %s(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte)\n", name)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-72\n", name)
	g.args(bsShift["Q4K"])
	g.f("MOVQ tmp+64(FP), DI")
	g.f("MOVQ $64, DX")
	g.vex3("LDTILECFG (DI)", 0b111, 0x78, 0x49, 0x07)
	g.f("MOVL $0x0f0f0f0f, R11")
	g.f("VPBROADCASTD R11, Z31")
	g.f("VPXORD Z16, Z16, Z16")
	for m := 0; m < 16; m++ {
		g.f("VPXORD %s, %s, %s", z(m), z(m), z(m))
		g.f("VMOVUPS Z16, %d(DI)", amxAcc+64*m)
	}
	loop := name + "blk"
	g.label(loop)
	// The nibbles of pair p's column k: sub-block 2p's low, 2p+1's high;
	// a column of 16 rows × 4 bytes is row k of the sub-block's B tile.
	for p := 0; p < 4; p++ {
		for k := 0; k < 8; k++ {
			g.f("VMOVDQU64 %d(SI), Z16", p*512+k*64)
			g.f("VPANDD Z31, Z16, Z17")
			g.f("VMOVDQU64 Z17, %d(DI)", amxB+(2*p)*512+k*64)
			g.f("VPSRLW $4, Z16, Z16")
			g.f("VPANDD Z31, Z16, Z16")
			g.f("VMOVDQU64 Z16, %d(DI)", amxB+(2*p+1)*512+k*64)
		}
	}
	// Sub-block s's product goes to tmm0 or tmm3 by turns (its tokens'
	// bytes to tmm1 or tmm4, its nibbles to tmm2 or tmm5), so the tile unit
	// computes it while the vector unit scales s−1's.
	for s := 0; s <= 8; s++ {
		if s < 8 {
			c, a, b := 3*(s%2), 3*(s%2)+1, 3*(s%2)+2
			g.tileLoad(b, "(DI)(DX*1)", 0b111, 0x17, amxB+512*s)
			g.tileLoad(a, "(R8)(R12*1)", 0b100, 0x20, 32*s)
			g.vex3(fmt.Sprintf("TILEZERO tmm%d", c), 0b111, 0x7B, 0x49, 0xC0|byte(c)<<3)
			g.vex3(fmt.Sprintf("TDPBSUD tmm%d, tmm%d, tmm%d", b, a, c), 0b111, (^byte(b)&15)<<3|0b010, 0x5E, 0xC0|byte(c)<<3|byte(a))
			g.vex3(fmt.Sprintf("TILESTORED tmm%d, (DI)(DX*1)", c), 0b111, 0x7A, append([]byte{0x4B, 0x84 | byte(c)<<3, 0x17}, le32(amxC+1024*(s%2))...)...)
		}
		if s == 0 {
			continue
		}
		g.f("VPMOVZXBD %d(SI), Z24", q4kSc+16*(s-1))
		for m := 0; m < 16; m++ {
			g.f("VPMULLD %d(DI), Z24, Z25", amxC+1024*((s-1)%2)+64*m)
			g.f("VPADDD Z25, %s, %s", z(m), z(m))
		}
	}
	for p := 0; p < 4; p++ {
		g.f("VPMOVZXBW %d(SI), %s", q4kMin+32*p, z(18+p))
	}
	g.f("VCVTPH2PS %d(SI), Z26", q4kD)
	g.f("VCVTPH2PS %d(SI), Z27", q4kDmin)
	// Token m's scale at xd + m·4nb, its sums of 32 at bs + m·16nb.
	g.f("MOVQ R9, R11")
	g.f("MOVQ BX, R13")
	for m := 0; m < 16; m++ {
		g.f("VPXORD Z22, Z22, Z22")
		for p := 0; p < 4; p++ {
			g.f("VPDPWSSD.BCST %d(R13), %s, Z22", 4*p, z(18+p))
		}
		g.combineK("(R11)", z(m), "Z22", "Z23")
		// acc + term, as q4k adds (a NaN's payload follows the order).
		g.f("VMOVUPS %d(DI), Z30", amxAcc+64*m)
		g.f("VADDPS Z28, Z30, Z30")
		g.f("VMOVUPS Z30, %d(DI)", amxAcc+64*m)
		g.f("VPXORD %s, %s, %s", z(m), z(m), z(m))
		if m < 15 {
			g.f("ADDQ R10, R11")
			g.f("ADDQ AX, R13")
		}
	}
	g.f("ADDQ $%d, SI", q4kGSB)
	g.f("ADDQ $256, R8")
	g.f("ADDQ $4, R9")
	g.f("ADDQ $16, BX")
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
	g.vex3("TILERELEASE", 0b111, 0x78, 0x49, 0xC0)
	g.f("MOVQ out+48(FP), R11")
	g.f("MOVQ os+56(FP), R12")
	for m := 0; m < 16; m++ {
		g.f("VMOVUPS %d(DI), Z28", amxAcc+64*m)
		g.f("VMOVUPS Z28, (R11)")
		if m < 15 {
			g.f("ADDQ R12, R11")
		}
	}
	g.f("VZEROUPPER")
	g.f("RET")
}
