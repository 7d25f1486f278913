package engine

import (
	"encoding/binary"
	"math"
)

// Q8_0 weights are held row-interleaved, so that one SIMD register holds
// the same 4 bytes of 16 rows and a product computes 16 rows against
// several tokens at once (VPDPBUSD's unsigned × signed byte products):
//
//   - rows go in groups of 16, the last padded with zero rows whose outputs
//     are never written;
//   - group g, block b, chunk k (0..7) is 64 bytes: bytes 4k..4k+3 of each
//     of the 16 rows' block b, in row order, each stored as w XOR 0x80
//     (w+128 as a uint8);
//   - the scales are f16 [g][b][16 rows], as the file holds them: the
//     kernels widen them exactly (VCVTPH2PS). Held as float32 they took
//     36 bytes a block against the file's 34: 5.9% more memory, and as
//     much more to read for a decode bound by memory.
//
// The dot product is dotQ8's (kernels.go): per block the exact int32 sum
// of the 32 products, times float32(wd·xd), added in block order into one
// float32, so the layout changes how it is computed, never its bits.
type q8il struct {
	w    []uint8  // [group][block][chunk][16 rows][4]
	d    []uint16 // [group][block][16 rows], f16
	rows int
	nb   int // blocks per row
}

const (
	q8Group      = 16               // rows per group
	q8ChunkBytes = 4 * q8Group      // one chunk of a group's block
	q8BlockBytes = 8 * q8ChunkBytes // one block of a group: 512
	q8ActBlock   = 40               // an activation block in a tile: Σ, d, 32 values
	q8TokTile    = 8                // tokens per activation tile
	q8SuperTile  = 8 * q8TokTile    // tokens per pass over a chunk's rows (prefill)
	q8Pad        = 0x80             // a zero weight as stored
	q8Bias       = -128             // the activation sum's factor: (w+128)·x - 128·x
	q8SignFlip   = uint32(0x80808080)
)

func newQ8IL(rows, cols int) *q8il {
	nb, groups := cols/32, (rows+q8Group-1)/q8Group
	q := &q8il{w: allocWeights(groups * nb * q8BlockBytes), d: make([]uint16, groups*nb*q8Group), rows: rows, nb: nb}
	if pad := groups*q8Group - rows; pad > 0 {
		for i := range q.w[(groups-1)*nb*q8BlockBytes:] {
			q.w[(groups-1)*nb*q8BlockBytes+i] = q8Pad
		}
	}
	return q
}

// q8ilFromGGUF interleaves rows×cols Q8_0 blocks as GGUF stores them (per
// block an f16 scale, then 32 int8 values).
func q8ilFromGGUF(b []byte, rows, cols int) *q8il {
	q := newQ8IL(rows, cols)
	nb := q.nb
	le := binary.LittleEndian
	for r := 0; r < rows; r++ {
		for blk := 0; blk < nb; blk++ {
			p := b[34*(r*nb+blk) : 34*(r*nb+blk)+34 : 34*(r*nb+blk)+34]
			w, d := q.at(r, blk)
			*d = le.Uint16(p)
			for k := 0; k < 8; k++ {
				le.PutUint32(w[k*q8ChunkBytes:], le.Uint32(p[2+4*k:])^q8SignFlip)
			}
		}
	}
	return q
}

// q8ilFromPlain interleaves row-major int8 values and per-block scales,
// rounded to f16 as a Q8_0 file holds them (a NaN keeps its payload, so
// that one widened from a half comes back with its bits).
func q8ilFromPlain(wq []int8, wd []float32, rows, cols int) *q8il {
	q := newQ8IL(rows, cols)
	nb := q.nb
	for r := 0; r < rows; r++ {
		for blk := 0; blk < nb; blk++ {
			w, d := q.at(r, blk)
			*d = f32ToF16(wd[r*nb+blk])
			if v := math.Float32bits(wd[r*nb+blk]); v&0x7fffffff > 0x7f800000 {
				*d = uint16(v>>16)&0x8000 | 0x7c00 | uint16(v>>13)&0x3ff | 0x200
			}
			for k := 0; k < 8; k++ {
				for j := 0; j < 4; j++ {
					w[k*q8ChunkBytes+j] = uint8(wq[r*cols+blk*32+4*k+j]) ^ q8Pad
				}
			}
		}
	}
	return q
}

