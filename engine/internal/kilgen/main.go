// Command kilgen writes the engine's generated kernels: engine/kil_amd64.s,
// the AVX-512 VNNI kernels of the row-interleaved K-quant layout
// (engine/kil.go) and Q4_K's AMX one (amx.go), engine/q8il_amd64.s, those
// of the Q8_0 one (engine/q8il.go), and engine/gemm_amd64.s, the 4×4
// F32/F16/BF16 tiles. The kernels are unrolled over a block's parts and
// the tile's tokens; writing them by hand would mean thousands of
// near-identical lines.
//
//	go generate ./engine
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/stratanet/strata/engine/internal/kilorder"
)

// The layouts, as engine/kil.go defines them (its tests check the two
// agree): per group of 16 rows and super-block of 256 columns.
const (
	q4kSc   = 2048 // 8 × 16 scales, uint8
	q4kMin  = 2176 // 4 × 16 × (min 2p, min 2p+1), uint8
	q4kD    = 2304 // 16 × d, f16
	q4kDmin = 2336 // 16 × dmin, f16
	q4kGSB  = 2368

	q5kQ    = 0 // the nibbles' and fifth bits' columns, in the order the kernel reads them (kilorder.Q5K)
	q5kSc   = 2560
	q5kMin  = 2688
	q5kD    = 2816
	q5kDmin = 2848
	q5kGSB  = 2880

	q6kQ   = 0    // ql's and qh's columns, in the order the kernel reads them (kilorder.Q6K)
	q6kSc  = 3072 // 16 × 16 scales, int8
	q6kD   = 3328 // 16 × d, f16, then 32 bytes of padding
	q6kGSB = 3392 // a whole number of cache lines: no split loads
)

// gen writes one file's kernels. pf holds the prefetches of the block
// being written that are still to be placed (prefetch).
type gen struct {
	bytes.Buffer
	pf []string
}

func (g *gen) f(format string, a ...any) { fmt.Fprintf(&g.Buffer, "\t"+format+"\n", a...) }
func (g *gen) label(l string)            { fmt.Fprintf(&g.Buffer, "%s:\n", l) }

// Addressing of token t's activations (x), scales (xd) and per-block
// extras (bs): a base register, the stride register and base+stride cover
// tokens 0 to 3 with the scales 1 and 2.
func tok(base, stride, base2 string, t int, off int) string {
	switch t {
	case 0:
		return fmt.Sprintf("%d(%s)", off, base)
	case 1:
		return fmt.Sprintf("%d(%s)(%s*1)", off, base, stride)
	case 2:
		return fmt.Sprintf("%d(%s)(%s*2)", off, base, stride)
	}
	return fmt.Sprintf("%d(%s)(%s*2)", off, base2, stride)
}

func x(t, off int) string  { return tok("R8", "R12", "R13", t, off) }
func xd(t, off int) string { return tok("R9", "R10", "R11", t, off) }
func bs(t, off int) string { return tok("BX", "AX", "DX", t, off) }

func z(i int) string { return fmt.Sprintf("Z%d", i) }

// Registers: Z0–Z15 unpacked weights, Z16+t the token's integer sum of the
// super-block, Z20+t its float accumulator, Z24–Z30 temporaries, Z31 the
// 0x0f byte mask.
const (
	sumi = 16
	acc  = 20
)

// prologue loads the arguments (see kil_amd64.go) and sets up the token
// addressing and the accumulators.
func (g *gen) prologue(name string, nt int) {
	fmt.Fprintf(&g.Buffer, "\n// func %s(w *byte, nb int, x *int8, xs int, xd *float32, bs *byte, out *float32, os int)\n", name)
	fmt.Fprintf(&g.Buffer, "TEXT ·%s(SB), NOSPLIT, $16-64\n", name)
	g.args(bsShift[name[4:7]])
	g.f("LEAQ (R8)(R12*1), R13")
	g.f("LEAQ (R9)(R10*1), R11")
	g.f("LEAQ (BX)(AX*1), DX")
	g.f("MOVL $0x0f0f0f0f, DI")
	g.f("VPBROADCASTD DI, Z31")
	g.f("MOVL $0x30303030, DI")
	g.f("VPBROADCASTD DI, Z30")
	for t := 0; t < nt; t++ {
		g.f("VPXORD %s, %s, %s", z(acc+t), z(acc+t), z(acc+t))
	}
}

