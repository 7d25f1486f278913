package engine

import (
	"encoding/binary"
	"sync"

	"github.com/stratanet/strata/engine/internal/kilorder"
)

// The row-interleaved K-quant layout. Where the CPU has AVX-512 VNNI
// (VPDPBUSD), Q4_K, Q5_K and Q6_K matrices are rearranged once at load so that
// one 64-byte load holds four consecutive weights of each of 16 rows: a
// VPDPBUSD of that register with four activation bytes broadcast adds one
// token's products to 16 rows' sums at once. A kernel call computes 16
// rows against 1 or 4 tokens (kil_amd64.s), unpacking each weight once for
// all its tokens, so a prefill or a batch is a real matrix product.
//
// The arithmetic is the row kernels' (quant.go): per super-block an exact
// integer sum, then the same float32 operations in the same order, blocks
// added in order into one float32 per output. The 16 rows sit in a zmm's
// lanes, so each lane does one output's scalar sequence: the same bits as
// dotRowQuant, for any tile of tokens, thread split or batch.
//
// Layout of one group of 16 rows and one super-block (ilQ4K / ilQ6K bytes):
//
//	Q4_K: [4 pairs][8 columns][16 rows][4 bytes] of the packed nibbles
//	      (low nibbles: sub-block 2p, high: 2p+1), then the 6-bit scales
//	      [8][16] uint8, the mins [4][16][2] uint8 (m 2p, m 2p+1), d [16]
//	      and dmin [16] f16: 2368 bytes for the file's 2304.
//	Q5_K: Q4_K's, with the 64-byte columns of the nibbles and of the
//	      fifth bits (qh, [8 columns][16 rows][4 bytes]) in the order the
//	      kernel first reads them: for each of 8 columns k, the nibbles'
//	      column k of pair 0, then qh's column k; then pairs 1 to 3's
//	      columns. 2880 bytes for the file's 2816.
//	Q6_K: per half n, the 64-byte columns in the order the kernel first
//	      reads them: for each of 8 columns k, ql's column of groups 4n
//	      and 4n+2 (low and high nibbles), then qh's column k of half n;
//	      then ql's 8 columns of groups 4n+1 and 4n+3. Then the scales
//	      [16][16] int8, d [16] f16 and 32 bytes of padding: 3392 bytes
//	      for the file's 3360, a whole number of 64-byte lines (a load
//	      across two lines costs about two).
//
// Q5_K's and Q6_K's kernels read their quants front to back, which the
// hardware prefetcher follows. The file's order (the low bits, then the
// high bits 2 KB on, read together) made them read two streams at once,
// which it did not (see kilgen's note on prefetch).
//
// A last group of fewer than 16 rows is padded with zero blocks, whose
// outputs are dropped.
const (
	ilRows = 16

	ilQ4KSc = 2048 // then the mins at +128, d at +256, dmin at +288
	ilQ4K   = 2368

	ilQ5KSc = 2560 // as Q4_K's; the quants' columns before, in kilorder.Q5K's order
	ilQ5K   = 2880

	ilQ6KSc = 3072 // the quants' columns before, in kilorder.Q6K's order
	ilQ6KD  = 3328
	ilQ6K   = 3392 // padded to whole cache lines, as the others are
)

// ilGroupBlock is the bytes of one group's super-block in type t's
// interleaved layout, 0 where t has none.
func ilGroupBlock(t DType) int {
	switch t {
	case Q4_K:
		return ilQ4K
	case Q5_K:
		return ilQ5K
	case Q6_K:
		return ilQ6K
	}
	return 0
}

// interleave rearranges m's packed rows into the interleaved layout, where
// the CPU has the kernels for it and m's type has one (F16's is hil.go's).
// m.raw is dropped.
func (m *matrix) interleave() {
	if m.typ == F16 || m.typ == BF16 {
		m.interleaveF16()
		return
	}
	if !useKIL(m.typ) || m.il != nil || m.raw == nil {
		return
	}
	gb := ilGroupBlock(m.typ)
	nb := m.cols / 256
	groups := (m.rows + ilRows - 1) / ilRows
	il := allocWeights(groups * nb * gb)
	rb := nb * m.qf.bytes
	for r := 0; r < m.rows; r++ {
		g, i := r/ilRows, r%ilRows
		for b := 0; b < nb; b++ {
			dst := il[(g*nb+b)*gb : (g*nb+b+1)*gb]
			blk := m.raw[r*rb+b*m.qf.bytes : r*rb+(b+1)*m.qf.bytes]
			switch m.typ {
			case Q4_K:
				putQ4KIL(dst, i, blk)
			case Q5_K:
				putQ5KIL(dst, i, blk)
			default:
				putQ6KIL(dst, i, blk)
			}
		}
	}
	m.il, m.raw = il, nil
}