// at is row r's block blk: its chunk 0 (the others q8ChunkBytes apart) and
// its scale.
func (q *q8il) at(r, blk int) ([]uint8, *uint16) {
	g, i := r/q8Group, r%q8Group
	gb := g*q.nb + blk
	return q.w[gb*q8BlockBytes+4*i : (gb+1)*q8BlockBytes], &q.d[gb*q8Group+i]
}

// row dequantises row r into dst: float32(w)·d, as a plain Q8_0 row.
func (q *q8il) row(r int, dst []float32) {
	for blk := 0; blk < q.nb; blk++ {
		w, dh := q.at(r, blk)
		d := f16ToF32(*dh)
		for k := 0; k < 8; k++ {
			for j := 0; j < 4; j++ {
				dst[blk*32+4*k+j] = float32(int8(w[k*q8ChunkBytes+j]^q8Pad)) * d
			}
		}
	}
}

// view is rows [lo, hi): sharing q's memory where lo starts a group and hi
// ends one (or q), else a copy.
func (q *q8il) view(lo, hi int) *q8il {
	nb := q.nb
	if lo%q8Group == 0 && (hi%q8Group == 0 || hi == q.rows) {
		g0, g1 := lo/q8Group, (hi+q8Group-1)/q8Group
		return &q8il{w: q.w[g0*nb*q8BlockBytes : g1*nb*q8BlockBytes : g1*nb*q8BlockBytes],
			d: q.d[g0*nb*q8Group : g1*nb*q8Group : g1*nb*q8Group], rows: hi - lo, nb: nb}
	}
	v := newQ8IL(hi-lo, nb*32)
	for r := lo; r < hi; r++ {
		for blk := 0; blk < nb; blk++ {
			src, sd := q.at(r, blk)
			dst, dd := v.at(r-lo, blk)
			*dd = *sd
			for k := 0; k < 8; k++ {
				copy(dst[k*q8ChunkBytes:k*q8ChunkBytes+4], src[k*q8ChunkBytes:])
			}
		}
	}
	return v
}

func (q *q8il) bytes() int64 {
	if q == nil {
		return 0
	}
	return int64(len(q.w)) + 2*int64(len(q.d))
}

// packIL writes activation blocks [lo, hi) (of all rows, nb per row, as
// quantised in a.q and a.d) into a.xil, the SIMD kernels' layout: tokens in
// tiles of q8TokTile (the last may be shorter); tile j starts at byte
// 40·nb·q8TokTile·j, and holds per block, for its T tokens, 4T bytes of
// -128·Σx (int32), 4T of scales, then chunk k of token t at 8T+4(kT+t).
func (a *act) packIL(lo, hi int) {
	nb := a.cols / 32
	le := binary.LittleEndian
	t, b := lo/nb, lo%nb // block i's row and place in it
	for i := lo; i < hi; i, b = i+1, b+1 {
		if b == nb {
			t, b = t+1, 0
		}
		j, tt := t/q8TokTile, t%q8TokTile
		T := min(q8TokTile, a.n-j*q8TokTile)
		p := a.xil[(j*q8TokTile*nb+b*T)*q8ActBlock : (j*q8TokTile*nb+(b+1)*T)*q8ActBlock]
		x := a.q[32*i : 32*i+32 : 32*i+32]
		// Σx eight bytes a word: each byte XOR 0x80 is x+128 unsigned,
		// summed in 16-bit lanes (at most 8·255 each), then across them.
		var lanes uint64
		for k := 0; k < 4; k++ {
			c := x[8*k : 8*k+8 : 8*k+8]
			w := uint64(uint8(c[0])) | uint64(uint8(c[1]))<<8 | uint64(uint8(c[2]))<<16 | uint64(uint8(c[3]))<<24 |
				uint64(uint8(c[4]))<<32 | uint64(uint8(c[5]))<<40 | uint64(uint8(c[6]))<<48 | uint64(uint8(c[7]))<<56
			le.PutUint32(p[8*T+4*(2*k*T+tt):], uint32(w))
			le.PutUint32(p[8*T+4*((2*k+1)*T+tt):], uint32(w>>32))
			u := w ^ 0x8080808080808080
			lanes += u&0x00ff00ff00ff00ff + u>>8&0x00ff00ff00ff00ff
		}
		sum := int32(lanes*0x0001000100010001>>48) - 32*128
		le.PutUint32(p[4*tt:], uint32(q8Bias*sum))
		le.PutUint32(p[4*T+4*tt:], math.Float32bits(a.d[i]))
	}
}

