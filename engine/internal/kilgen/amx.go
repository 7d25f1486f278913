package main

import "fmt"

// The AMX kernels of the interleaved Q4_K layout: 16 rows against 16 or
// 32 tokens. A sub-block's 6-bit scale sc is split as sc = 4h + l (h <
// 16, l < 4), and expandQ4KAMX multiplies the nibbles q by each part once
// per group of rows: q·h ≤ 225 and q·l ≤ 45 are bytes. So a super-block
// is two tile products of 256 columns (TDPBSUD: the tokens' signed Q8_K
// bytes by those unsigned bytes), H = Σ q·h·x and L = Σ q·l·x, and 4H + L
// is Σ_j sc_j·(Σ q·x over sub-block j) exactly, the integer the VNNI
// kernels sum. The per-super-block float combine is q4k's, operation for
// operation, so the outputs are the same bits as gemmQ4K1's and gemmQ4K4's.
// (Scaling each sub-block's tile product with vector multiplies instead
// left the tile unit idle most of the time.)
//
// The Go assembler knows no AMX instructions; they are written as bytes
// (VEX encodings from Intel's SDM, checked against the VNNI kernels by
// engine's tests).

// The scratch (tmp) the caller passes: the tile configuration, two areas
// of stored products (a super-block's H and L tiles for each 16 tokens),
// and the 32 tokens' float accumulators (engine's amxScratch ends there).
// The expanded weights are a buffer of their own: per super-block 4 chunks
// of 64 columns, each an H tile then an L tile of 16 lines × 64 bytes (a
// line 4 columns of the 16 rows).
const (
	amxC    = 64
	amxArea = 2 * 1024
	amxExp  = 8 * 1024 // expanded bytes per super-block
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

// A tile instruction's memory operand: base + index·1 + disp32, with its
// registers' numbers (0–15) and names.
type tmem struct {
	base, index int
	disp        int
}

var gpr = map[string]int{"AX": 0, "CX": 1, "DX": 2, "BX": 3, "SI": 6, "DI": 7,
	"R8": 8, "R9": 9, "R10": 10, "R11": 11, "R12": 12, "R13": 13, "R14": 14, "R15": 15}

func mem(base, index string, disp int) tmem { return tmem{gpr[base], gpr[index], disp} }

func (m tmem) String() string {
	name := func(r int) string {
		for k, v := range gpr {
			if v == r {
				return k
			}
		}
		return "?"
	}
	return fmt.Sprintf("%d(%s)(%s*1)", m.disp, name(m.base), name(m.index))
}

// tileMem writes a tile load (pp 3: F2) or store (pp 2: F3) of tile t.
func (g *gen) tileMem(comment string, pp byte, t int, m tmem) {
	rxb := byte(0b100) | byte(^m.index>>3&1)<<1 | byte(^m.base>>3&1)
	sib := byte(m.index&7)<<3 | byte(m.base&7)
	g.vex3(comment, rxb, 0x78|pp, append([]byte{0x4B, 0x84 | byte(t)<<3, sib}, le32(m.disp)...)...)
}

func (g *gen) tileLoad(t int, m tmem) {
	g.tileMem(fmt.Sprintf("TILELOADD %s, tmm%d", m, t), 3, t, m)
}

func (g *gen) tileStore(t int, m tmem) {
	g.tileMem(fmt.Sprintf("TILESTORED tmm%d, %s", t, m), 2, t, m)
}

func (g *gen) tileZero(t int) {
	g.vex3(fmt.Sprintf("TILEZERO tmm%d", t), 0b111, 0x7B, 0x49, 0xC0|byte(t)<<3)
}

// tdpbsud writes TDPBSUD c += a·b (a's bytes signed, b's unsigned).
func (g *gen) tdpbsud(c, a, b int) {
	g.vex3(fmt.Sprintf("TDPBSUD tmm%d, tmm%d, tmm%d", b, a, c), 0b111, (^byte(b)&15)<<3|0b010, 0x5E, 0xC0|byte(c)<<3|byte(a))
}

func le32(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// q4kAMXExpand writes expandQ4KAMX(w *byte, nb int, dst *byte): the H and
// L tiles of a group's nb super-blocks. Each 64 bytes of nibbles hold
// column k of sub-blocks 2p (low) and 2p+1 (high): lines k and 8+k of
// chunk p's tiles. VPMULLW multiplies two bytes at once: q0 + 256·q1
// times h is q0·h + 256·q1·h, neither part carrying.
func (g *gen) q4kAMXExpand() {
	name := "expandQ4KAMX"
	fmt.Fprintf(&g.Buffer, "\n// func %s(w *byte, nb int, dst *byte)\n", name)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-24\n", name)
	g.f("MOVQ w+0(FP), SI")
	g.f("MOVQ nb+8(FP), CX")
	g.f("MOVQ dst+16(FP), DI")
	g.f("MOVL $0x0f0f0f0f, R11")
	g.f("VPBROADCASTD R11, Z31")
	g.f("MOVL $3, R11")
	g.f("VPBROADCASTD R11, Z30")
	loop := name + "blk"
	g.label(loop)
	for p := 0; p < 4; p++ {
		// Z20, Z21 (Z22, Z23): h and l of sub-block 2p (2p+1), a row's
		// in both words of its dword.
		for i, s := range []int{2 * p, 2*p + 1} {
			h, l := z(20+2*i), z(21+2*i)
			g.f("VPMOVZXBD %d(SI), Z24", q4kSc+16*s)
			g.f("VPSRLD $2, Z24, %s", h)
			g.f("VPSLLD $16, %s, Z25", h)
			g.f("VPORD Z25, %s, %s", h, h)
			g.f("VPANDD Z30, Z24, %s", l)
			g.f("VPSLLD $16, %s, Z25", l)
			g.f("VPORD Z25, %s, %s", l, l)
		}
		for k := 0; k < 8; k++ {
			g.f("VMOVDQU64 %d(SI), Z16", p*512+k*64)
			g.f("VPANDD Z31, Z16, Z17")
			g.f("VPSRLW $4, Z16, Z16")
			g.f("VPANDD Z31, Z16, Z16")
			for i, st := range []struct {
				mul, src string
				off      int
			}{{"Z20", "Z17", k * 64}, {"Z21", "Z17", 1024 + k*64}, {"Z22", "Z16", (8 + k) * 64}, {"Z23", "Z16", 1024 + (8+k)*64}} {
				g.f("VPMULLW %s, %s, %s", st.mul, st.src, z(i))
				g.f("VMOVDQU64 %s, %d(DI)", z(i), p*2048+st.off)
			}
		}
	}
	g.f("ADDQ $%d, SI", q4kGSB)
	g.f("ADDQ $%d, DI", amxExp)
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
	g.f("VZEROUPPER")
	g.f("RET")
}

// q4kAMX writes gemmQ4K16AMX: 16 rows of expanded weights (e) against nt
// tiles of 16 tokens, one after the other (one tile configuration for
// them all). Tiles: tmm0 (tmm1) the H (L) product, tmm2+c%2 the tokens'
// bytes of chunk c, tmm4+c%2 (tmm6+c%2) its H (L) weights: a chunk's
// loads need not wait for the last chunk's products. A super-block's
// products are stored to one area while the vector unit combines the
// last one's from the other (R15 and R10, swapped each super-block).
//
// Registers: Z0–Z15 the tokens' float accumulators, R14 the expanded
// weights, SI the layout's (its d, dmin and mins), CX the super-blocks
// left, R8 the tokens' bytes and R12 their stride, R9 the scales and BX
// the extras of the super-block being combined, AX their token stride
// (4nb) and R11 a token's offset (its extras at 4·R11), DI the scratch,
// DX 64, R13 the tiles left. Each tile starts again from the arguments,
// its tokens 16 on.
func (g *gen) q4kAMX() {
	name := "gemmQ4K16AMX"
	fmt.Fprintf(&g.Buffer, "\n// func %s(e *byte, w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int, tmp *byte, nt int)\n", name)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-88\n", name)
	g.f("MOVQ tmp+72(FP), DI")
	g.f("MOVQ nt+80(FP), R13")
	g.f("MOVQ $64, DX")
	g.vex3("LDTILECFG (DI)", 0b111, 0x78, 0x49, 0x07)
	tile := name + "tile"
	g.label(tile)
	g.f("MOVQ e+0(FP), R14")
	g.f("MOVQ w+8(FP), SI")
	g.f("MOVQ nb+16(FP), CX")
	g.f("MOVQ x+24(FP), R8")
	g.f("MOVQ xs+32(FP), R12")
	g.f("MOVQ xd+40(FP), R9")
	g.f("MOVQ bs+48(FP), BX")
	g.f("MOVQ CX, AX")
	g.f("SHLQ $2, AX")
	g.f("LEAQ %d(DI), R15", amxC)
	g.f("LEAQ %d(DI), R10", amxC+amxArea)
	for m := 0; m < 16; m++ {
		g.f("VPXORD %s, %s, %s", z(m), z(m), z(m))
	}
	products := func() {
		g.tileZero(0)
		g.tileZero(1)
		for c := 0; c < 4; c++ {
			a, bh, bl := 2+c%2, 4+c%2, 6+c%2
			g.tileLoad(a, mem("R8", "R12", 64*c))
			g.tileLoad(bh, mem("R14", "DX", c*2048))
			g.tileLoad(bl, mem("R14", "DX", c*2048+1024))
			g.tdpbsud(0, a, bh)
			g.tdpbsud(1, a, bl)
		}
		g.tileStore(0, mem("R15", "DX", 0))
		g.tileStore(1, mem("R15", "DX", 1024))
		g.f("ADDQ $%d, R14", amxExp)
		g.f("ADDQ $256, R8")
	}
	combine := func() {
		for p := 0; p < 4; p++ {
			g.f("VPMOVZXBW %d(SI), %s", q4kMin+32*p, z(18+p))
		}
		g.f("VCVTPH2PS %d(SI), Z26", q4kD)
		g.f("VCVTPH2PS %d(SI), Z27", q4kDmin)
		g.f("XORQ R11, R11")
		for m := 0; m < 16; m++ {
			g.f("VMOVDQU32 %d(R10), Z24", 64*m)
			g.f("VPSLLD $2, Z24, Z24")
			g.f("VPADDD %d(R10), Z24, Z24", 1024+64*m)
			g.f("VPXORD Z22, Z22, Z22")
			for p := 0; p < 4; p++ {
				g.f("VPDPWSSD.BCST %d(BX)(R11*4), %s, Z22", 4*p, z(18+p))
			}
			g.combineK("(R9)(R11*1)", "Z24", "Z22", "Z23")
			// acc + term, as q4k adds (a NaN's payload follows the order).
			g.f("VADDPS Z28, %s, %s", z(m), z(m))
			if m < 15 {
				g.f("ADDQ AX, R11")
			}
		}
		g.f("ADDQ $%d, SI", q4kGSB)
		g.f("ADDQ $4, R9")
		g.f("ADDQ $16, BX")
	}
	products()
	g.f("XCHGQ R15, R10")
	loop, last := name+"blk", name+"last"
	g.f("DECQ CX")
	g.f("JZ %s", last)
	g.label(loop)
	products()
	combine()
	g.f("XCHGQ R15, R10")
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
	g.label(last)
	combine()
	// The tile's outputs, then the next tile's arguments: x, xd, bs and
	// out 16 tokens on.
	g.f("MOVQ out+56(FP), R11")
	g.f("MOVQ os+64(FP), R12")
	for m := 0; m < 16; m++ {
		g.f("VMOVUPS %s, (R11)", z(m))
		g.f("ADDQ R12, R11")
	}
	g.f("MOVQ R11, out+56(FP)")
	g.f("MOVQ xs+32(FP), R12")
	g.f("SHLQ $4, R12")
	g.f("ADDQ R12, x+24(FP)")
	g.f("SHLQ $4, AX")
	g.f("ADDQ AX, xd+40(FP)")
	g.f("SHLQ $2, AX")
	g.f("ADDQ AX, bs+48(FP)")
	g.f("DECQ R13")
	g.f("JNZ %s", tile)
	g.vex3("TILERELEASE", 0b111, 0x78, 0x49, 0xC0)
	g.f("VZEROUPPER")
	g.f("RET")
}