// args loads the K-quant kernels' arguments: SI the weights, CX the
// super-blocks, R8 the activations and R12 their stride, R9 the scales
// and R10 their stride (4·nb), BX the extras and AX their stride (nb
// shifted by bsShift).
func (g *gen) args(bsShift int) {
	g.f("MOVQ w+0(FP), SI")
	g.f("MOVQ nb+8(FP), CX")
	g.f("MOVQ x+16(FP), R8")
	g.f("MOVQ xs+24(FP), R12")
	g.f("MOVQ xd+32(FP), R9")
	g.f("MOVQ CX, R10")
	g.f("SHLQ $2, R10")
	g.f("MOVQ bs+40(FP), BX")
	g.f("MOVQ CX, AX")
	g.f("SHLQ $%d, AX", bsShift)
}

// bsShift gives the bytes of per-block extras per super-block as a shift
// of nb: Q4_K's 8 int16 sums of 32, Q6_K's 16 int32 (−32 × sums of 16).
var bsShift = map[string]int{"Q4K": 4, "Q5K": 4, "Q6K": 6}

// epilogue stores the accumulators: token t's 16 outputs at out + t·os.
func (g *gen) epilogue(nt int) {
	g.f("MOVQ out+48(FP), DI")
	g.f("MOVQ os+56(FP), R12")
	g.f("LEAQ (DI)(R12*1), R13")
	for t := 0; t < nt; t++ {
		g.f("VMOVUPS %s, %s", z(acc+t), tok("DI", "R12", "R13", t, 0))
	}
	g.f("VZEROUPPER")
	g.f("RET")
}

// combineK writes Z28 = float32(float32(d·dx)·float32(sumi)) −
// float32(float32(dmin·dx)·float32(summ)), the super-block's term that
// Q4_K's and Q5_K's kernels add to a token's accumulator (combineK in
// engine): d in Z26, dmin in Z27, the token's scale at xd; Z29 and tmp
// are clobbered. Every Q4_K kernel writes it here, so their bits agree.
func (g *gen) combineK(xd, sumi, summ, tmp string) {
	g.f("VMULPS.BCST %s, Z26, Z28", xd)
	g.f("VCVTDQ2PS %s, Z29", sumi)
	g.f("VMULPS Z29, Z28, Z28")
	g.f("VMULPS.BCST %s, Z27, Z29", xd)
	g.f("VCVTDQ2PS %s, %s", summ, tmp)
	g.f("VMULPS %s, Z29, Z29", tmp)
	g.f("VSUBPS Z29, Z28, Z28")
}

func (g *gen) advance(gsb, bsStep int, loop string) {
	for len(g.pf) > 0 {
		g.pfNext()
	}
	g.f("ADDQ $%d, SI", gsb)
	g.f("ADDQ $256, R8")
	g.f("ADDQ $256, R13")
	g.f("ADDQ $4, R9")
	g.f("ADDQ $4, R11")
	g.f("ADDQ $%d, BX", bsStep)
	g.f("ADDQ $%d, DX", bsStep)
	g.f("DECQ CX")
	g.f("JNZ %s", loop)
}

