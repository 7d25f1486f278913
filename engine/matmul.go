package engine

// act is a batch of n input rows of cols values for a matrix product,
// quantised to Q8_0 on first use by a Q8_0 matrix (once for all the
// matrices that share it, as Q, K and V do).
type act struct {
	f       []float32
	n, cols int
	q       []int8
	d       []float32
	xil     []byte    // q, d and -128·Σq in the Q8_0 kernels' tiles (q8il.go)
	sums    []float32 // per Q8_0 block, for the types with a min (Q4_1, Q5_1)
	kq      []int8    // Q8_K: values, scales and 16-element sums
	kd      []float32
	kbsums  []int16
	ks32    []byte    // kilExtras: Q4_K's sums of 32
	ks16    []byte    // kilExtras: Q6_K's −32 × sums of 16
	mxs4    []int32   // mxfp4Extras: per Q8_0 block 12·Σq, four times over
	mxd4    []float32 // mxfp4Extras: per Q8_0 block its scale, four times over
}

// mxfp4Extras lays out, for MXFP4's four-row kernel, each activation
// block's 12·Σq (its grid is biased by 12 to be unsigned) and scale four
// times over, per activation row its blocks and one zero block more
// (mxfp4Stride values a row).
func (a *act) mxfp4Extras() {
	if a.mxs4 != nil {
		return
	}
	nb := len(a.d)
	a.mxs4 = make([]int32, a.n*mxfp4Stride(a.cols))
	a.mxd4 = make([]float32, a.n*mxfp4Stride(a.cols))
	per := a.cols / 32
	for b := 0; b < nb; b++ {
		s := int32(0)
		for _, v := range a.q[32*b : 32*b+32] {
			s += int32(v)
		}
		o := b/per*mxfp4Stride(a.cols) + 4*(b%per)
		for r := 0; r < 4; r++ {
			a.mxs4[o+r], a.mxd4[o+r] = 12*s, a.d[b]
		}
	}
}

// mxfp4Stride is mxfp4Extras' values per activation row of cols.
func mxfp4Stride(cols int) int { return 4*(cols/32) + 4 }

func newAct(f []float32, n, cols int) *act { return &act{f: f[:n*cols], n: n, cols: cols} }

func (a *act) quantized(p *pool) ([]int8, []float32) {
	if a.q == nil {
		a.q = make([]int8, a.n*a.cols)
		a.d = make([]float32, a.n*a.cols/32)
		a.xil = make([]byte, len(a.d)*q8ActBlock)
		// Blocks are quantised independently, so they can be split.
		nb := len(a.d)
		p.forRange(nb, p.grainFor(nb, 32), len(a.q)*quantWork, func(lo, hi int) {
			quantizeQ8(a.f[32*lo:32*hi], a.q[32*lo:32*hi], a.d[lo:hi])
			a.packIL(lo, hi)
		})
	}
	return a.q, a.d
}

func (a *act) quantizedK(p *pool) ([]int8, []float32, []int16) {
	if a.kq == nil {
		a.kq = make([]int8, a.n*a.cols)
		a.kd = make([]float32, a.n*a.cols/256)
		a.kbsums = make([]int16, a.n*a.cols/16)
		nb := len(a.kd)
		p.forRange(nb, p.grainFor(nb, 4), len(a.kq)*quantWork, func(lo, hi int) {
			quantizeQ8K(a.f[256*lo:256*hi], a.kq[256*lo:256*hi], a.kd[lo:hi], a.kbsums[16*lo:16*hi])
		})
	}
	return a.kq, a.kd, a.kbsums
}

// quantWork weighs quantising one activation against one multiply-add of
// a matrix product (both in forRange's work units): a decode step's 2048
// activations are worth splitting once workers are awake.
const quantWork = 16

// prepare quantises the activations the way matrix w needs them, once.
func (a *act) prepare(w *matrix) { a.prepareOn(nil, w) }

// prepareOn is prepare with the quantisation spread over pool p (nil: the
// calling goroutine alone).
func (a *act) prepareOn(p *pool, w *matrix) {
	switch {
	case w.f != nil, w.typ == F16, w.typ == BF16:
	case w.qf == nil:
		a.quantized(p)
	case w.qf.k:
		a.quantizedK(p)
		if w.il != nil {
			a.kilExtras(w.typ)
		}
	default:
		a.quantized(p)
		if a.sums == nil {
			a.sums = q8Sums(a.q, a.d)
		}
		if w.typ == MXFP4 && packedRowsKernel(MXFP4) != nil {
			a.mxfp4Extras()
		}
	}
}

// matmul computes out[t*rows + r] = W[r]·x[t] for every input row t. Rows
// of W go to the pool's goroutines in chunks of 8-row blocks, and each
// block of W is used for every input row while it is in cache.
func (s *Local) matmul(out []float32, w *matrix, x *act) {
	s.matmuls(x, product{out, w})
}

// product is one matrix product of a matmuls call: out = W·x.
type product struct {
	out []float32
	w   *matrix
}