// The layouts put a block's packed bytes (Q4_K's 128 nibble bytes, Q5_K's
// 128 nibble and 32 fifth-bit bytes, Q6_K's 128 ql and 64 qh bytes) in
// file order, four bytes to a 64-byte column of the group: column c holds
// bytes 4c to 4c+3 of each of the 16 rows.
func putColumns(dst []byte, i int, src []byte) {
	le := binary.LittleEndian
	for c := 0; c < len(src)/4; c++ {
		le.PutUint32(dst[c*64+4*i:], le.Uint32(src[4*c:]))
	}
}

// putScalesK4 writes row i's Q4_K/Q5_K scales, mins, d and dmin (block
// blk) at dst, where both layouts have them after the quants: the scales
// [8][16], the mins [4][16][2] at 128, d [16] at 256, dmin [16] at 288.
func putScalesK4(dst []byte, i int, blk []byte) {
	for j := 0; j < 8; j++ {
		sc, mn := scaleMinK4(j, blk[4:16])
		dst[16*j+i] = byte(sc)
		dst[128+32*(j/2)+2*i+j%2] = byte(mn)
	}
	copy(dst[256+2*i:256+2*i+2], blk[0:2])
	copy(dst[288+2*i:288+2*i+2], blk[2:4])
}

// putQ4KIL writes row i's Q4_K block blk into its group's super-block dst.
func putQ4KIL(dst []byte, i int, blk []byte) {
	putColumns(dst, i, blk[16:144])
	putScalesK4(dst[ilQ4KSc:], i, blk)
}

// putQ5KIL writes row i's Q5_K block blk into its group's super-block dst:
// the nibbles' and the 32 fifth-bit bytes' (bit j: sub-block j) columns in
// kilorder.Q5K's order, then Q4_K's scales.
func putQ5KIL(dst []byte, i int, blk []byte) {
	var cols [40 * 64]byte
	putColumns(cols[:], i, blk[48:176])
	putColumns(cols[32*64:], i, blk[16:48])
	for c := 0; c < 40; c++ {
		copy(dst[64*kilorder.Q5K(c)+4*i:][:4], cols[64*c+4*i:])
	}
	putScalesK4(dst[ilQ5KSc:], i, blk)
}

// putQ6KIL writes row i's Q6_K block blk into its group's super-block dst.
func putQ6KIL(dst []byte, i int, blk []byte) {
	var cols [48 * 64]byte
	putColumns(cols[:], i, blk[:192]) // ql's 32 columns, then qh's 16
	for c := 0; c < 48; c++ {
		copy(dst[64*kilorder.Q6K(c)+4*i:][:4], cols[64*c+4*i:])
	}
	for is := 0; is < 16; is++ {
		dst[ilQ6KSc+16*is+i] = blk[192+is]
	}
	copy(dst[ilQ6KD+2*i:ilQ6KD+2*i+2], blk[208:210])
}

// kilExtras are the per-block activation sums the interleaved kernels
// read beside Q8_K's values and scales: Q4_K's and Q5_K's sums of 32 as
// int16 (their mins' term), Q6_K's −32 × sums of 16 as int32 (its −32 offset).
func (a *act) kilExtras(t DType) []byte {
	if t != Q6_K {
		if a.ks32 == nil {
			a.ks32 = make([]byte, len(a.kbsums))
			for j := 0; j < len(a.kbsums)/2; j++ {
				binary.LittleEndian.PutUint16(a.ks32[2*j:], uint16(a.kbsums[2*j]+a.kbsums[2*j+1]))
			}
		}
		return a.ks32
	}
	if a.ks16 == nil {
		a.ks16 = make([]byte, 4*len(a.kbsums))
		for j, s := range a.kbsums {
			binary.LittleEndian.PutUint32(a.ks16[4*j:], uint32(-32*int32(s)))
		}
	}
	return a.ks16
}

// amxScratch is the AMX kernels' scratch, as kilgen's amx.go lays it
// out: the tile configuration and two areas of a super-block's stored
// products (up to 3 tiles of 1 KB).
const amxScratch = 64 + 2*3072

// amxExpanded is the expand kernels' bytes per super-block: 4 chunks of
// 64 columns, each 2 (Q4_K) or 3 (Q6_K) tiles of 1 KB.
func amxExpanded(t DType) int {
	if t == Q6_K {
		return 12 << 10
	}
	return 8 << 10
}

// amxWork is one worker's scratch and expanded weights.
type amxWork struct {
	tmp [amxScratch]byte
	e   []byte
}