// q4k: per super-block, sumi = Σ_j sc_j·(Σ q·x over sub-block j) and
// summ = Σ_j m_j·(Σ x over sub-block j), exact; then, as combineK,
// acc += float32(float32(d·dx)·float32(sumi)) − float32(float32(dmin·dx)·float32(summ)).
// q5 adds Q5_K's fifth bits (bit j of qh byte l for sub-block j).
func (g *gen) q4k(nt int, q5, pf bool) {
	name := fmt.Sprintf("gemmQ4K%d", nt)
	sc, mins, d, dmin, gsb := q4kSc, q4kMin, q4kD, q4kDmin, q4kGSB
	if q5 {
		name = fmt.Sprintf("gemmQ5K%d", nt)
		sc, mins, d, dmin, gsb = q5kSc, q5kMin, q5kD, q5kDmin, q5kGSB
	}
	if pf {
		name += "PF"
	}
	g.prologue(name, nt)
	if q5 {
		g.f("MOVL $0x10101010, DI")
		g.f("VPBROADCASTD DI, Z30")
	}
	loop := name + "blk"
	g.label(loop)
	if pf {
		g.prefetch(gsb)
	}
	for t := 0; t < nt; t++ {
		g.f("VPXORD %s, %s, %s", z(sumi+t), z(sumi+t), z(sumi+t))
	}
	for gr := 0; gr < 4; gr++ {
		// Unpack the 32-byte columns of sub-blocks 2gr (low nibbles)
		// and 2gr+1 (high nibbles), 16 rows × 4 bytes a register.
		for k := 0; k < 8; k++ {
			if !q5 {
				g.f("VMOVDQU64 %d(SI), %s", gr*512+k*64, z(8+k))
				g.pfNext()
				g.f("VPANDD Z31, %s, %s", z(8+k), z(k))
				g.f("VPSRLW $4, %s, %s", z(8+k), z(8+k))
				g.f("VPANDD Z31, %s, %s", z(8+k), z(8+k))
				continue
			}
			// Bit 2gr (2gr+1) of the qh bytes moved to bit 4, then a
			// bitwise select with the nibble.
			g.f("VMOVDQU64 %d(SI), Z24", q5kQ+64*kilorder.Q5K(8*gr+k))
			g.f("VMOVDQU64 %d(SI), Z25", q5kQ+64*kilorder.Q5K(32+k))
			g.pfNext()
			shift(g, 2*gr, "Z25", z(k))
			g.f("VPANDD Z30, %s, %s", z(k), z(k))
			g.f("VPTERNLOGD $0xb8, Z24, Z31, %s", z(k))
			shift(g, 2*gr+1, "Z25", z(8+k))
			g.f("VPANDD Z30, %s, %s", z(8+k), z(8+k))
			g.f("VPSRLW $4, Z24, Z24")
			g.f("VPTERNLOGD $0xb8, Z24, Z31, %s", z(8+k))
		}
		g.f("VPMOVZXBD %d(SI), Z26", sc+32*gr)
		g.f("VPMOVZXBD %d(SI), Z27", sc+32*gr+16)
		for t := 0; t < nt; t++ {
			g.f("VPXORD Z24, Z24, Z24")
			g.f("VPXORD Z25, Z25, Z25")
			for k := 0; k < 8; k++ {
				g.f("VPDPBUSD.BCST %s, %s, Z24", x(t, 64*gr+4*k), z(k))
				g.f("VPDPBUSD.BCST %s, %s, Z25", x(t, 64*gr+32+4*k), z(8+k))
			}
			g.f("VPMULLD Z26, Z24, Z24")
			g.f("VPMULLD Z27, Z25, Z25")
			g.f("VPADDD Z24, %s, %s", z(sumi+t), z(sumi+t))
			g.f("VPADDD Z25, %s, %s", z(sumi+t), z(sumi+t))
		}
	}
	for p := 0; p < 4; p++ {
		g.f("VPMOVZXBW %d(SI), %s", mins+32*p, z(p))
	}
	g.f("VCVTPH2PS %d(SI), Z26", d)
	g.f("VCVTPH2PS %d(SI), Z27", dmin)
	for t := 0; t < nt; t++ {
		g.f("VPXORD Z24, Z24, Z24")
		for p := 0; p < 4; p++ {
			g.f("VPDPWSSD.BCST %s, %s, Z24", bs(t, 4*p), z(p))
		}
		g.combineK(xd(t, 0), z(sumi+t), "Z24", "Z25")
		g.f("VADDPS Z28, %s, %s", z(acc+t), z(acc+t))
	}
	g.advance(gsb, 16, loop)
	g.epilogue(nt)
}

// How far ahead the one-token PF kernels prefetch each line: into L1
// (PREFETCHT0) and into L2 (PREFETCHT2); the Q8_0 kernel (q8.go) too.
const (
	pfNear = 4096
	pfFar  = 12288
)

