package engine

import "sync"

// The dense types' kernels beside dotRowsF32: F16/BF16 widening
// (dense_amd64.s), the F16 decode kernel (dot8F16, kernels_amd64.s) and
// the 4×4 tiles of a prefill or a batch (gemm_amd64.s, generated).

//go:noescape
func widenF16(dst *float32, src *byte, n int)

//go:noescape
func widenBF16(dst *float32, src *byte, n int)

// widenRows is widenRow 16 values an instruction where the CPU has
// AVX-512 (VCVTPH2PS; a bfloat16 is a shift): the same float32 values,
// except that a signalling NaN half comes out quiet, which the products
// that read it would make it anyway.
func widenRows(dst []float32, raw []byte, t DType) {
	n := 0
	if useSIMD && hasAVX512 {
		n = len(dst) &^ 15
	}
	if n > 0 {
		_ = raw[2*n-1]
		if t == BF16 {
			widenBF16(&dst[0], &raw[0], n)
		} else {
			widenF16(&dst[0], &raw[0], n)
		}
	}
	widenRow(dst[n:], raw[2*n:], t)
}

//go:noescape
func dot8F16(out *float32, w *byte, x *float32, cols, stride int)

//go:noescape
func dot8F16IL(out *float32, w *byte, x *float32, cols, pf int)

//go:noescape
func dot8BF16IL(out *float32, w *byte, x *float32, cols, pf int)

// hilPrefetch is how far ahead dot8F16IL and dot8BF16IL prefetch. A
// decode's products read weights at the speed of memory, and on the Intel
// VM prefetching 4 KB ahead made a TinyLlama-shaped F16 decode at 1 thread
// 3.8–4.1 → 5.5–6.1 tok/s (2 KB ahead was slower; 8 and 16 KB,
// PREFETCHT1 and T2 no better). On AMD's EPYC prefetch had slowed the K-quant kernels
// (kilgen's main.go); this one is unmeasured there, so it stays off.
// The kernels also prefetch 3·hilPrefetch ahead into L2 (PREFETCHT2), as
// the K-quant ones do: on the Emerald Rapids VM a TinyLlama-shaped F16
// decode step's fraction of bandwidth went from 0.80–0.86 to 0.94
// (BenchmarkDecodeBandwidth, 3 runs alternating, 2026-12-01).
var hilPrefetch = func() int {
	if cpuIntel {
		return 4096
	}
	return 0
}()

// useHIL reports whether F16 and BF16 matrices loaded now take hil.go's layout.
func useHIL() bool { return useSIMD && hasAVX512 && useKILKernels }

// matmulHIL computes rows r0 to r1 of an F16 or BF16 matrix in hil.go's layout
// against every activation row: each 8-row block against a tile of
// gemmTokTile activation rows while it is in cache, 4 rows × 4 activation
// rows a call (widened first where there are at least 8 such rows:
// hilScratch.widened), then the activation rows left over 8 rows a call. A
// block that the cut or the padding splits goes through a scratch tile.
func matmulHIL(out []float32, w *matrix, x *act, r0, r1 int) {
	c := w.cols
	var pad [gemmTokTile * hilRows]float32
	// tile runs f (token t's 8 outputs at o[(t−t0)·stride:]) on each 8-row
	// block for activation rows t0 to t1.
	tile := func(t0, t1 int, f func(b int, blk []byte, o []float32, stride int)) {
		for b := r0 / hilRows; b*hilRows < r1; b++ {
			lo, hi := max(r0, b*hilRows), min(r1, (b+1)*hilRows)
			blk := w.il[b*hilRows*2*c : (b+1)*hilRows*2*c]
			if lo == b*hilRows && hi == (b+1)*hilRows {
				f(b, blk, out[t0*w.rows+lo:], w.rows)
				continue
			}
			f(b, blk, pad[:], hilRows)
			for t := t0; t < t1; t++ {
				copy(out[t*w.rows+lo:t*w.rows+hi], pad[(t-t0)*hilRows+lo-b*hilRows:])
			}
		}
	}
	gemm, dot := gemm4x4F16, dot8F16IL
	if w.typ == BF16 {
		gemm, dot = gemm4x4BF16, dot8BF16IL
	}
	n4 := x.n &^ 3
	var sc *hilScratch
	if kb := hilWidenCols; kb > 0 && n4 >= 8 {
		sc = hilWide.Get().(*hilScratch)
		defer hilWide.Put(sc)
		if cap(sc.wide) < hilRows*kb {
			sc.wide = make([]float32, hilRows*kb)
		}
	}
	for tt := 0; tt < n4; tt += gemmTokTile {
		te := min(tt+gemmTokTile, n4)
		tile(tt, te, func(b int, blk []byte, o []float32, stride int) {
			_ = o[(te-tt-1)*stride+hilRows-1]
			if sc != nil {
				sc.widened(w, x, b, o, stride, tt, te)
				return
			}
			for t := tt; t < te; t += 4 {
				ot := o[(t-tt)*stride:]
				gemm(&ot[0], 4*stride, &blk[0], 32, &x.f[t*c], 4*c, c, 256)
				gemm(&ot[4], 4*stride, &blk[128], 32, &x.f[t*c], 4*c, c, 256)
			}
		})
	}
	for t := n4; t < x.n; t++ {
		tile(t, t+1, func(_ int, blk []byte, o []float32, _ int) {
			_ = o[hilRows-1]
			dot(&o[0], &blk[0], &x.f[t*c], c, hilPrefetch)
		})
	}
}