// matmuls computes several products of the same activations (Q, K and V;
// gate and up) in one pool loop: one hand-off instead of several, and the
// small matrices' chunks fill the gaps the large ones leave at the end.
// Each chunk is rows of one matrix, so every output is still computed as
// matmul alone computes it.
func (s *Local) matmuls(x *act, ps ...product) {
	s.matmulSets([]actProducts{{x, ps}})
}

// actProducts are products of one batch of activations.
type actProducts struct {
	x  *act
	ps []product
}

// matmulSets is matmuls over several batches of activations at once (a
// mixture of experts' experts, each with its own rows) in one pool loop.
func (s *Local) matmulSets(sets []actProducts) {
	type chunk struct {
		set, p int
		lo, hi int // 8-row blocks
	}
	var chunks []chunk
	work := 0
	for si, set := range sets {
		x := set.x
		for i, p := range set.ps {
			x.prepareOn(s.pool, p.w)
			blocks := (p.w.rows + rowBlock - 1) / rowBlock
			grain := s.pool.matmulGrain(blocks, int(p.w.bytes()), x.n)
			for lo := 0; lo < blocks; lo += grain {
				chunks = append(chunks, chunk{si, i, lo, min(lo+grain, blocks)})
			}
			work += p.w.rows * p.w.cols * x.n
		}
	}
	s.pool.forRange(len(chunks), 1, work, func(lo, hi int) {
		for _, c := range chunks[lo:hi] {
			x := sets[c.set].x
			out, w := sets[c.set].ps[c.p].out, sets[c.set].ps[c.p].w
			r0, r1 := c.lo*rowBlock, min(c.hi*rowBlock, w.rows)
			switch {
			case w.f != nil:
				matmulF32(out, w, x, r0, r1)
			case w.typ == F16 || w.typ == BF16:
				matmulHalf(out, w, x, r0, r1)
			case w.qf != nil:
				matmulPacked(out, w, x, r0, r1)
			default:
				matmulQ8(out, w, x, r0, r1)
			}
		}
	})
}

// matmulChunkBytes is the least weight bytes a chunk of a matrix product
// should read. A decode step streams its weights from memory, and each
// core's prefetchers need long runs of consecutive addresses: measured on a
// 54 MB Q6_K matrix at 2 threads, chunks of 27 KB read 21 GB/s, 107 KB 39,
// 1.7 MB and more 51-52.
const matmulChunkBytes = 1 << 20

// matmulGrain is the 8-row blocks per chunk for a product with a matrix of
// blocks blocks and bytes bytes against rows input rows: chunks of at
// least matmulChunkBytes of weights times input rows (a prefill reuses
// each chunk from cache, so its chunks can be shorter), one per goroutine
// at the least, so that a descheduled thread's share can still be taken
// over, and four at the most, or sixteen for a product of at least
// matmulComputeRows rows. Such a product is bound by arithmetic, not by
// memory, and the goroutines wait at its end for the last chunk: 2-thread
// 512-token prefills on the Intel VM, built with at most 4 and 16 chunks
// a goroutine, alternating (tok/s): Q8_0 150, 182, 144, 151, 139, 162,
// 166, 152, 174 → 184, 181, 153, 172, 162, 159, 184, 184, 164 (medians
// 152 → 172); F16 49.9, 51.4, 51.6 → 56.3, 54.9, 53.8; Q4_K_M 147, 170,
// 155 → 177, 168, 154. An even count keeps the packed kernels' 16-row
// tiles and Q8_0's 16-row groups (q8il.go) whole.
func (p *pool) matmulGrain(blocks, bytes, rows int) int {
	n := 1
	if p != nil {
		n = p.n
	}
	most := 4 * n
	if rows >= matmulComputeRows {
		most = 16 * n
	}
	chunks := min(max(bytes*rows/matmulChunkBytes, n), most)
	return ((blocks+chunks-1)/chunks + 1) &^ 1
}

// matmulComputeRows is the fewest input rows for which matmulGrain takes
// a product as bound by arithmetic. A batch of decode steps (16 sessions)
// still streams its weights, whose chunks must stay long.
const matmulComputeRows = 64

// rowBlock is the rows one kernel call computes for each input row.
const rowBlock = 8

// matmulF32 computes rows r0 to r1 of F32 matrix w against every
// activation row: in 4×4 tiles where it can (gemmTiles), the rest 8 rows
// a call per activation row.
func matmulF32(out []float32, w *matrix, x *act, r0, r1 int) {
	r4, n4 := gemmTiles(out, w, x, r0, r1)
	matmulF32Rows(out, w, x, r0, r4, n4, x.n)
	matmulF32Rows(out, w, x, r4, r1, 0, x.n)
}

func matmulF32Rows(out []float32, w *matrix, x *act, r0, r1, t0, t1 int) {
	c := w.cols
	for r := r0; r < r1; r += rowBlock {
		m := min(rowBlock, r1-r)
		for t := t0; t < t1; t++ {
			xv := x.f[t*c : (t+1)*c]
			o := out[t*w.rows+r : t*w.rows+r+m]
			dotRowsF32(o, w.f[r*c:(r+m)*c], xv)
		}
	}
}

