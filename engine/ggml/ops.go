package ggml

/*
#include "decls.h"
*/
import "C"

import (
	"fmt"
	"math"

	"github.com/stratanet/strata/engine"
)

// act is an activation of the graph: [w, rows], contiguous.
type act struct {
	t tensor
	w int
}

// ops is the ggml engine's engine.Ops: each op adds nodes to the step's
// graph.
type ops struct {
	s     *Stage
	c     *C.struct_ggml_context
	g     *graph
	parts []part
	rows  int
	li    int // the layer being built, an index into s.layers
	err   error
}

var _ engine.Ops = (*ops)(nil)

func (o *ops) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o *ops) R() C.int64_t { return C.int64_t(o.rows) }

func (o *ops) RMSNorm(x engine.Tensor, w engine.Weight, eps float32) engine.Tensor {
	xt, gw := x.(*act), w.(*gweight)
	n := gw.ne0
	if xt.w == n {
		return &act{C.ggml_mul(o.c, C.ggml_rms_norm(o.c, xt.t, C.float(eps)), gw.t), n}
	}
	if xt.w%n != 0 {
		o.fail(fmt.Errorf("%w: RMSNorm of rows of %d by a weight of %d", engine.ErrShape, xt.w, n))
		return xt
	}
	// Runs of n values (qwen3's heads): rms_norm works along ne0, and the
	// weight broadcasts over the runs.
	t := C.ggml_reshape_2d(o.c, xt.t, C.int64_t(n), C.int64_t(xt.w/n)*o.R())
	t = C.ggml_mul(o.c, C.ggml_rms_norm(o.c, t, C.float(eps)), gw.t)
	return &act{C.ggml_reshape_2d(o.c, t, C.int64_t(xt.w), o.R()), xt.w}
}

func (o *ops) Linear(x engine.Tensor, w engine.Weight) engine.Tensor {
	return o.Linears(x, w)[0]
}

// Linears multiplies by each fused tensor once and views each part's rows
// of the product (made contiguous for the ops that reshape them).
func (o *ops) Linears(x engine.Tensor, ws ...engine.Weight) []engine.Tensor {
	xt := x.(*act)
	done := map[tensor]tensor{}
	out := make([]engine.Tensor, len(ws))
	for i, w := range ws {
		gw := w.(*gweight)
		y, ok := done[gw.t]
		if !ok {
			y = C.ggml_mul_mat(o.c, gw.t, xt.t)
			done[gw.t] = y
		}
		if gw.lo == 0 && gw.hi == gw.rows {
			out[i] = &act{y, gw.rows}
			continue
		}
		n := gw.hi - gw.lo
		v := C.ggml_view_2d(o.c, y, C.int64_t(n), o.R(), C.size_t(4*gw.rows), C.size_t(4*gw.lo))
		out[i] = &act{C.ggml_cont(o.c, v), n}
	}
	return out
}

func (o *ops) AddBias(x engine.Tensor, b engine.Weight) engine.Tensor {
	xt := x.(*act)
	return &act{C.ggml_add(o.c, xt.t, b.(*gweight).t), xt.w}
}

func (o *ops) Rope(x engine.Tensor, r engine.Rope) engine.Tensor {
	xt := x.(*act)
	var factors tensor
	if r.Factors != "" {
		factors = o.s.globals[r.Factors].(*gweight).t
	}
	mode := C.int(0)
	if r.Neox {
		mode = 2 // GGML_ROPE_TYPE_NEOX
	}
	// Unset values as engine.Rope reads them.
	or1 := func(v, def float32) C.float {
		if v == 0 {
			return C.float(def)
		}
		return C.float(v)
	}
	t := C.ggml_reshape_3d(o.c, xt.t, C.int64_t(r.Dims), C.int64_t(xt.w/r.Dims), o.R())
	t = C.ggml_rope_ext(o.c, t, o.g.positions, factors, C.int(r.Dims), mode, C.int(r.OrigContext), C.float(r.Base),
		or1(r.FreqScale, 1), C.float(r.ExtFactor), or1(r.AttnFactor, 1), or1(r.BetaFast, 32), or1(r.BetaSlow, 1))
	return &act{C.ggml_reshape_2d(o.c, t, C.int64_t(xt.w), o.R()), xt.w}
}

