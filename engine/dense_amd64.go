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
// rows a call, then the activation rows left over 8 rows a call. A block
// that the cut or the padding splits goes through a scratch tile.
func matmulHIL(out []float32, w *matrix, x *act, r0, r1 int) {
	c := w.cols
	var pad [gemmTokTile * hilRows]float32
	// tile runs f (token t's 8 outputs at o[(t−t0)·stride:]) on each 8-row
	// block for activation rows t0 to t1.
	tile := func(t0, t1 int, f func(blk []byte, o []float32, stride int)) {
		for b := r0 / hilRows; b*hilRows < r1; b++ {
			lo, hi := max(r0, b*hilRows), min(r1, (b+1)*hilRows)
			blk := w.il[b*hilRows*2*c : (b+1)*hilRows*2*c]
			if lo == b*hilRows && hi == (b+1)*hilRows {
				f(blk, out[t0*w.rows+lo:], w.rows)
				continue
			}
			f(blk, pad[:], hilRows)
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
	var wide []float32
	if c <= hilWidenCols && n4 >= 8 {
		p := hilWide.Get().(*[]float32)
		defer hilWide.Put(p)
		if cap(*p) < hilRows*c {
			*p = make([]float32, hilRows*c)
		}
		wide = (*p)[:hilRows*c]
	}
	for tt := 0; tt < n4; tt += gemmTokTile {
		te := min(tt+gemmTokTile, n4)
		tile(tt, te, func(blk []byte, o []float32, stride int) {
			_ = o[(te-tt-1)*stride+hilRows-1]
			if wide != nil {
				// The block as floats, in its order: a step's 8 rows × 16
				// values are 128 floats, rows 4 to 7 from the 64th.
				widenRows(wide, blk, w.typ)
				for h := 0; h < 2; h++ {
					for t := tt; t < te; t += 4 {
						ot := o[(t-tt)*stride:]
						gemm4x4W(&ot[4*h], 4*stride, &wide[64*h], 64, &x.f[t*c], 4*c, c, 512)
					}
				}
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
		tile(t, t+1, func(blk []byte, o []float32, _ int) {
			_ = o[hilRows-1]
			dot(&o[0], &blk[0], &x.f[t*c], c, hilPrefetch)
		})
	}
}

// hilWidenCols is the most columns for which matmulHIL widens each 8-row
// block to float32 once per tile of activation rows, so that its 4×4
// tiles (gemm4x4W) do fused multiply-adds alone: four widened rows of 2048
// columns (32 KB) stay in L1 while the tile's activation rows pass. Wider
// blocks keep the widening in the tiles' loop (gemm4x4F16, gemm4x4BF16).
// Tests set it to 0 to run those.
var hilWidenCols = 2048

// hilWide holds matmulHIL's widened blocks, one a worker at a time.
var hilWide = sync.Pool{New: func() any { return new([]float32) }}

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
func gemm4x4W(out *float32, os int, w *float32, ws int, x *float32, xs int, cols int, wstep int)

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
