package ggml

/*
#include "decls.h"
*/
import "C"

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/stratanet/strata/engine"
)

// kvPad is the granularity of the cache length a graph attends over.
const kvPad = 256

// maxGraphs bounds the decode graphs a stage keeps for reuse (each holds
// its own intermediate memory, small for one row per session). Graphs with
// a prefill in them, whose shapes seldom repeat, are built for one use, in
// memory shared with the other such graphs.
const maxGraphs = 32

// A part is one step of a batch: n rows of session p from position pos,
// rows row0.. of the batch, attending over the first kvLen positions of
// its cache.
type part struct {
	p                   *session
	pos, n, row0, kvLen int
}

// graph is the ggml graph of one step shape: which sessions, their row
// counts and cache lengths. Positions are inputs (the rotary positions, the
// cache rows written, the causal masks), so that the graph serves every
// step of that shape unchanged: on a GPU backend, the same graph each step.
type graph struct {
	key       string
	ctx       *C.struct_ggml_context
	gf        *C.struct_ggml_cgraph
	galloc    C.ggml_gallocr_t // its own intermediate memory (nil: the stage's)
	input     tensor           // tokens (I32 [rows]) or hidden states (F32 [dim, rows])
	positions tensor           // I32 [rows]
	vIdx      []tensor         // per part: I64, where each new V value goes in the transposed cache (none with flash attention)
	// masks are per window (0: none), per part: [kvLen, n], 0 or -inf
	// (F32; F16 for flash attention); made as the layers that use them
	// are built, so that each is in the graph (a stage of gemma's local
	// layers only has no causal mask).
	masks    map[int][]tensor
	outRows  tensor // last stage: I32, the last row of each part
	out      tensor
	sessions []*session
	used     uint64 // for eviction: the step it last served
}

func (g *graph) free() {
	if g.galloc != nil {
		C.ggml_gallocr_free(g.galloc)
		g.galloc = nil
	}
	if g.ctx != nil {
		C.ggml_free(g.ctx)
		g.ctx = nil
	}
}

// dropGraphs frees the kept graphs that use session p (all where p is nil).
//
// On a GPU a dropped graph's memory is freed only after the stage's next
// step (or when it closes): freeing it between steps made ggml-vulkan on
// lavapipe compute the next step wrong and corrupt the heap (glibc
// "double free or corruption" in a lavapipe thread), in TestVulkanMixedSwarm
// when a session closed and another began.
func (s *Stage) dropGraphs(p *session) {
	for k, g := range s.graphs {
		if p == nil || slices.Contains(g.sessions, p) {
			if s.dev != nil && p != nil {
				s.dropped = append(s.dropped, g)
			} else {
				g.free()
			}
			delete(s.graphs, k)
		}
	}
	if p == nil {
		for _, g := range s.dropped {
			g.free()
		}
		s.dropped = nil
	}
}

func graphKey(parts []part) string {
	var b strings.Builder
	for _, pt := range parts {
		fmt.Fprintf(&b, "%d:%d:%d;", pt.p.id, pt.n, pt.kvLen)
	}
	return b.String()
}