// windowMasks are the graph's input masks of window w (0: causal only),
// one per part, made on first use.
func (g *graph) windowMasks(c *C.struct_ggml_context, w int, parts []part, flash bool) []tensor {
	if ms, ok := g.masks[w]; ok {
		return ms
	}
	var ms []tensor
	typ := C.int(C.T_F32)
	if flash {
		typ = C.T_F16
	}
	for _, pt := range parts {
		m := C.ggml_new_tensor_2d(c, typ, C.int64_t(pt.kvLen), C.int64_t(pt.n))
		C.ggml_set_input(m)
		ms = append(ms, m)
	}
	if g.masks == nil {
		g.masks = map[int][]tensor{}
	}
	g.masks[w] = ms
	return ms
}

// Attention writes each part's new K and V rows into its session's cache
// and attends over the cache, part by part.
func (o *ops) Attention(q, k, v engine.Tensor, a engine.Attn) engine.Tensor {
	c, g := o.c, o.g
	var sinks tensor
	if a.Sinks != "" {
		w, ok := o.s.layers[o.li].W(a.Sinks).(*gweight)
		if !ok || w.ne0 != a.Heads || w.rows != 1 {
			o.fail(fmt.Errorf("%w: attention sinks %q: want a vector of %d heads", engine.ErrShape, a.Sinks, a.Heads))
			return q
		}
		sinks = w.t
	}
	if a.Window < 0 {
		o.fail(fmt.Errorf("%w: attention window %d", engine.ErrShape, a.Window))
		return q
	}
	masks := g.windowMasks(c, a.Window, o.parts, o.s.flash)
	const f4 = 4
	hd, nh, nkv := a.HeadDim, a.Heads, a.KVHeads
	vd := a.VDim
	if vd == 0 {
		vd = hd
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(hd)))
	}
	qa, ka := q.(*act).t, k.(*act).t
	switch {
	case v == nil && vd > hd:
		o.fail(fmt.Errorf("%w: attention V heads of %d in K heads of %d", engine.ErrShape, vd, hd))
		return q
	case vd != o.s.hp.VHead():
		// The session's V cache is VHead wide.
		o.fail(fmt.Errorf("%w: attention V heads of %d; the cache holds %d", engine.ErrShape, vd, o.s.hp.VHead()))
		return q
	}
	var va tensor
	if v != nil {
		va = v.(*act).t
	} else {
		// V is the last vd values of each K head (deepseek2's latent):
		// cached apart, as the transposed V cache wants it.
		va = C.ggml_cont_2d(c, C.ggml_view_3d(c, ka, C.int64_t(vd), C.int64_t(nkv), o.R(), C.size_t(hd*f4), C.size_t(hd*nkv*f4), C.size_t((hd-vd)*f4)),
			C.int64_t(vd*nkv), o.R())
	}
	if o.s.flash && a.SoftCap != 0 && scale != 1 {
		// flash_attn_ext caps the scaled scores, SoftCap·tanh(s·Scale/SoftCap),
		// the same as capping the raw ones only where Scale is 1 (gemma2's).
		o.fail(fmt.Errorf("%w: flash attention with a soft cap and a scale of %g", engine.ErrShape, scale))
		return q
	}
	var att tensor
	for j, pt := range o.parts {
		n, r0 := C.int64_t(pt.n), C.size_t(pt.row0)
		kc, vc := pt.p.k[o.li], pt.p.v[o.li]
		qj := C.ggml_view_3d(c, qa, C.int64_t(hd), C.int64_t(nh), n, C.size_t(hd*f4), C.size_t(hd*nh*f4), r0*C.size_t(hd*nh*f4))
		kj := C.ggml_view_3d(c, ka, C.int64_t(hd), C.int64_t(nkv), n, C.size_t(hd*f4), C.size_t(hd*nkv*f4), r0*C.size_t(hd*nkv*f4))
		kIdx := C.ggml_view_1d(c, g.positions, n, r0*f4)
		// The new rows go into the cache first (K as rows of
		// [hd, cap, kvHeads] at their positions; V likewise, or,
		// transposed, value by value at vIdx), and attention reads
		// views of what that wrote, so that ggml orders the writes
		// before the reads.
		kSet := C.ggml_set_rows(c, kc, C.ggml_permute(c, kj, 0, 2, 1, 3), kIdx)
		C.ggml_build_forward_expand(g.gf, kSet)
		kv := C.int64_t(pt.kvLen)
		kAll := C.ggml_view_3d(c, kSet, C.int64_t(hd), kv, C.int64_t(nkv),
			C.size_t(hd*f4), C.size_t(hd*pt.p.cap*f4), 0) // [hd, kvLen, nkv]
		var out tensor
		if o.s.flash {
			vj := C.ggml_view_3d(c, va, C.int64_t(vd), C.int64_t(nkv), n, C.size_t(vd*f4), C.size_t(vd*nkv*f4), r0*C.size_t(vd*nkv*f4))
			vSet := C.ggml_set_rows(c, vc, C.ggml_permute(c, vj, 0, 2, 1, 3), kIdx)
			C.ggml_build_forward_expand(g.gf, vSet)
			vAll := C.ggml_view_3d(c, vSet, C.int64_t(vd), kv, C.int64_t(nkv),
				C.size_t(vd*f4), C.size_t(vd*pt.p.cap*f4), 0) // [vd, kvLen, nkv]
			fa := C.ggml_flash_attn_ext(c, C.ggml_permute(c, qj, 0, 2, 1, 3), kAll, vAll, masks[j], C.float(scale), 0, C.float(a.SoftCap))
			if sinks != nil {
				C.ggml_flash_attn_ext_add_sinks(fa, sinks)
			}
			out = C.ggml_reshape_2d(c, fa, C.int64_t(vd*nh), n) // [vd, nh, n]
		} else {
			vj := C.ggml_view_2d(c, va, 1, n*C.int64_t(vd*nkv), f4, r0*C.size_t(vd*nkv*f4))
			vFlat := C.ggml_reshape_2d(c, vc, 1, C.int64_t(pt.p.cap*vd*nkv))
			vSet := C.ggml_set_rows(c, vFlat, vj, g.vIdx[j])
			C.ggml_build_forward_expand(g.gf, vSet)
			vAll := C.ggml_view_3d(c, vSet, kv, C.int64_t(vd), C.int64_t(nkv),
				C.size_t(pt.p.cap*f4), C.size_t(pt.p.cap*vd*f4), 0) // [kvLen, vd, nkv]
			out = attendProducts(c, qj, kAll, vAll, masks[j], sinks, scale, a.SoftCap, vd*nh, n)
		}
		if att == nil {
			att = out
		} else {
			att = C.ggml_concat(c, att, out, 1)
		}
	}
	return &act{att, vd * nh}
}