// hilWidenCols is how many columns of an 8-row block matmulHIL widens to
// float32 at a time, once per tile of activation rows, so that its 4×4
// tiles (gemm4x4W) do fused multiply-adds alone. Four widened rows of 1024
// columns and four activation rows (16 KB each) stay in L1: in a probe of
// 64 activation rows in cache (best of 200, beside other work), 1024
// columns a block gave 55–62 GMAC/s, 768 about the same, 2048 50–56 and
// 256 47–51, and a 5632-column matrix widened in the tiles' loop 50. A
// multiple of 16; tests set it lower to cut small matrices into blocks, and
// to 0 to keep the widening in the tiles' loop (gemm4x4F16, gemm4x4BF16),
// as a batch of fewer than 8 activation rows does.
var hilWidenCols = 1024

// hilScratch is matmulHIL's widened column block and its tiles' lanes
// between blocks: a 4×4 tile's 16 outputs × 16 lanes, for each of a token
// tile's 4-row groups and each half of the block.
type hilScratch struct {
	wide []float32
	acc  [gemmTokTile / 2][256]float32
}

// widened computes 8-row block b of F16 or BF16 matrix w in hil.go's
// layout against activation rows t0 to t1 (a multiple of 4 apart), token
// t's 8 outputs at o[(t−t0)·stride:]: the block as floats a column block
// at a time, in its order (a step's 8 rows × 16 values are 128 floats,
// rows 4 to 7 from the 64th), 4 rows × 4 activation rows a call. Each
// tile's lanes carry from one column block to the next in sc.acc, so the
// sums run in the same order as in one pass. The calls prefetch the
// next column block's halves, which follow in w.il (the next 8-row block's
// first after the last), a share each, so that its widening finds them in
// cache: on the Intel VM that took the widening in a 1-thread F16
// prefill's profile from 1.24 s to 0.54 s, while the tiles took 0.38 s
// more.
func (sc *hilScratch) widened(w *matrix, x *act, b int, o []float32, stride, t0, t1 int) {
	c, kb := w.cols, hilWidenCols
	blk := w.il[b*hilRows*2*c : (b+1)*hilRows*2*c]
	calls := (t1 - t0) / 2
	for k0 := 0; k0 < c; k0 += kb {
		k1 := min(c, k0+kb)
		widenRows(sc.wide[:hilRows*(k1-k0)], blk[2*hilRows*k0:2*hilRows*k1], w.typ)
		mode := 0
		if k0 > 0 {
			mode |= 1 // lanes from sc.acc
		}
		if k1 == c {
			mode |= 2 // reduce into o
		}
		next := w.il[min(len(w.il), b*hilRows*2*c+2*hilRows*k1):]
		next = next[:min(len(next), 2*hilRows*kb)]
		share := (len(next)/64 + calls - 1) / calls * 64
		for h := 0; h < 2; h++ {
			for t := t0; t < t1; t += 4 {
				i := (t-t0)/2 + h
				pf := next[min(len(next), i*share):min(len(next), (i+1)*share)]
				lines, p := (len(pf)+63)/64, &blk[0]
				if lines > 0 {
					p = &pf[0]
				}
				gemm4x4W(&o[(t-t0)*stride+4*h], 4*stride, &sc.wide[64*h], 64, &x.f[t*c+k0], 4*c, k1-k0, 512, &sc.acc[i][0], mode, p, lines)
			}
		}
	}
}