// build makes the graph of parts' shape.
func (s *Stage) build(parts []part, rows int) (*graph, error) {
	h := s.hp
	vd, nkv := h.VHead(), h.KVHeads
	// Per layer: its ops, and per part attention's views, cache writes
	// and products (gemma2's soft cap adds 3).
	nodes := (160+24*len(parts))*len(s.layers) + 64
	// The context holds the graph's metadata only; an allocator places
	// its tensors in the backend's memory.
	size := uintptr(nodes)*(uintptr(C.ggml_tensor_overhead())+64) + uintptr(C.ggml_graph_overhead_custom(C.size_t(nodes), false))
	c := C.new_ctx(C.size_t(size), true)
	if c == nil {
		return nil, fmt.Errorf("%w: cannot allocate a step's graph", ErrGGML)
	}
	g := &graph{ctx: c, gf: C.ggml_new_graph_custom(c, C.size_t(nodes), false)}
	s.builds++
	R := C.int64_t(rows)
	var x tensor
	if s.info.First() {
		g.input = C.ggml_new_tensor_1d(c, C.T_I32, R)
		x = C.ggml_get_rows(c, s.embd, g.input)
	} else {
		g.input = C.ggml_new_tensor_2d(c, C.T_F32, C.int64_t(h.Dim), R)
		x = g.input
	}
	C.ggml_set_input(g.input)
	g.positions = C.ggml_new_tensor_1d(c, C.T_I32, R)
	C.ggml_set_input(g.positions)
	for _, pt := range parts {
		if !s.flash {
			vi := C.ggml_new_tensor_1d(c, C.T_I64, C.int64_t(pt.n*vd*nkv))
			C.ggml_set_input(vi)
			g.vIdx = append(g.vIdx, vi)
		}
		g.sessions = append(g.sessions, pt.p)
	}
	o := &ops{s: s, c: c, g: g, parts: parts, rows: rows}
	xt := &act{t: x, w: h.Dim}
	for i := range s.layers {
		o.li = i
		xt = s.arch.Block(o, &s.layers[i], xt).(*act)
	}
	if o.err != nil {
		g.free()
		return nil, o.err
	}
	x = xt.t
	if s.info.Last() {
		g.outRows = C.ggml_new_tensor_1d(c, C.T_I32, C.int64_t(len(parts)))
		C.ggml_set_input(g.outRows)
		x = C.ggml_get_rows(c, x, g.outRows) // [dim, parts]
		x = C.ggml_mul(c, C.ggml_rms_norm(c, x, C.float(h.NormEps)), s.onorm)
		x = C.ggml_mul_mat(c, s.head, x) // [vocab, parts]
		if sc := h.FinalSoftCap; sc != 0 {
			x = C.ggml_scale(c, C.ggml_tanh(c, C.ggml_scale(c, x, C.float(1/sc))), C.float(sc))
		}
	}
	C.ggml_set_output(x)
	C.ggml_build_forward_expand(g.gf, x)
	g.out = x
	return g, nil
}

// graphFor returns the graph of parts' shape, allocated: a kept one, or a
// new one (kept when it decodes one row per session).
func (s *Stage) graphFor(parts []part, rows int) (*graph, error) {
	key := graphKey(parts)
	s.steps++
	if g := s.graphs[key]; g != nil {
		g.used = s.steps
		return g, nil
	}
	g, err := s.build(parts, rows)
	if err != nil {
		return nil, err
	}
	g.key = key
	galloc := s.galloc
	if rows == len(parts) { // decode steps only
		if g.galloc = C.ggml_gallocr_new(C.ggml_backend_get_default_buffer_type(s.backend)); g.galloc == nil {
			g.free()
			return nil, fmt.Errorf("%w: cannot make a graph allocator", ErrGGML)
		}
		galloc = g.galloc
	}
	if !C.ggml_gallocr_alloc_graph(galloc, g.gf) {
		g.free()
		return nil, fmt.Errorf("%w: cannot allocate a step's graph on %s", ErrGGML, s.Device())
	}
	if g.galloc != nil {
		if len(s.graphs) >= maxGraphs {
			var old *graph
			for _, o := range s.graphs {
				if old == nil || o.used < old.used {
					old = o
				}
			}
			old.free()
			delete(s.graphs, old.key)
		}
		if s.graphs == nil {
			s.graphs = map[string]*graph{}
		}
		g.used = s.steps
		s.graphs[key] = g
	}
	return g, nil
}