// matmulQ8 computes rows [r0, r1) of out = W·x for a Q8_0 matrix. r0
// starts a 16-row group (matmulGrain's chunks are an even number of 8-row
// blocks) and r1 ends one or the matrix. A decode (up to q8TokTile input
// rows) is one kernel call over the chunk's groups; a prefill goes 64
// tokens at a time, each group against their 8-token tiles while it is in
// cache. Every output is one row's dotQ8 with one input row whatever the
// tiling.
func matmulQ8(out []float32, w *matrix, x *act, r0, r1 int) {
	if r0%q8Group != 0 {
		panic("engine: a Q8_0 matrix product chunk does not start a 16-row group")
	}
	q, rows := w.q8, w.rows
	g0, g1 := r0/q8Group, (r1+q8Group-1)/q8Group
	full := min(g1, rows/q8Group) // groups [g0, full) have 16 real rows
	var tmp [q8TokTile * q8Group]float32
	for tt := 0; tt < x.n; tt += q8SuperTile {
		te := min(tt+q8SuperTile, x.n)
		if te-tt <= q8TokTile {
			if full > g0 {
				q8ilTile(out[tt*rows+g0*q8Group:], rows, q, g0, full-g0, x, tt, te-tt)
			}
		} else {
			for g := g0; g < full; g++ {
				for t := tt; t < te; t += q8TokTile {
					q8ilTile(out[t*rows+g*q8Group:], rows, q, g, 1, x, t, min(q8TokTile, te-t))
				}
			}
		}
		if full < g1 { // the last group, with padding rows
			for t := tt; t < te; t += q8TokTile {
				n := min(q8TokTile, te-t)
				q8ilTile(tmp[:], q8Group, q, full, 1, x, t, n)
				for u := 0; u < n; u++ {
					copy(out[(t+u)*rows+full*q8Group:(t+u+1)*rows], tmp[u*q8Group:])
				}
			}
		}
	}
}

// q8ilPortable is the kernels' portable form: groups groups from g against
// tokens [t0, t0+T) of x (from a.q and a.d), token t's outputs at
// out[t*ostride:], 16 on per group.
func q8ilPortable(out []float32, ostride int, q *q8il, g, groups int, a *act, t0, T int) {
	nb := q.nb
	c := nb * 32
	// A group's scales, widened: on the stack up to 512 blocks a row
	// (16,384 columns), since a prefill calls this once per group and
	// tile.
	var buf [512 * q8Group]float32
	wd := buf[:]
	if nb*q8Group > len(buf) {
		wd = make([]float32, nb*q8Group)
	}
	for gg := 0; gg < groups; gg++ {
		w := q.w[(g+gg)*nb*q8BlockBytes : (g+gg+1)*nb*q8BlockBytes]
		for i, h := range q.d[(g+gg)*nb*q8Group : (g+gg+1)*nb*q8Group] {
			wd[i] = f16ToF32(h)
		}
		for t := 0; t < T; t++ {
			xq, xd := a.q[(t0+t)*c:(t0+t+1)*c], a.d[(t0+t)*nb:(t0+t+1)*nb]
			for i := 0; i < q8Group; i++ {
				acc := float32(0)
				for b := 0; b < nb; b++ {
					blk := w[b*q8BlockBytes : (b+1)*q8BlockBytes]
					x := xq[b*32 : b*32+32 : b*32+32]
					isum := int32(0)
					for k := 0; k < 8; k++ {
						for j := 0; j < 4; j++ {
							isum += (int32(blk[k*q8ChunkBytes+4*i+j]) - 128) * int32(x[4*k+j])
						}
					}
					s := float32(wd[b*q8Group+i] * xd[b])
					acc += float32(float32(isum) * s)
				}
				out[t*ostride+gg*q8Group+i] = acc
			}
		}
	}
}
