package main

import "fmt"

// The AMX kernels of the interleaved Q4_K and Q6_K layouts: 16 rows
// against 16 tokens at a time. A tile product (TDPBSUD or TDPBSSD) sums
// the tokens' signed Q8_K bytes times weight bytes over 64 columns, so
// the sub-blocks' scales must be in the weights' bytes: an expand kernel
// multiplies each quant by parts of its scale, once per group of rows and
// 128 tokens, and a super-block is a few products of 256 columns whose
// int32 sums, shifted and added, are exactly the integer the VNNI
// kernels sum. The per-super-block float combine is theirs, operation for
// operation, so the outputs are the same bits as gemmQ4K1's and
// gemmQ4K4's (gemmQ6K1's and gemmQ6K4's).
//
//   - Q4_K: sc = 4h + l (h < 16, l < 4); q·h ≤ 225 and q·l ≤ 45 are
//     unsigned bytes; H = Σ q·h·x and L = Σ q·l·x; 4H + L is Σ_j sc_j·(Σ
//     q·x over sub-block j).
//   - Q6_K: v = q − 32 (−32…31) and the signed scale sc = d0 + 8·d1 +
//     64·d2 with digits −3…4, so v·d is a signed byte; S0 + 8·(S1 +
//     8·S2) is Σ_j sc_j·(Σ (q − 32)·x over sub-block j).
//
// (Scaling each sub-block's tile product with vector multiplies instead
// left the tile unit idle most of the time.)
//
// The Go assembler knows no AMX instructions; they are written as bytes
// (VEX encodings from Intel's SDM, checked against the VNNI kernels by
// engine's tests).

// amxKind is one layout's AMX kernels.
type amxKind struct {
	name     string
	sets     int // tile products per super-block and 64 columns
	signed   bool
	gsb      int // the layout's bytes per group and super-block
	d        int // its 16 f16 scales' offset
	expanded int // expanded bytes per super-block
}

var (
	amxQ4K = amxKind{name: "Q4K", sets: 2, gsb: q4kGSB, d: q4kD, expanded: 8 << 10}
	amxQ6K = amxKind{name: "Q6K", sets: 3, signed: true, gsb: q6kGSB, d: q6kD, expanded: 12 << 10}
)