func (s *Stage) compute(parts []part, steps []engine.Step, rows int) ([]engine.Output, error) {
	h := s.hp
	g, err := s.graphFor(parts, rows)
	if err != nil {
		return nil, err
	}
	if g.galloc == nil {
		defer g.free() // built for this step only
	}
	vd, nkv := h.VHead(), h.KVHeads
	if s.info.First() {
		toks := make([]int32, 0, rows)
		for _, st := range steps {
			toks = append(toks, st.Tokens...)
		}
		C.ggml_backend_tensor_set(g.input, unsafe.Pointer(&toks[0]), 0, C.size_t(4*rows))
	} else {
		for i, st := range steps {
			C.ggml_backend_tensor_set(g.input, unsafe.Pointer(&st.Hidden[0]), C.size_t(4*h.Dim*parts[i].row0), C.size_t(4*len(st.Hidden)))
		}
	}
	ps := make([]int32, 0, rows)
	var last []int32
	for j, pt := range parts {
		for t := range pt.n {
			ps = append(ps, int32(pt.pos+t))
		}
		last = append(last, int32(pt.row0+pt.n-1))
		if !s.flash {
			// V value e (of vd·kvHeads) of new row t goes to position
			// pos+t of channel e in the transposed cache [cap, vd, kvHeads].
			vi := make([]int64, pt.n*vd*nkv)
			for t := range pt.n {
				for e := range vd * nkv {
					vi[t*vd*nkv+e] = int64(pt.pos+t) + int64(pt.p.cap)*int64(e)
				}
			}
			C.ggml_backend_tensor_set(g.vIdx[j], unsafe.Pointer(&vi[0]), 0, C.size_t(8*len(vi)))
		}
		// Row t sees positions 0..pos+t; the rest of the kvLen read is
		// masked (stale or zero rows past the session's end included).
		for w, ms := range g.masks {
			m := attnMask(pt, w)
			if s.flash {
				h := f16Mask(m)
				C.ggml_backend_tensor_set(ms[j], unsafe.Pointer(&h[0]), 0, C.size_t(2*len(h)))
				continue
			}
			C.ggml_backend_tensor_set(ms[j], unsafe.Pointer(&m[0]), 0, C.size_t(4*len(m)))
		}
	}
	C.ggml_backend_tensor_set(g.positions, unsafe.Pointer(&ps[0]), 0, C.size_t(4*rows))
	if g.outRows != nil {
		C.ggml_backend_tensor_set(g.outRows, unsafe.Pointer(&last[0]), 0, C.size_t(4*len(last)))
	}
	if rc := C.ggml_backend_graph_compute(s.backend, g.gf); rc != 0 {
		return nil, fmt.Errorf("%w: graph compute returned status %d", ErrGGML, int(rc))
	}
	outs := make([]engine.Output, len(parts))
	if s.info.Last() {
		all := make([]float32, len(parts)*h.Vocab)
		C.ggml_backend_tensor_get(g.out, unsafe.Pointer(&all[0]), 0, C.size_t(4*len(all)))
		for i := range parts {
			outs[i].Logits = all[i*h.Vocab : (i+1)*h.Vocab : (i+1)*h.Vocab]
		}
		return outs, nil
	}
	all := make([]float32, rows*h.Dim)
	C.ggml_backend_tensor_get(g.out, unsafe.Pointer(&all[0]), 0, C.size_t(4*len(all)))
	for i, pt := range parts {
		outs[i].Hidden = all[pt.row0*h.Dim : (pt.row0+pt.n)*h.Dim : (pt.row0+pt.n)*h.Dim]
	}
	return outs, nil
}

// f16Mask is mask m in F16, as flash_attn_ext takes it: its values are 0
// and −∞ only, both exact.
func f16Mask(m []float32) []uint16 {
	h := make([]uint16, len(m))
	for i, v := range m {
		if math.IsInf(float64(v), -1) {
			h[i] = 0xfc00
		}
	}
	return h
}

// attnMask is part pt's mask, [kvLen, n]: row t (at position pos+t) sees
// positions up to its own, and with a sliding window (w > 0) only those
// less than w before it (key p0 is masked for query p1 where p1−p0 ≥ w,
// as llama.cpp's SWA mask).
func attnMask(pt part, w int) []float32 {
	m := make([]float32, pt.n*pt.kvLen)
	inf := float32(math.Inf(-1))
	for t := range pt.n {
		row := m[t*pt.kvLen : (t+1)*pt.kvLen]
		p := pt.pos + t
		for c := range row {
			if c > p || (w > 0 && p-c >= w) {
				row[c] = inf
			}
		}
	}
	return m
}