// amxWorks keeps scratches between products (a batch of 16 sessions makes
// one a matrix and worker every step), each configured.
var amxWorks = sync.Pool{New: func() any {
	w := new(amxWork)
	amxTiles(w.tmp[:])
	return w
}}

// amxTiles is the tile configuration gemmQ4K16AMX loads (palette 1): all
// eight tiles 16 lines of 64 bytes (a product's 16 tokens × 16 int32, 16
// tokens' 64 bytes, or 64 columns of 16 rows, 4 a line).
func amxTiles(tmp []byte) {
	clear(tmp[:64])
	tmp[0] = 1
	for i := 0; i < 8; i++ {
		tmp[16+2*i] = 64
		tmp[48+i] = 16
	}
}

// useAMX lets tests and benchmarks turn the AMX kernel off; it is never
// turned off otherwise.
var useAMX = true

// kilTokTile is the tokens a group of rows meets while its weights stay
// in cache.
const kilTokTile = 32

// matmulKIL computes rows r0 to r1 of an interleaved matrix against every
// activation row of x. The pool cuts matrices at multiples of 16 rows; a
// group cut elsewhere (or the padded last one) goes through a scratch tile.
func matmulKIL(out []float32, w *matrix, x *act, r0, r1 int) {
	gb := ilGroupBlock(w.typ)
	nb := w.cols / 256
	ex := x.kilExtras(w.typ)    // made by prepareOn, before the pool's goroutines
	exb := len(ex) / (x.n * nb) // extras' bytes per token and super-block
	// amx: tokens [0, amx) of the whole groups went through the AMX kernels.
	amx := 0
	if x.n >= 16 && useAMXFor(w.typ) {
		amx = x.n &^ 15
		matmulAMX(out, w, x, ex, exb, r0, r1, amx)
	}
	var pad [4 * ilRows]float32
	for tt := 0; tt < x.n; tt += kilTokTile {
		te := min(tt+kilTokTile, x.n)
		for g := r0 / ilRows; g*ilRows < r1; g++ {
			lo, hi := max(r0, g*ilRows), min(r1, (g+1)*ilRows)
			whole := lo == g*ilRows && hi == (g+1)*ilRows
			wg := w.il[g*nb*gb : (g+1)*nb*gb]
			t := tt
			if whole {
				t = max(t, amx)
			}
			for t < te {
				nt := 4
				if te-t < 4 {
					nt = 1
				}
				o, os := out[t*w.rows+lo:], w.rows
				if !whole {
					o, os = pad[:], ilRows
				}
				_ = o[(nt-1)*os+ilRows-1]
				kilKernel(w.typ, nt, &wg[0], nb, &x.kq[t*w.cols], w.cols, &x.kd[t*nb], &ex[t*nb*exb], &o[0], 4*os)
				if !whole {
					for i := 0; i < nt; i++ {
						copy(out[(t+i)*w.rows+lo:(t+i)*w.rows+hi], pad[i*ilRows+lo-g*ilRows:])
					}
				}
				t += nt
			}
		}
	}
}

// amxTokTile is the tokens a group's expanded weights meet before the
// next group's are made: 128 tokens of a 5,632-column matrix are 720 KB
// of bytes, which stay in L2 while the groups pass.
const amxTokTile = 128

// matmulAMX computes the whole groups of rows r0 to r1 against tokens 0
// to n (a multiple of 16) with the AMX kernels.
func matmulAMX(out []float32, w *matrix, x *act, ex []byte, exb, r0, r1, n int) {
	gb := ilGroupBlock(w.typ)
	nb := w.cols / 256
	expand, gemm := expandQ4KAMX, gemmQ4K16AMX
	if w.typ == Q6_K {
		expand, gemm = expandQ6KAMX, gemmQ6K16AMX
	}
	aw := amxWorks.Get().(*amxWork)
	defer amxWorks.Put(aw)
	if size := nb * amxExpanded(w.typ); len(aw.e) < size {
		aw.e = make([]byte, size)
	}
	for tt := 0; tt < n; tt += amxTokTile {
		te := min(tt+amxTokTile, n)
		for g := (r0 + ilRows - 1) / ilRows; (g+1)*ilRows <= r1; g++ {
			wg := w.il[g*nb*gb : (g+1)*nb*gb]
			expand(&wg[0], nb, &aw.e[0])
			o := out[tt*w.rows+g*ilRows:]
			_ = o[(te-tt-1)*w.rows+ilRows-1]
			gemm(&aw.e[0], &wg[0], nb, &x.kq[tt*w.cols], w.cols, &x.kd[tt*nb], &ex[tt*nb*exb], &o[0], 4*w.rows, &aw.tmp[0], (te-tt)/16)
		}
	}
}