// prefetch queues, for each line of the group's block, a PREFETCHT0 pfNear
// ahead and a PREFETCHT2 pfFar ahead (the one-token PF kernels, which
// engine takes on Intel CPUs: on the Sapphire Rapids VM a TinyLlama-shaped
// Q4_K_M decode at 1 thread was faster with them, see engine/kil_amd64.go).
// The block's weight loads then place them, one after each load (Q4_K)
// or pair of loads (Q5_K, Q6_K; pfNext), and advance the rest at the
// block's end. On the Emerald Rapids VM, BenchmarkKILStream's 160 MB
// matrices at one token, GB/s:
//   - the PREFETCHT0s issued all at once at the top of the block: Q4_K
//     and Q6_K 11.5–13.6 against 12.7–15.0 spread (alternating test
//     binaries, two rounds, 2026-11-30);
//   - variants alternating in one process, 4 passes each a round, the
//     round's average (2026-12-01): T0 alone Q4_K 11.9–13.5, Q6_K
//     12.3–13.3 (5 rounds); with the T2
//     12 KB ahead 13.7–15.6 and 13.1–16.0 (7 rounds), 7–18% faster than
//     T0 alone in each round both ran, where a plain read got 12.9–15.9;
//     the T2 8, 16 or 24 KB ahead did about as well, a T2 alone 12 KB
//     ahead a little worse, T0 3, 5 or 8 KB ahead as T0 4 KB, T0 every
//     other line or PREFETCHNTA worse.
//
// (Why the far T2s help is a guess, there are no performance counters on
// these VMs: they start the reads from memory early, so that the T0s find
// their lines in L2 and hold L1's few miss buffers only briefly.)
func (g *gen) prefetch(gsb int) {
	for o := 0; o < gsb; o += 64 {
		g.pf = append(g.pf, fmt.Sprintf("PREFETCHT0 %d(SI)", pfNear+o), fmt.Sprintf("PREFETCHT2 %d(SI)", pfFar+o))
	}
}

// pfNext writes the next queued prefetch, if any.
func (g *gen) pfNext() {
	if len(g.pf) > 0 {
		g.f("%s", g.pf[0])
		g.pf = g.pf[1:]
	}
}

// Otherwise no kernel prefetches in software. The Q5_K and Q6_K
// kernels once read their layouts' two streams (the low bits, and the high bits 2 KB on) at
// once, which the hardware prefetcher did not follow: on a 160 MB matrix
// at one token (engine's BenchmarkKILStream) Q6_K read 13 GB/s without
// PREFETCHT1 2 blocks ahead and 24 with it, against a plain read's 23–29.
// Their layouts now hold the quants in the order the kernels first read
// them, front to back, then the scales; without prefetch the same matrix
// reads at 27.5–28.6 GB/s (Q6_K) and 26.6–28.3 (Q5_K), as fast as the
// plain read and as Q4_K's kernel, and prefetch only slows them. (The
// scales first instead: Q6_K 25.6–28, Q5_K 24–25.4; Q4_K's scales first:
// 27 against its 29–32.)

// shift writes src's bytes with bit b moved to bit 4 (word shifts; the
// caller masks the bit).
func shift(g *gen, b int, src, dst string) {
	switch {
	case b < 4:
		g.f("VPSLLW $%d, %s, %s", 4-b, src, dst)
	case b > 4:
		g.f("VPSRLW $%d, %s, %s", b-4, src, dst)
	default:
		g.f("VMOVDQA64 %s, %s", src, dst)
	}
}

// q6kColumn writes column k of Q6_K's groups of 32 glo = 4n+h and ghi =
// glo+2 (16 rows × 4 quants, each 0–63) to the registers lo and hi, with
// Z24 a temporary and Z31 the 0x0f byte mask.
func (g *gen) q6kColumn(n, h, k int, lo, hi string) {
	g.f("VMOVDQU64 %d(SI), Z24", q6kQ+64*kilorder.Q6K(16*n+8*h+k))
	g.f("VMOVDQU64 %d(SI), %s", q6kQ+64*kilorder.Q6K(32+8*n+k), hi)
	g.pfNext()
	// GFNI affine maps (q6kBits): qh bits 2h, 2h+1 (glo) or 2h+4, 2h+5
	// (ghi) to bits 4 and 5, the rest 0; ql's high nibble to the low one.
	g.f("VGF2P8AFFINEQB.BCST $0, q6kBits<>+%d(SB), %s, %s", 8*h, hi, lo)
	g.f("VGF2P8AFFINEQB.BCST $0, q6kBits<>+%d(SB), %s, %s", 8*(h+2), hi, hi)
	g.f("VPTERNLOGD $0xf8, Z24, Z31, %s", lo) // |= ql & 0x0f
	g.f("VGF2P8AFFINEQB.BCST $0, q6kBits<>+32(SB), Z24, Z24")
	g.f("VPORD Z24, %s, %s", hi, hi)
}