// matmulHalf is matmulF32 on F16 or BF16 weights: the 4×4 tiles and a
// decode's F16 kernel widen the halves (exactly) as they load them, the
// rest goes through rows widened into a scratch buffer. Every output is
// dotFused of its row's widened values: an F32 file's order, its products
// added by fused multiply-adds.
func matmulHalf(out []float32, w *matrix, x *act, r0, r1 int) {
	if w.il != nil {
		matmulHIL(out, w, x, r0, r1)
		return
	}
	if x.n == 1 && halfDecode(out, w, x.f, r0, r1) {
		return
	}
	r4, n4 := gemmTiles(out, w, x, r0, r1)
	matmulHalfRows(out, w, x, r0, r4, n4, x.n)
	matmulHalfRows(out, w, x, r4, r1, 0, x.n)
}

func matmulHalfRows(out []float32, w *matrix, x *act, r0, r1, t0, t1 int) {
	if r0 >= r1 || t0 >= t1 {
		return
	}
	c := w.cols
	buf := make([]float32, rowBlock*c)
	for r := r0; r < r1; r += rowBlock {
		m := min(rowBlock, r1-r)
		widenRows(buf[:m*c], w.raw[2*r*c:], w.typ)
		for t := t0; t < t1; t++ {
			dotRowsHalf(out[t*w.rows+r:t*w.rows+r+m], buf[:m*c], x.f[t*c:(t+1)*c])
		}
	}
}

// widenRow converts len(dst) F16 or BF16 values to float32.
func widenRow(dst []float32, raw []byte, t DType) {
	raw = raw[:2*len(dst)]
	if t == BF16 {
		for i := range dst {
			dst[i] = bf16ToF32(uint16(raw[2*i]) | uint16(raw[2*i+1])<<8)
		}
		return
	}
	for i := range dst {
		dst[i] = f16Table[uint16(raw[2*i])|uint16(raw[2*i+1])<<8]
	}
}

// f16Table is every half's float32 value: widening F16 weights by lookup.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToF32(uint16(i))
	}
	return &t
}()

// Packed products of many input rows (a prefill) go tile by tile: a tile
// of weight rows against a tile of input rows, both small enough to stay
// in cache while each meets the other. Every output is still one row's dot
// product with one input row, so tiling moves time, never bits.
const (
	packedRowTile = 16
	packedTokTile = 32
)

// matmulPacked is matmulQ8 for the packed types, one row at a time.
func matmulPacked(out []float32, w *matrix, x *act, r0, r1 int) {
	if w.il != nil {
		matmulKIL(out, w, x, r0, r1)
		return
	}
	f, c := w.qf, w.cols
	nb := c / f.block
	rb := nb * f.bytes
	if rk := packedRowsKernel(w.typ); rk != nil && x.n == 1 && r1 > r0 {
		// Decode: one activation row, so no tiling to do.
		rk(out[r0:r1], w.raw[r0*rb:r1*rb], x, c)
		return
	}
	if tk := packedTokRowsKernel(w.typ); tk != nil && x.mxs4 != nil {
		// MXFP4's four-row kernel, a tile's rows against each input row.
		for rt := r0; rt < r1; rt += packedRowTile {
			re := min(rt+packedRowTile, r1)
			for t := 0; t < x.n; t++ {
				tk(out[t*w.rows+rt:t*w.rows+re], w.raw[rt*rb:re*rb], x, t, c)
			}
		}
		return
	}
	fast := packedRowKernel(w.typ)
	for rt := r0; rt < r1; rt += packedRowTile {
		re := min(rt+packedRowTile, r1)
		for tt := 0; tt < x.n; tt += packedTokTile {
			te := min(tt+packedTokTile, x.n)
			for r := rt; r < re; r++ {
				row := w.raw[r*rb : (r+1)*rb]
				if fast != nil {
					fast(out[r:], w.rows, row, x, tt, te, c)
					continue
				}
				for t := tt; t < te; t++ {
					if f.k {
						out[t*w.rows+r] = dotRowQuant(f, row, x.kq[t*c:(t+1)*c], x.kd[t*nb:(t+1)*nb], x.kbsums[t*c/16:(t+1)*c/16], nil)
					} else {
						out[t*w.rows+r] = dotRowQuant(f, row, x.q[t*c:(t+1)*c], x.d[t*nb:(t+1)*nb], nil, x.sums[t*nb:(t+1)*nb])
					}
				}
			}
		}
	}
}

// dotRowsF32Portable writes len(out) dot products of consecutive rows of w
// with x.
func dotRowsF32Portable(out, w, x []float32) {
	c := len(x)
	for i := range out {
		out[i] = dotF32(w[i*c:(i+1)*c], x)
	}
}

func dotRowsQ8Portable(out []float32, wq []int8, wd []float32, xq []int8, xd []float32) {
	c, nb := len(xq), len(xd)
	for i := range out {
		out[i] = dotQ8(wq[i*c:(i+1)*c], wd[i*nb:(i+1)*nb], xq, xd)
	}
}