// The scratch (tmp) the caller passes: the tile configuration and two
// areas of a super-block's stored products (engine's amxScratch). The
// expanded weights are a buffer of their own: per super-block 4 chunks of
// 64 columns, each its sets' tiles of 16 lines × 64 bytes (a line 4
// columns of the 16 rows).
const (
	amxC    = 64
	amxArea = 3 * 1024
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

// tdp writes TDPBSUD c += a·b (a's bytes signed, b's unsigned), or
// TDPBSSD (both signed).
func (g *gen) tdp(signed bool, c, a, b int) {
	name, pp := "TDPBSUD", byte(0b010)
	if signed {
		name, pp = "TDPBSSD", 0b011
	}
	g.vex3(fmt.Sprintf("%s tmm%d, tmm%d, tmm%d", name, b, a, c), 0b111, (^byte(b)&15)<<3|pp, 0x5E, 0xC0|byte(c)<<3|byte(a))
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
	g.f("ADDQ $%d, DI", amxQ4K.expanded)
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
	g.f("VZEROUPPER")
	g.f("RET")
}

// q6kAMXExpand writes expandQ6KAMX(w *byte, nb int, dst *byte): the
// three digit tiles of a group's nb super-blocks. Column k of the groups
// of 32 glo and ghi (q6kColumn) is line k (group 2c) or 8+k (group 2c+1)
// of chunk c's tiles. A signed byte times a digit: VPMULLW on the even
// bytes alone (zero-extended: the low byte of the product is right
// whatever the sign) and on the odd bytes alone (in the high byte, the
// low one 0), then the two merged.
func (g *gen) q6kAMXExpand() {
	name := "expandQ6KAMX"
	fmt.Fprintf(&g.Buffer, "\n// func %s(w *byte, nb int, dst *byte)\n", name)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $0-24\n", name)
	g.f("MOVQ w+0(FP), SI")
	g.f("MOVQ nb+8(FP), CX")
	g.f("MOVQ dst+16(FP), DI")
	for _, c := range []struct {
		v   uint32
		reg string
	}{{3, "Z27"}, {7, "Z28"}, {0x00ff00ff, "Z29"}, {0x20202020, "Z30"}, {0x0f0f0f0f, "Z31"}} {
		g.f("MOVL $0x%08x, R11", c.v)
		g.f("VPBROADCASTD R11, %s", c.reg)
	}
	loop := name + "blk"
	g.label(loop)
	for n := 0; n < 2; n++ {
		for h := 0; h < 2; h++ {
			glo, ghi := 4*n+h, 4*n+h+2
			// Z8+3i+j: digit j of sub-block i of (2glo, 2glo+1, 2ghi,
			// 2ghi+1), a row's in both words of its dword.
			for i, sb := range []int{2 * glo, 2*glo + 1, 2 * ghi, 2*ghi + 1} {
				g.f("VPMOVSXBD %d(SI), Z24", q6kSc+16*sb)
				for j := 0; j < 3; j++ {
					dj := "Z24" // the last digit is what is left
					if j < 2 {
						g.f("VPADDD Z27, Z24, Z25")
						g.f("VPANDD Z28, Z25, Z25")
						g.f("VPSUBD Z27, Z25, Z25")
						g.f("VPSUBD Z25, Z24, Z24")
						g.f("VPSRAD $3, Z24, Z24")
						dj = "Z25"
					}
					g.f("VPSLLD $16, %s, Z26", dj)
					g.f("VPSRLD $16, Z26, %s", z(8+3*i+j))
					g.f("VPORD Z26, %s, %s", z(8+3*i+j), z(8+3*i+j))
				}
			}
			for k := 0; k < 8; k++ {
				g.q6kColumn(n, h, k, "Z1", "Z0")
				for _, col := range []struct {
					q, g, sub int
				}{{1, glo, k / 4}, {0, ghi, 2 + k/4}} {
					g.f("VPSUBB Z30, %s, Z2", z(col.q))
					g.f("VPANDD Z29, Z2, Z3")
					g.f("VPANDND Z2, Z29, Z4")
					for j := 0; j < 3; j++ {
						d := z(8 + 3*col.sub + j)
						g.f("VPMULLW %s, Z3, Z5", d)
						g.f("VPMULLW %s, Z4, Z6", d)
						g.f("VPTERNLOGD $0xec, Z29, Z6, Z5") // (even & 0x00ff) | odd
						g.f("VMOVDQU64 Z5, %d(DI)", col.g/2*3072+j*1024+(col.g%2*8+k)*64)
					}
				}
			}
		}
	}
	g.f("ADDQ $%d, SI", q6kGSB)
	g.f("ADDQ $%d, DI", amxQ6K.expanded)
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
	g.f("VZEROUPPER")
	g.f("RET")
}

// amxGemm writes gemmQ4K16AMX or gemmQ6K16AMX: 16 rows of expanded
// weights (e) against nt tiles of 16 tokens, one after the other (one
// tile configuration for them all). Tiles: tmm0+j the product of set j,
// tmm3+c%2 the tokens' bytes of chunk c, tmm5+j its set j's weights: a
// chunk's bytes need not wait for the last chunk's products. A
// super-block's products are stored to one area while the vector unit
// combines the last one's from the other (R15 and R10, swapped each
// super-block).
//
// Registers: Z0–Z15 the tokens' float accumulators, R14 the expanded
// weights, SI the layout's (its d, and Q4_K's dmin and mins), CX the
// super-blocks left, R8 the tokens' bytes and R12 their stride, R9 the
// scales and BX the extras (Q4_K's) of the super-block being combined,
// AX their token stride (4nb) and R11 a token's offset (its extras at
// 4·R11), DI the scratch, DX 64, R13 the tiles left. Each tile starts
// again from the arguments, its tokens 16 on.
func (g *gen) amxGemm(k amxKind) {
	name := "gemm" + k.name + "16AMX"
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
		for j := 0; j < k.sets; j++ {
			g.tileZero(j)
		}
		for c := 0; c < 4; c++ {
			a := 3 + c%2
			g.tileLoad(a, mem("R8", "R12", 64*c))
			for j := 0; j < k.sets; j++ {
				g.tileLoad(5+j, mem("R14", "DX", (c*k.sets+j)*1024))
				g.tdp(k.signed, j, a, 5+j)
			}
		}
		for j := 0; j < k.sets; j++ {
			g.tileStore(j, mem("R15", "DX", 1024*j))
		}
		g.f("ADDQ $%d, R14", k.expanded)
		g.f("ADDQ $256, R8")
	}
	combine := func() {
		if k == amxQ4K {
			for p := 0; p < 4; p++ {
				g.f("VPMOVZXBW %d(SI), %s", q4kMin+32*p, z(18+p))
			}
			g.f("VCVTPH2PS %d(SI), Z27", q4kDmin)
		}
		g.f("VCVTPH2PS %d(SI), Z26", k.d)
		g.f("XORQ R11, R11")
		for m := 0; m < 16; m++ {
			// The integer: 4H + L, or S0 + 8·(S1 + 8·S2).
			if k == amxQ4K {
				g.f("VMOVDQU32 %d(R10), Z24", 64*m)
				g.f("VPSLLD $2, Z24, Z24")
				g.f("VPADDD %d(R10), Z24, Z24", 1024+64*m)
				g.f("VPXORD Z22, Z22, Z22")
				for p := 0; p < 4; p++ {
					g.f("VPDPWSSD.BCST %d(BX)(R11*4), %s, Z22", 4*p, z(18+p))
				}
				g.combineK("(R9)(R11*1)", "Z24", "Z22", "Z23")
			} else {
				g.f("VMOVDQU32 %d(R10), Z24", 2048+64*m)
				g.f("VPSLLD $3, Z24, Z24")
				g.f("VPADDD %d(R10), Z24, Z24", 1024+64*m)
				g.f("VPSLLD $3, Z24, Z24")
				g.f("VPADDD %d(R10), Z24, Z24", 64*m)
				// As q6k: float32(d·dx)·float32(sumi).
				g.f("VMULPS.BCST (R9)(R11*1), Z26, Z28")
				g.f("VCVTDQ2PS Z24, Z29")
				g.f("VMULPS Z29, Z28, Z28")
			}
			// acc + term, as the VNNI kernels add (a NaN's payload
			// follows the order).
			g.f("VADDPS Z28, %s, %s", z(m), z(m))
			if m < 15 {
				g.f("ADDQ AX, R11")
			}
		}
		g.f("ADDQ $%d, SI", k.gsb)
		g.f("ADDQ $4, R9")
		if k == amxQ4K {
			g.f("ADDQ $16, BX")
		}
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
