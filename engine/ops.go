package engine

import (
	"fmt"
	"math"
	"sync"
)

// The Go engine's Ops: each op runs this package's kernels over all rows
// of the step at once (so an op costs one interface call per layer, not
// per value), with the summation orders the package doc sets out. The
// block's intermediate tensors come from an arena that every layer reuses
// (the same ops in the same order, so the same sizes), and the residual
// stream is added to in place.

// goTensor is an activation: rows of w values, row-major.
type goTensor struct {
	f []float32
	w int
}

// arena hands out the tensors of one layer, reused by the next.
type arena struct {
	bufs [][]float32
	ts   []*goTensor
	n    int
}

func (a *arena) reset() { a.n = 0 }

func (a *arena) tensor(rows, w int) *goTensor {
	n := rows * w
	if a.n == len(a.bufs) {
		a.bufs = append(a.bufs, nil)
		a.ts = append(a.ts, &goTensor{})
	}
	if cap(a.bufs[a.n]) < n {
		a.bufs[a.n] = make([]float32, n)
	}
	t := a.ts[a.n]
	t.f, t.w = a.bufs[a.n][:n:n], w
	a.n++
	return t
}

var _ Ops = (*forward)(nil)

// fail records the first op the engine cannot do; the step returns it.
func (fw *forward) fail(err error) {
	if fw.err == nil {
		fw.err = err
	}
}

func (fw *forward) t(x Tensor) *goTensor { return x.(*goTensor) }

func (fw *forward) RMSNorm(x Tensor, w Weight, eps float32) Tensor {
	xt, wv := fw.t(x), w.([]float32)
	out := fw.arena.tensor(len(fw.rows), xt.w)
	if xt.w%len(wv) != 0 {
		fw.fail(fmt.Errorf("%w: RMSNorm of rows of %d by a weight of %d", ErrShape, xt.w, len(wv)))
		return out
	}
	for i := 0; i < len(xt.f); i += len(wv) {
		rmsNorm(out.f[i:i+len(wv)], xt.f[i:i+len(wv)], wv, eps)
	}
	return out
}

func (fw *forward) Linear(x Tensor, w Weight) Tensor {
	xt, m := fw.t(x), w.(*matrix)
	out := fw.arena.tensor(len(fw.rows), m.rows)
	fw.s.matmul(out.f, m, newAct(xt.f, len(fw.rows), xt.w))
	return out
}

func (fw *forward) Linears(x Tensor, ws ...Weight) []Tensor {
	xt := fw.t(x)
	ps := make([]product, len(ws))
	outs := make([]Tensor, len(ws))
	for i, w := range ws {
		m := w.(*matrix)
		t := fw.arena.tensor(len(fw.rows), m.rows)
		ps[i], outs[i] = product{t.f, m}, t
	}
	fw.s.matmuls(newAct(xt.f, len(fw.rows), xt.w), ps...)
	return outs
}

func (fw *forward) AddBias(x Tensor, b Weight) Tensor {
	xt, bv := fw.t(x), b.([]float32)
	for r := range fw.rows {
		addTo(xt.f[r*xt.w:(r+1)*xt.w], bv)
	}
	return xt
}

func (fw *forward) Rope(x Tensor, r Rope) Tensor {
	xt := fw.t(x)
	cos, sin := fw.trig(r)
	hd, half := r.Dims, r.Dims/2
	for row := range fw.rows {
		cs, sn := cos[row*half:(row+1)*half], sin[row*half:(row+1)*half]
		for h := row * xt.w; h < (row+1)*xt.w; h += hd {
			rope(xt.f[h:h+hd], cs, sn, r.Neox)
		}
	}
	return xt
}

// trig is RoPE's cos and sin for each row's position, HeadDim/2 each,
// computed once per step and variant.
func (fw *forward) trig(r Rope) (cos, sin []float32) {
	if t, ok := fw.trigs[r]; ok {
		return t[0], t[1]
	}
	freqs := fw.s.ropeFreqs(r)
	m := r.mscale()
	half := r.Dims / 2
	cos, sin = make([]float32, len(fw.rows)*half), make([]float32, len(fw.rows)*half)
	for i, row := range fw.rows {
		for j, f := range freqs {
			// pos·f is exact in float64 (24-bit × ≤24-bit), so only
			// Sincos rounds.
			sn, cs := math.Sincos(float64(row.pos) * float64(f))
			cos[i*half+j] = float32(cs)
			sin[i*half+j] = float32(sn)
			if m != 1 && m != 0 {
				// As ggml's rope: cos and sin scaled after rounding.
				cos[i*half+j] *= m
				sin[i*half+j] *= m
			}
		}
	}
	if fw.trigs == nil {
		fw.trigs = map[Rope][2][]float32{}
	}
	fw.trigs[r] = [2][]float32{cos, sin}
	return cos, sin
}