// attendProducts is attention as separate products: K·Q, the masked
// softmax (with sinks), V·P, for n query rows qj [hd, nh, n].
func attendProducts(c *C.struct_ggml_context, qj, kAll, vAll, mask, sinks tensor, scale, softCap float32, w int, n C.int64_t) tensor {
	// Q made contiguous so that ggml may take llamafile's sgemm (which
	// wants a contiguous right operand) for K·Q.
	qp := C.ggml_cont(c, C.ggml_permute(c, qj, 0, 2, 1, 3)) // [hd, n, nh]
	kq := C.ggml_mul_mat(c, kAll, qp)                       // [kvLen, n, nh]
	if softCap != 0 {
		// As llama.cpp: the raw scores capped, then scaled in the
		// softmax.
		kq = C.ggml_scale(c, C.ggml_tanh(c, C.ggml_scale(c, kq, C.float(1/softCap))), C.float(softCap))
	}
	kq = C.ggml_soft_max_ext(c, kq, mask, C.float(scale), 0)
	if sinks != nil {
		// Each head's sink joins its softmax's denominator.
		C.ggml_soft_max_add_sinks(kq, sinks)
	}
	kqv := C.ggml_mul_mat(c, vAll, kq) // [vd, n, nh]
	return C.ggml_cont_2d(c, C.ggml_permute(c, kqv, 0, 2, 1, 3), C.int64_t(w), n)
}

func (o *ops) SwiGLU(gate, up engine.Tensor) engine.Tensor {
	gt := gate.(*act)
	return &act{C.ggml_mul(o.c, C.ggml_silu(o.c, gt.t), up.(*act).t), gt.w}
}

func (o *ops) Add(a, b engine.Tensor) engine.Tensor {
	at := a.(*act)
	return &act{C.ggml_add(o.c, at.t, b.(*act).t), at.w}
}

func (o *ops) GELU(gate, up engine.Tensor) engine.Tensor {
	gt := gate.(*act)
	return &act{C.ggml_mul(o.c, C.ggml_gelu(o.c, gt.t), up.(*act).t), gt.w}
}

func (o *ops) Scale(x engine.Tensor, s float32) engine.Tensor {
	xt := x.(*act)
	return &act{C.ggml_scale(o.c, xt.t, C.float(s)), xt.w}
}

