package engine

import (
	"fmt"
	"strings"
)

// Mixture of experts, as llama.cpp's build_moe_ffn computes it for
// qwen3moe and for llama files with experts (Mixtral): per token, the
// router's logits go through a softmax; the ExpertsUsed most probable
// experts are chosen (ties: the lower expert index first, where ggml's
// argsort leaves the order to std::sort); their probabilities, divided by
// their sum (clamped to 2⁻¹⁴ as ggml does), weigh the experts' SwiGLU
// outputs, which are added in rank order: ((w₀·e₀ + w₁·e₁) + w₂·e₂) + ….

// maxExperts is llama.cpp's LLAMA_MAX_EXPERTS.
const maxExperts = 512

// gatingSoftmax is llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX, the
// value of <arch>.expert_gating_func for a softmax router.
const gatingSoftmax = 1

// minWeightSum is ggml_clamp's lower bound on the chosen probabilities'
// sum in build_moe_ffn: the smallest normal half.
const minWeightSum = 6.103515625e-5

// readExperts reads the mixture-of-experts keys beyond expert_count (read
// already into h.Experts) and checks them; h.FFN is read.
func readExperts(f *File, h *HParams, geti func(key string, dst *int, def int) error) error {
	a := h.Arch
	for _, e := range []error{
		geti("expert_shared_count", &h.SharedExperts, 0),
		geti("expert_shared_feed_forward_length", &h.SharedFFN, 0),
		geti("leading_dense_block_count", &h.LeadingDense, 0),
	} {
		if e != nil {
			return e
		}
	}
	if !h.MoE() {
		if a == "qwen3moe" {
			return fmt.Errorf("%w: qwen3moe without %s.expert_count", ErrCorrupt, a)
		}
		return nil
	}
	switch {
	case a != "llama" && a != "qwen3moe":
		return fmt.Errorf("%w: %s with %d experts (mixture of experts runs for qwen3moe and llama)", ErrUnsupportedArch, a, h.Experts)
	case h.Experts > maxExperts:
		return fmt.Errorf("%w: key %q = %d (at most %d)", ErrCorrupt, a+".expert_count", h.Experts, maxExperts)
	case h.SharedExperts > 0:
		return fmt.Errorf("%w: %s with %d experts and %d shared experts (shared experts are not supported)", ErrUnsupportedArch, a, h.Experts, h.SharedExperts)
	case h.LeadingDense > 0:
		return fmt.Errorf("%w: %s with %d experts after %d dense layers (leading dense layers are not supported)", ErrUnsupportedArch, a, h.Experts, h.LeadingDense)
	}
	if _, ok := f.Get(a + ".expert_used_count"); !ok {
		return fmt.Errorf("%w: %s with %d experts lacks %s.expert_used_count", ErrCorrupt, a, h.Experts, a)
	}
	if err := geti("expert_used_count", &h.ExpertsUsed, -1); err != nil {
		return err
	}
	if h.ExpertsUsed <= 0 || h.ExpertsUsed > h.Experts {
		return fmt.Errorf("%w: key %q = %d of %d experts", ErrCorrupt, a+".expert_used_count", h.ExpertsUsed, h.Experts)
	}
	gating := gatingSoftmax
	if err := geti("expert_gating_func", &gating, gatingSoftmax); err != nil {
		return err
	}
	if gating != gatingSoftmax {
		return fmt.Errorf("%w: %s with expert gating function %d (only softmax, 1, is supported)", ErrUnsupportedArch, a, gating)
	}
	switch {
	case a == "llama":
		// llama.cpp sizes a llama file's experts by feed_forward_length.
		h.ExpertFFN = h.FFN
	case h.ExpertFFN == 0:
		// As llama.cpp, for a qwen3moe file without the key.
		h.ExpertFFN = h.FFN / h.ExpertsUsed
	}
	if h.ExpertFFN <= 0 {
		return fmt.Errorf("%w: key %q = %d", ErrCorrupt, a+".expert_feed_forward_length", h.ExpertFFN)
	}
	if t := legacyExpertTensor(f); t != "" {
		return fmt.Errorf("%w: %s holds one tensor per expert (%s), an old Mixtral layout: only merged ffn_{gate,up,down}_exps tensors are supported (convert it again with llama.cpp's convert_hf_to_gguf.py)",
			ErrUnsupportedArch, a, t)
	}
	return nil
}