// hilWide holds matmulHIL's scratch, one a worker at a time.
var hilWide = sync.Pool{New: func() any { return new(hilScratch) }}

// halfDecode computes rows r0 to r1 of F16 matrix w against the one
// activation row x in place, 8 rows a call, where it can (AVX-512, F16,
// whole 16-lane steps), and reports whether it did.
func halfDecode(out []float32, w *matrix, x []float32, r0, r1 int) bool {
	c := w.cols
	if !useSIMD || !hasAVX512 || w.typ != F16 || c%16 != 0 || (r1-r0)%rowBlock != 0 {
		return false
	}
	_ = w.raw[2*r1*c-1]
	_ = out[r1-1]
	for r := r0; r < r1; r += rowBlock {
		dot8F16(&out[r], &w.raw[2*r*c], &x[0], c, c)
	}
	return true
}

//go:noescape
func gemm4x4F32(out *float32, os int, w *float32, ws int, x *float32, xs int, cols int, wstep int)

//go:noescape
func gemm4x4F16(out *float32, os int, w *byte, ws int, x *float32, xs int, cols int, wstep int)

//go:noescape
func gemm4x4BF16(out *float32, os int, w *byte, ws int, x *float32, xs int, cols int, wstep int)

//go:noescape
func gemm4x4W(out *float32, os int, w *float32, ws int, x *float32, xs int, cols int, wstep int, acc *float32, mode int, pf *byte, pfn int)

// gemmTokTile is the activation rows a 4-row tile meets while the tile's
// weights stay in cache: 64 rows of 2048 values are 512 KB.
const gemmTokTile = 64

// gemmTiles computes rows r0 to r4 of an F32, F16 or BF16 matrix against
// activation rows 0 to n4 in tiles of 4 rows × 4 activation rows
// (gemm_amd64.s), where the CPU has AVX-512 and there are such tiles, and
// returns r4 and n4 (r0 and 0 where it did nothing): r4 − r0 and n4 are
// the multiples of 4 below r1 − r0 and x.n.
func gemmTiles(out []float32, w *matrix, x *act, r0, r1 int) (r4, n4 int) {
	c := w.cols
	r4, n4 = r0+(r1-r0)&^3, x.n&^3
	if !useSIMD || !hasAVX512 || c%16 != 0 || r4 == r0 || n4 == 0 {
		return r0, 0
	}
	_ = out[(n4-1)*w.rows+r4-1]
	_ = x.f[n4*c-1]
	for tt := 0; tt < n4; tt += gemmTokTile {
		te := min(tt+gemmTokTile, n4)
		for r := r0; r < r4; r += 4 {
			for t := tt; t < te; t += 4 {
				o, xt := &out[t*w.rows+r], &x.f[t*c]
				switch {
				case w.f != nil:
					gemm4x4F32(o, 4*w.rows, &w.f[r*c], 4*c, xt, 4*c, c, 64)
				case w.typ == F16:
					gemm4x4F16(o, 4*w.rows, &w.raw[2*r*c], 2*c, xt, 4*c, c, 32)
				default:
					gemm4x4BF16(o, 4*w.rows, &w.raw[2*r*c], 2*c, xt, 4*c, c, 32)
				}
			}
		}
	}
	return r4, n4
}