// MoE is llama.cpp's build_moe_ffn: the router's top k experts by
// mul_mat_id, their outputs weighed and added in rank order. Softmax
// gating with renormalised weights (qwen3moe, Mixtral) and SiLU experts,
// or gpt-oss's: biases, a softmax over the chosen logits, SwiGLU-OAI.
func (o *ops) MoE(x engine.Tensor, m engine.MoE) engine.Tensor {
	c, xt := o.c, x.(*act)
	if m.GELU || !(m.NormTopK || m.WeighChosen || m.DeepSeek) || m.Sigmoid && !m.DeepSeek {
		o.fail(fmt.Errorf("%w: a mixture of experts without renormalised weights, or of GELU experts, on the ggml backend", engine.ErrUnsupportedArch))
		return x
	}
	rw := m.Router.(*gweight)
	router := rw.t
	ne, k, n, d := C.int64_t(rw.rows), C.int64_t(m.TopK), o.R(), C.int64_t(xt.w)
	logits := C.ggml_mul_mat(c, router, xt.t) // [experts, n]
	if m.RouterBias != nil {
		logits = C.ggml_add(c, logits, m.RouterBias.(*gweight).t)
	}
	probs := logits
	switch {
	case m.Sigmoid:
		probs = C.ggml_sigmoid(c, logits)
	case !m.WeighChosen:
		probs = C.ggml_soft_max(c, logits)
	}
	choose := probs
	if m.DeepSeek {
		var err error
		if choose, err = o.deepseekChoice(probs, m, int(ne)); err != nil {
			o.fail(err)
			return x
		}
	}
	sel := C.ggml_argsort_top_k(c, choose, C.int(m.TopK))               // [k, n]
	w := C.ggml_get_rows(c, C.ggml_reshape_3d(c, probs, 1, ne, n), sel) // [1, k, n]
	w2 := C.ggml_reshape_2d(c, w, k, n)
	switch {
	case m.WeighChosen:
		w2 = C.ggml_soft_max(c, w2)
	case m.NormTopK:
		sum := C.ggml_clamp(c, C.ggml_sum_rows(c, w2), C.float(minWeightSum), C.float(math.Inf(1)))
		w2 = C.ggml_div(c, w2, sum)
	}
	if m.DeepSeek {
		w2 = C.ggml_scale(c, w2, C.float(m.WeightScale))
	}
	w = C.ggml_reshape_3d(c, w2, 1, k, n)
	cur := C.ggml_reshape_3d(c, xt.t, d, 1, n)
	expert := func(wt, b engine.Weight, in tensor) tensor {
		y := C.ggml_mul_mat_id(c, wt.(*gweight).t, in, sel)
		if b != nil {
			y = C.ggml_add_id(c, y, b.(*gweight).t, sel)
		}
		return y
	}
	up := expert(m.Up, m.UpBias, cur)       // [ff, k, n]
	gate := expert(m.Gate, m.GateBias, cur) // [ff, k, n]
	var a tensor
	if m.OAI {
		a = C.ggml_swiglu_oai(c, gate, up, C.float(m.OAIAlpha), C.float(m.OAILimit))
	} else {
		a = C.ggml_swiglu_split(c, gate, up)
	}
	ex := C.ggml_mul(c, expert(m.Down, m.DownBias, a), w) // [d, k, n]
	// The experts added in rank order, as llama.cpp's chain of adds.
	// ex is contiguous: a row's k outputs are 4·d bytes apart, rows 4·d·k.
	nb1, nb2 := C.size_t(4*d), C.size_t(4*d*k)
	out := C.ggml_view_2d(c, ex, d, n, nb2, 0)
	for i := C.size_t(1); i < C.size_t(k); i++ {
		out = C.ggml_add(c, out, C.ggml_view_2d(c, ex, d, n, nb2, i*nb1))
	}
	return &act{C.ggml_cont(c, out), xt.w}
}

// Slice views each head's values [lo, hi), made contiguous.
func (o *ops) Slice(x engine.Tensor, every, lo, hi int) engine.Tensor {
	xt := x.(*act)
	if every <= 0 || lo < 0 || hi <= lo || hi > every || xt.w%every != 0 {
		o.fail(fmt.Errorf("%w: slice [%d, %d) of each %d of rows of %d", engine.ErrShape, lo, hi, every, xt.w))
		return x
	}
	n, w := xt.w/every, hi-lo
	v := C.ggml_view_3d(o.c, xt.t, C.int64_t(w), C.int64_t(n), o.R(), C.size_t(4*every), C.size_t(4*xt.w), C.size_t(4*lo))
	return &act{C.ggml_cont_2d(o.c, v, C.int64_t(n*w), o.R()), n * w}
}