// legacyExpertTensor names a per-expert FFN tensor such as
// blk.0.ffn_gate.3.weight, which old Mixtral conversions wrote, or "".
func legacyExpertTensor(f *File) string {
	for i := range f.Tensors {
		name := f.Tensors[i].Name
		for _, k := range []string{".ffn_gate.", ".ffn_up.", ".ffn_down."} {
			if j := strings.Index(name, k); j >= 0 {
				if rest := name[j+len(k):]; rest != "" && rest[0] >= '0' && rest[0] <= '9' {
					return name
				}
			}
		}
	}
	return ""
}

// moeWeights are one layer's router and experts.
type moeWeights struct {
	router         *matrix   // Experts × Dim
	gate, up, down []*matrix // per expert: ExpertFFN × Dim, ExpertFFN × Dim, Dim × ExpertFFN
}

func (w *moeWeights) matrices() []*matrix {
	ms := []*matrix{w.router}
	ms = append(ms, w.gate...)
	ms = append(ms, w.up...)
	return append(ms, w.down...)
}

// loadMoE loads layer p's router and merged expert tensors.
func (l *loader) loadMoE(p string, hp HParams) (*moeWeights, error) {
	d, e, ff := hp.Dim, hp.Experts, hp.ExpertFFN
	w := &moeWeights{}
	var err error
	if w.router, err = l.matrix(p+"ffn_gate_inp.weight", e, d); err != nil {
		return nil, err
	}
	if w.gate, err = l.experts(p+"ffn_gate_exps.weight", e, ff, d); err != nil {
		return nil, err
	}
	if w.up, err = l.experts(p+"ffn_up_exps.weight", e, ff, d); err != nil {
		return nil, err
	}
	if w.down, err = l.experts(p+"ffn_down_exps.weight", e, d, ff); err != nil {
		return nil, err
	}
	return w, nil
}