// ropeFreqs are the variant's frequencies, kept for the stage's life.
func (s *Local) ropeFreqs(r Rope) []float32 {
	if f, ok := s.freqs[r]; ok {
		return f
	}
	var factors []float32
	if r.Factors != "" {
		factors = s.globals[r.Factors].([]float32)
	}
	f := ropeFreqs(r.Base, r.Dims, factors)
	r.scale(f)
	if s.freqs == nil {
		s.freqs = map[Rope][]float32{}
	}
	s.freqs[r] = f
	return f
}

func (fw *forward) Attention(q, k, v Tensor, a Attn) Tensor {
	qt, kt := fw.t(q), fw.t(k)
	vd := a.vDim()
	out := fw.arena.tensor(len(fw.rows), a.Heads*vd)
	kvd, vvd := a.KVHeads*a.HeadDim, a.KVHeads*vd
	if v == nil {
		vvd = 0 // V is in K
	}
	switch {
	case a.Window < 0:
		fw.fail(fmt.Errorf("%w: attention window %d", ErrShape, a.Window))
		return out
	case a.KVHeads <= 0 || a.Heads%a.KVHeads != 0 || qt.w != a.Heads*a.HeadDim || kt.w != kvd:
		fw.fail(fmt.Errorf("%w: attention of Q %d, K %d wide for %d heads, %d KV heads of %d", ErrShape, qt.w, kt.w, a.Heads, a.KVHeads, a.HeadDim))
		return out
	case v == nil && vd > a.HeadDim, v != nil && fw.t(v).w != vvd:
		fw.fail(fmt.Errorf("%w: attention V heads of %d with K heads of %d", ErrShape, vd, a.HeadDim))
		return out
	}
	if len(fw.rows) > 0 {
		s := fw.rows[0].sess
		if len(s.k[fw.li]) != s.cap*kvd || len(s.v[fw.li]) != s.cap*vvd {
			fw.fail(fmt.Errorf("%w: attention caches K %d and V %d wide; the session holds %d and %d", ErrShape, kvd, vvd, len(s.k[fw.li])/s.cap, len(s.v[fw.li])/s.cap))
			return out
		}
	}
	var sinks []float32
	if a.Sinks != "" {
		w, ok := fw.s.layers[fw.li].W(a.Sinks).([]float32)
		if !ok || len(w) != a.Heads {
			fw.fail(fmt.Errorf("%w: attention sinks %q: want a vector of %d heads", ErrShape, a.Sinks, a.Heads))
			return out
		}
		sinks = w
	}
	for r, row := range fw.rows {
		copy(row.sess.k[fw.li][row.pos*kvd:(row.pos+1)*kvd], kt.f[r*kvd:(r+1)*kvd])
		if v != nil {
			vt := fw.t(v)
			copy(row.sess.v[fw.li][row.pos*vvd:(row.pos+1)*vvd], vt.f[r*vvd:(r+1)*vvd])
		}
	}
	fw.attention(fw.li, qt.f, out.f, a, sinks, v == nil)
	return out
}

func (fw *forward) SwiGLU(gate, up Tensor) Tensor {
	g, u := fw.t(gate), fw.t(up)
	// Element by element: each value's bits are its own, so the split is
	// free, and a decode step's one row is split too.
	n := len(g.f)
	fw.s.pool.forRange(n, 1024, n*8, func(lo, hi int) {
		siluMul(g.f[lo:hi], u.f[lo:hi])
	})
	return g
}

func (fw *forward) Add(a, b Tensor) Tensor {
	at := fw.t(a)
	addTo(at.f, fw.t(b).f)
	return at
}

func (fw *forward) GELU(gate, up Tensor) Tensor {
	g, u := fw.t(gate), fw.t(up)
	var tab *[1 << 16]float32
	if !fw.s.exactGELU {
		tab = geluTable()
	}
	// Element by element, as SwiGLU: the split is free.
	n := len(g.f)
	fw.s.pool.forRange(n, 1024, n*8, func(lo, hi int) {
		geluMul(g.f[lo:hi], u.f[lo:hi], tab)
	})
	return g
}

func (fw *forward) Scale(x Tensor, s float32) Tensor {
	xt := fw.t(x)
	for i, v := range xt.f {
		xt.f[i] = float32(v * s)
	}
	return xt
}

// geluMul sets g[i] to gelu(g[i])·u[i] the way ggml's CPU GELU computes
// it (ggml_vec_gelu_f32 with GGML_GELU_FP16, which llama.cpp's gemma
// graphs run): 0 at or below −10, x at or above 10, and otherwise x
// rounded to F16 and looked up in a table of F16 values. An exact F32
// GELU lands about 5e-4 from ggml's logits; the table lands on them. With
// tab nil, GELU is geluF32 (WithExactGELU).
func geluMul(g, u []float32, tab *[1 << 16]float32) {
	if tab == nil {
		for i, x := range g {
			g[i] = float32(geluF32(x) * u[i])
		}
		return
	}
	for i, x := range g {
		var y float32
		switch {
		case x <= -10:
			y = 0
		case x >= 10:
			y = x
		default:
			y = tab[f32ToF16(x)]
		}
		g[i] = float32(y * u[i])
	}
}