// Concat is ggml_concat along each head, the one-headed input repeated
// for every head first (as llama.cpp's non-MLA K).
func (o *ops) Concat(a, b engine.Tensor, aw, bw int) engine.Tensor {
	at, bt := a.(*act), b.(*act)
	if aw <= 0 || bw <= 0 || at.w%aw != 0 || bt.w%bw != 0 {
		o.fail(fmt.Errorf("%w: concat of rows of %d and %d by heads of %d and %d", engine.ErrShape, at.w, bt.w, aw, bw))
		return a
	}
	na, nb := at.w/aw, bt.w/bw
	n := max(na, nb)
	if na != nb && min(na, nb) != 1 {
		o.fail(fmt.Errorf("%w: concat of %d heads and %d heads", engine.ErrShape, na, nb))
		return a
	}
	a3 := C.ggml_reshape_3d(o.c, at.t, C.int64_t(aw), C.int64_t(na), o.R())
	b3 := C.ggml_reshape_3d(o.c, bt.t, C.int64_t(bw), C.int64_t(nb), o.R())
	if na < n {
		a3 = C.ggml_repeat_4d(o.c, a3, C.int64_t(aw), C.int64_t(n), o.R(), 1)
	}
	if nb < n {
		b3 = C.ggml_repeat_4d(o.c, b3, C.int64_t(bw), C.int64_t(n), o.R(), 1)
	}
	cat := C.ggml_concat(o.c, a3, b3, 0)
	return &act{C.ggml_reshape_2d(o.c, cat, C.int64_t(n*(aw+bw)), o.R()), n * (aw + bw)}
}

// HeadLinear is one ggml_mul_mat of the 3-D weight by x's heads, as
// llama.cpp's deepseek2 multiplies by attn_k_b and attn_v_b.
func (o *ops) HeadLinear(x engine.Tensor, w engine.Weight) engine.Tensor {
	xt, gw := x.(*act), w.(*gweight)
	cols, rows := gw.ne0, gw.rows
	if cols <= 0 || xt.w%cols != 0 {
		o.fail(fmt.Errorf("%w: per-head product of rows of %d by heads of %d", engine.ErrShape, xt.w, cols))
		return x
	}
	nh := xt.w / cols
	x3 := C.ggml_permute(o.c, C.ggml_reshape_3d(o.c, xt.t, C.int64_t(cols), C.int64_t(nh), o.R()), 0, 2, 1, 3) // [cols, n, nh]
	y := C.ggml_mul_mat(o.c, gw.t, x3)                                                                         // [rows, n, nh]
	return &act{C.ggml_cont_2d(o.c, C.ggml_permute(o.c, y, 0, 2, 1, 3), C.int64_t(nh*rows), o.R()), nh * rows}
}

// deepseekChoice is what deepseek2's experts are chosen by (llama.cpp's
// build_moe_ffn): the probabilities plus exp_probs_b, and with expert
// groups, the groups outside the GroupsUsed whose two best sum highest
// masked to −∞.
func (o *ops) deepseekChoice(probs tensor, m engine.MoE, ne int) (tensor, error) {
	c, n := o.c, o.R()
	choose := probs
	if m.SelectBias != nil {
		b := m.SelectBias.(*gweight)
		if b.ne0 != ne || b.rows != 1 {
			return nil, fmt.Errorf("%w: expert selection bias of %d for %d experts", engine.ErrShape, b.ne0, ne)
		}
		choose = C.ggml_add(c, probs, b.t)
	}
	if m.Groups <= 1 {
		return choose, nil
	}
	if ne%m.Groups != 0 || ne/m.Groups < 2 || m.GroupsUsed <= 0 || m.GroupsUsed >= m.Groups {
		return nil, fmt.Errorf("%w: %d experts in %d groups, %d used", engine.ErrShape, ne, m.Groups, m.GroupsUsed)
	}
	per, ng := C.int64_t(ne/m.Groups), C.int64_t(m.Groups)
	groups := C.ggml_reshape_3d(c, choose, per, ng, n)                                               // [per, groups, n]
	best := C.ggml_argsort_top_k(c, groups, 2)                                                       // [2, groups, n]
	scores := C.ggml_get_rows(c, C.ggml_reshape_4d(c, groups, 1, per, ng, n), best)                  // [1, 2, groups, n]
	scores = C.ggml_reshape_2d(c, C.ggml_sum_rows(c, C.ggml_reshape_3d(c, scores, 2, ng, n)), ng, n) // [groups, n]
	kept := C.ggml_argsort_top_k(c, scores, C.int(m.GroupsUsed))                                     // [used, n]
	keep := C.ggml_get_rows(c, groups, kept)                                                         // [per, used, n]
	masked := C.ggml_set_rows(c, C.ggml_fill(c, groups, C.float(math.Inf(-1))), keep, kept)
	return C.ggml_reshape_2d(c, masked, C.int64_t(ne), n), nil
}

// minWeightSum is llama.cpp's clamp of the chosen weights' sum before
// renormalising them (the smallest normal half).
const minWeightSum = 6.103515625e-5