// q6k: per super-block, sumi = Σ_is sc_is·(Σ q·x − 32·Σ x over sub-block
// is), exact; then acc += float32(float32(d·dx)·float32(sumi)).
func (g *gen) q6k(nt int, pf bool) {
	name := fmt.Sprintf("gemmQ6K%d", nt)
	if pf {
		name += "PF"
	}
	g.prologue(name, nt)
	loop := name + "blk"
	g.label(loop)
	if pf {
		g.prefetch(q6kGSB)
	}
	for t := 0; t < nt; t++ {
		g.f("VPXORD %s, %s, %s", z(sumi+t), z(sumi+t), z(sumi+t))
	}
	for n := 0; n < 2; n++ {
		for h := 0; h < 2; h++ {
			// Groups of 32 glo = 4n+h (low nibbles, high bits 2h) and
			// ghi = glo+2 (high nibbles, high bits 2h+4): glo's columns
			// in Z8+k, ghi's in Zk.
			glo, ghi := 4*n+h, 4*n+h+2
			for k := 0; k < 8; k++ {
				g.q6kColumn(n, h, k, z(8+k), z(k))
			}
			subs := []struct{ is, reg int }{{2 * glo, 8}, {2*glo + 1, 12}, {2 * ghi, 0}, {2*ghi + 1, 4}}
			for i, s := range subs {
				g.f("VPMOVSXBD %d(SI), %s", q6kSc+16*s.is, z(26+i))
			}
			for t := 0; t < nt; t++ {
				for i, s := range subs {
					tmp := z(24 + i%2)
					g.f("VPBROADCASTD %s, %s", bs(t, 4*s.is), tmp)
					for k := 0; k < 4; k++ {
						g.f("VPDPBUSD.BCST %s, %s, %s", x(t, 16*s.is+4*k), z(s.reg+k), tmp)
					}
					g.f("VPMULLD %s, %s, %s", z(26+i), tmp, tmp)
					g.f("VPADDD %s, %s, %s", tmp, z(sumi+t), z(sumi+t))
				}
			}
		}
	}
	g.f("VCVTPH2PS %d(SI), Z26", q6kD)
	for t := 0; t < nt; t++ {
		g.f("VMULPS.BCST %s, Z26, Z28", xd(t, 0))
		g.f("VCVTDQ2PS %s, Z29", z(sumi+t))
		g.f("VMULPS Z29, Z28, Z28")
		g.f("VADDPS Z28, %s, %s", z(acc+t), z(acc+t))
	}
	g.advance(q6kGSB, 64, loop)
	g.epilogue(nt)
}

func main() {
	out := flag.String("out", "kil_amd64.s", "the K-quant kernels' file")
	q8 := flag.String("q8", "q8il_amd64.s", "the Q8_0 kernels' file")
	gemm := flag.String("gemm", "gemm_amd64.s", "the F32/F16/BF16 kernels' file")
	flag.Parse()
	if err := os.WriteFile(*q8, []byte(q8Asm()), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*gemm, []byte(gemmAsm()), 0o644); err != nil {
		log.Fatal(err)
	}
	var g gen
	g.WriteString("// Code generated by engine/internal/kilgen; DO NOT EDIT.\n\n")
	g.WriteString("#include \"textflag.h\"\n\n")
	// GF2P8AFFINEQB matrices: output bit i is the parity of the input
	// byte ANDed with the matrix's byte 7−i. Bits s and s+1 to bits 4 and
	// 5 (s = 0, 2, 4, 6), then bits 4–7 to 0–3.
	for i, s := range []int{0, 2, 4, 6} {
		g.WriteString(fmt.Sprintf("DATA q6kBits<>+%d(SB)/8, $0x%016x\n", 8*i, uint64(1)<<s<<24|uint64(2)<<s<<16))
	}
	g.WriteString("DATA q6kBits<>+32(SB)/8, $0x1020408000000000\n")
	g.WriteString("GLOBL q6kBits<>(SB), RODATA|NOPTR, $40\n")
	for _, nt := range []int{1, 4} {
		g.q4k(nt, false, false)
		g.q4k(nt, true, false)
		g.q6k(nt, false)
	}
	g.q4k(1, false, true)
	g.q4k(1, true, true)
	g.q6k(1, true)
	g.q4kAMXExpand()
	g.q6kAMXExpand()
	g.amxGemm(amxQ4K)
	g.amxGemm(amxQ6K)
	if err := os.WriteFile(*out, g.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