var (
	geluOnce sync.Once
	geluTab  *[1 << 16]float32
)

// geluTable is ggml's table: for every F16 value h, the tanh GELU of h in
// float32 arithmetic (as ggml_gelu_f32 evaluates it), rounded to F16,
// here kept widened to F32.
func geluTable() *[1 << 16]float32 {
	geluOnce.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = f16ToF32(f32ToF16(geluF32(f16ToF32(uint16(i)))))
		}
		geluTab = t
	})
	return geluTab
}

// geluF32 is ggml's ggml_gelu_f32,
// 0.5f*x*(1.0f + tanhf(SQRT_2_OVER_PI*x*(1.0f + GELU_COEF_A*x*x))),
// left to right, each step rounded to float32.
func geluF32(x float32) float32 {
	const a, c = float32(0.044715), float32(0.79788456080286535587989211986876)
	in := float32(float32(c*x) * float32(1+float32(float32(a*x)*x)))
	th := float32(math.Tanh(float64(in)))
	return float32(float32(0.5*x) * float32(1+th))
}

func (fw *forward) Slice(x Tensor, every, lo, hi int) Tensor {
	xt := fw.t(x)
	if every <= 0 || lo < 0 || hi <= lo || hi > every || xt.w%every != 0 {
		fw.fail(fmt.Errorf("%w: slice [%d, %d) of each %d of rows of %d", ErrShape, lo, hi, every, xt.w))
		return fw.arena.tensor(len(fw.rows), max(hi-lo, 1))
	}
	n, w := xt.w/every, hi-lo
	out := fw.arena.tensor(len(fw.rows), n*w)
	for i := range len(fw.rows) * n {
		copy(out.f[i*w:(i+1)*w], xt.f[i*every+lo:i*every+hi])
	}
	return out
}

func (fw *forward) Concat(a, b Tensor, aw, bw int) Tensor {
	at, bt := fw.t(a), fw.t(b)
	if aw <= 0 || bw <= 0 || at.w%aw != 0 || bt.w%bw != 0 {
		fw.fail(fmt.Errorf("%w: concat of rows of %d and %d by heads of %d and %d", ErrShape, at.w, bt.w, aw, bw))
		return fw.arena.tensor(len(fw.rows), aw+bw)
	}
	na, nb := at.w/aw, bt.w/bw
	n := max(na, nb)
	if na != nb && min(na, nb) != 1 {
		fw.fail(fmt.Errorf("%w: concat of %d heads and %d heads", ErrShape, na, nb))
		return fw.arena.tensor(len(fw.rows), aw+bw)
	}
	w := aw + bw
	out := fw.arena.tensor(len(fw.rows), n*w)
	for r := range fw.rows {
		for h := range n {
			ha, hb := min(h, na-1), min(h, nb-1)
			o := out.f[(r*n+h)*w:]
			copy(o[:aw], at.f[(r*na+ha)*aw:(r*na+ha+1)*aw])
			copy(o[aw:w], bt.f[(r*nb+hb)*bw:(r*nb+hb+1)*bw])
		}
	}
	return out
}

// HeadLinear gathers each head's rows, multiplies them by its matrix as a
// dense product does (so a row's bits do not depend on the batch), and
// puts the results back in head order.
func (fw *forward) HeadLinear(x Tensor, w Weight) Tensor {
	xt := fw.t(x)
	ms, ok := w.([]*matrix)
	if !ok || len(ms) == 0 || xt.w != len(ms)*ms[0].cols {
		fw.fail(fmt.Errorf("%w: per-head product of rows of %d", ErrShape, xt.w))
		return xt
	}
	n, nh, cols, rows := len(fw.rows), len(ms), ms[0].cols, ms[0].rows
	in := fw.arena.tensor(n, nh*cols)
	res := fw.arena.tensor(n, nh*rows)
	sets := make([]actProducts, nh)
	for h, m := range ms {
		for r := range n {
			copy(in.f[(h*n+r)*cols:(h*n+r+1)*cols], xt.f[(r*nh+h)*cols:(r*nh+h+1)*cols])
		}
		sets[h] = actProducts{newAct(in.f[h*n*cols:(h+1)*n*cols], n, cols), []product{{res.f[h*n*rows : (h+1)*n*rows], m}}}
	}
	fw.s.matmulSets(sets)
	out := fw.arena.tensor(n, nh*rows)
	for h := range nh {
		for r := range n {
			copy(out.f[(r*nh+h)*rows:(r*nh+h+1)*rows], res.f[(h*n+r)*rows:(h*n+r+1)*rows])
		}
	}
	return out
}