// experts loads a 3-D tensor of n experts' rows×cols matrices (GGUF dims
// [cols, rows, n]) as n matrices over its bytes, read once: each expert's
// part is converted as a dense matrix's bytes are, and no further.
func (l *loader) experts(name string, n, rows, cols int) ([]*matrix, error) {
	t, err := l.info(name, cols, rows, n)
	if err != nil {
		return nil, err
	}
	b, err := l.f.readTensorBytes(t)
	if err != nil {
		return nil, err
	}
	if len(b)%n != 0 {
		return nil, fmt.Errorf("%w: tensor %q: %d bytes for %d experts", ErrShape, name, len(b), n)
	}
	per := len(b) / n
	ms := make([]*matrix, n)
	for i := range ms {
		if ms[i], err = matrixFromBytes(t, b[i*per:(i+1)*per:(i+1)*per], rows, cols); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// route picks each row's experts from its router logits (n × Experts,
// turned into probabilities in place): sel[r*k+j] is row r's rank-j expert
// and wt[r*k+j] its normalised weight.
func route(logits []float32, n, experts, k int, sel []int32, wt []float32) {
	for r := 0; r < n; r++ {
		p := logits[r*experts : (r+1)*experts]
		softmax(p)
		s, w := sel[r*k:(r+1)*k], wt[r*k:(r+1)*k]
		for j := range s {
			// The most probable expert not yet chosen; ties go to the
			// lower index. k is small (8 of 128 for Qwen3-30B-A3B), so
			// k passes cost less than a sort.
			best := int32(-1)
			for e, v := range p {
				if chosen(s[:j], int32(e)) {
					continue
				}
				if best < 0 || v > p[best] {
					best = int32(e)
				}
			}
			s[j], w[j] = best, p[best]
		}
		// ggml_sum_rows sums in double; then ggml_clamp and ggml_div.
		sum := 0.0
		for _, v := range w {
			sum += float64(v)
		}
		ws := float32(sum)
		if ws < minWeightSum {
			ws = minWeightSum
		}
		for j := range w {
			w[j] /= ws
		}
	}
}

func chosen(s []int32, e int32) bool {
	for _, v := range s {
		if v == e {
			return true
		}
	}
	return false
}

// moeFFN adds to x (n × Dim) the mixture of experts' output for the normed
// rows in fw.xb. The batch's rows are grouped by expert, so that each
// chosen expert's weights are read once for all the rows that chose it;
// every product is one row's dot product, as a dense matmul computes it,
// so a row's bits do not depend on its batch or the thread count.
func (fw *forward) moeFFN(w *moeWeights, x []float32) {
	s, h, sc := fw.s, fw.s.hp, &fw.moe
	n, d, ne, k, ff := len(fw.rows), h.Dim, h.Experts, h.ExpertsUsed, h.ExpertFFN
	logits := grow(&sc.logits, n*ne)
	s.matmul(logits, w.router, newAct(fw.xb, n, d))
	sel, wt := grow(&sc.sel, n*k), grow(&sc.wt, n*k)
	route(logits, n, ne, k, sel, wt)

	// Slots: the (row, rank) pairs grouped by expert, rows in order.
	count := grow(&sc.count, ne+1)
	clear(count)
	for _, e := range sel {
		count[e+1]++
	}
	for e := 1; e <= ne; e++ {
		count[e] += count[e-1] // count[e] is now expert e's first slot
	}
	next := append(grow(&sc.next, ne)[:0], count[:ne]...)
	slot := grow(&sc.slot, n*k)
	xe := grow(&sc.xe, n*k*d)
	for i, e := range sel {
		slot[i] = next[e]
		next[e]++
		r := i / k
		copy(xe[slot[i]*d:(slot[i]+1)*d], fw.xb[r*d:(r+1)*d])
	}
	gate, up, out := grow(&sc.gate, n*k*ff), grow(&sc.up, n*k*ff), grow(&sc.out, n*k*d)
	var sets []actProducts
	for e := 0; e < ne; e++ {
		lo, hi := count[e], count[e+1]
		if lo == hi {
			continue
		}
		sets = append(sets, actProducts{newAct(xe[lo*d:hi*d], hi-lo, d),
			[]product{{gate[lo*ff : hi*ff], w.gate[e]}, {up[lo*ff : hi*ff], w.up[e]}}})
	}
	s.matmulSets(sets)
	s.pool.forRange(len(gate), 1024, len(gate)*8, func(lo, hi int) {
		siluMul(gate[lo:hi], up[lo:hi])
	})
	sets = sets[:0]
	for e := 0; e < ne; e++ {
		lo, hi := count[e], count[e+1]
		if lo == hi {
			continue
		}
		sets = append(sets, actProducts{newAct(gate[lo*ff:hi*ff], hi-lo, ff), []product{{out[lo*d : hi*d], w.down[e]}}})
	}
	s.matmulSets(sets)
	// Weigh each expert's output, add them in rank order, then the
	// residual; rows are independent, so they split freely.
	s.pool.forRange(n, s.pool.grainFor(n, 16), n*k*d, func(r0, r1 int) {
		acc := make([]float32, d)
		for r := r0; r < r1; r++ {
			for j := 0; j < k; j++ {
				o, wj := out[slot[r*k+j]*d:(slot[r*k+j]+1)*d], wt[r*k+j]
				if j == 0 {
					for i := range acc {
						acc[i] = o[i] * wj
					}
					continue
				}
				for i := range acc {
					acc[i] += float32(o[i] * wj)
				}
			}
			xr := x[r*d : (r+1)*d]
			for i := range xr {
				xr[i] += acc[i]
			}
		}
	})
}

// moeScratch is moeFFN's scratch, kept across one step's layers.
type moeScratch struct {
	logits, wt, xe, gate, up, out []float32
	sel                           []int32
	count, next, slot             []int
}

// grow returns *s resized to n, reallocating only to grow it.
func grow[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	*s = (*s)[:n]
	return *s
}
