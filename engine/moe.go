package engine

import (
	"fmt"
	"math"
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

// gatingSoftmax and gatingSigmoid are llama.cpp's
// LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX and _SIGMOID, the values of
// <arch>.expert_gating_func for a softmax and a sigmoid router.
const (
	gatingSoftmax = 1
	gatingSigmoid = 2
)

// minWeightSum is ggml_clamp's lower bound on the chosen probabilities'
// sum in build_moe_ffn: the smallest normal half.
const minWeightSum = 6.103515625e-5

// readExperts reads the mixture-of-experts keys beyond expert_count (read
// already into h.Experts) and checks them; h.FFN is read. moe says whether
// the architecture's definition runs experts (Arch.Experts).
func readExperts(f *File, h *HParams, ad *Arch, geti func(key string, dst *int, def int) error) error {
	a, moe := h.Arch, ad.Experts
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
		return nil
	}
	switch {
	case !moe:
		return fmt.Errorf("%w: %s with %d experts (mixture of experts runs for %s)", ErrUnsupportedArch, a, h.Experts, strings.Join(expertArchs(), " and "))
	case h.Experts > maxExperts:
		return fmt.Errorf("%w: key %q = %d (at most %d)", ErrCorrupt, a+".expert_count", h.Experts, maxExperts)
	case ad.DeepSeekMoE:
		return readDeepSeekExperts(f, h, geti)
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
	// llama.cpp runs gpt-oss with its own gating whatever the key says.
	if gating != gatingSoftmax && a != "gpt-oss" {
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

// expertArchs are the architectures whose definitions run experts.
func expertArchs() []string {
	var out []string
	for _, n := range Architectures() {
		if a, _ := Architecture(n); a.Experts {
			out = append(out, n)
		}
	}
	return out
}

// moeTensors are one layer's router and merged expert tensors, as
// convert_hf_to_gguf.py writes them for qwen3moe and Mixtral.
func moeTensors(h *HParams) []TensorSpec {
	d, e, ff := h.Dim, h.Experts, h.ExpertFFN
	return []TensorSpec{
		{Name: "ffn_gate_inp.weight", Dims: []int{d, e}},
		{Name: "ffn_gate_exps.weight", Dims: []int{d, ff, e}},
		{Name: "ffn_up_exps.weight", Dims: []int{d, ff, e}},
		{Name: "ffn_down_exps.weight", Dims: []int{ff, d, e}},
	}
}

// moeWeights are one layer's router and experts.
type moeWeights struct {
	router         *matrix   // Experts × Dim
	gate, up, down []*matrix // per expert: ExpertFFN × Dim, ExpertFFN × Dim, Dim × ExpertFFN
	// gpt-oss: biases (nil for none), its gating and activation (MoE).
	routerB            []float32
	gateB, upB, downB  *matrix // Experts × rows
	weighChosen, oai   bool
	oaiAlpha, oaiLimit float32
	// deepseek2: its routing (dsRouting.route); nil for the others.
	ds *dsRouting
}

// MoE is the Go engine's mixture of experts: a softmax router, the TopK
// experts renormalised, SwiGLU experts; or gpt-oss's: biases, the TopK
// logits' softmax, clamped SwiGLU-OAI experts (moeFFN).
func (fw *forward) MoE(x Tensor, m MoE) Tensor {
	xt := fw.t(x)
	out := fw.arena.tensor(len(fw.rows), xt.w)
	if !(m.NormTopK || m.WeighChosen || m.DeepSeek) || m.GELU {
		fw.fail(fmt.Errorf("%w: a mixture of experts without renormalised weights, or of GELU experts, on the Go engine", ErrUnsupportedArch))
		return out
	}
	w := &moeWeights{router: m.Router.(*matrix), gate: m.Gate.([]*matrix), up: m.Up.([]*matrix), down: m.Down.([]*matrix),
		weighChosen: m.WeighChosen, oai: m.OAI, oaiAlpha: m.OAIAlpha, oaiLimit: m.OAILimit}
	ne := w.router.rows
	if m.DeepSeek {
		ds := &dsRouting{sigmoid: m.Sigmoid, norm: m.NormTopK, scale: m.WeightScale, groups: m.Groups, used: m.GroupsUsed}
		if m.SelectBias != nil {
			ds.bias = m.SelectBias.([]float32)
		}
		if err := ds.check(ne, m.TopK); err != nil {
			fw.fail(err)
			return out
		}
		w.ds = ds
	}
	if m.RouterBias != nil {
		w.routerB = m.RouterBias.([]float32)
		if len(w.routerB) != ne {
			fw.fail(fmt.Errorf("%w: router bias of %d for %d experts", ErrShape, len(w.routerB), ne))
			return out
		}
	}
	for _, b := range []struct {
		dst  **matrix
		src  Weight
		want int
	}{{&w.gateB, m.GateBias, w.gate[0].rows}, {&w.upB, m.UpBias, w.up[0].rows}, {&w.downB, m.DownBias, w.down[0].rows}} {
		if b.src == nil {
			continue
		}
		bm := b.src.(*matrix)
		if bm.rows != ne || bm.cols != b.want {
			fw.fail(fmt.Errorf("%w: expert bias of %d×%d for %d experts of %d rows", ErrShape, bm.rows, bm.cols, ne, b.want))
			return out
		}
		*b.dst = bm
	}
	fw.moeFFN(w, m.TopK, xt.f, out.f)
	return out
}

// addExpertBias adds expert e's row of the bias b to each of the n rows
// of x (b's width each); a bias that is not F32 is widened row by row.
func addExpertBias(x []float32, b *matrix, e int, buf []float32) {
	var row []float32
	if b.f != nil {
		row = b.f[e*b.cols : (e+1)*b.cols]
	} else {
		row = buf[:b.cols]
		b.row(e, row)
	}
	for i := 0; i < len(x); i += b.cols {
		addTo(x[i:i+b.cols], row)
	}
}

// experts loads a 3-D tensor of n experts' rows×cols matrices (GGUF dims
// [cols, rows, n]) as n matrices over its bytes, read once: each expert's
// part is converted as a dense matrix's bytes are, and, with settle,
// settled (loader.settle) out of the scratch it was read into.
func (l *loader) experts(name string, n, rows, cols int, settle bool) ([]*matrix, error) {
	t, err := l.info(name, cols, rows, n)
	if err != nil {
		return nil, err
	}
	b, err := l.read(t, settle)
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
		if settle {
			l.settle(ms[i])
		}
	}
	return ms, nil
}

// route picks each row's experts from its router logits (n × Experts,
// turned into probabilities in place): sel[r*k+j] is row r's rank-j expert
// and wt[r*k+j] its normalised weight.
//
// With weighChosen (gpt-oss), the experts are chosen by their logits and
// weighed by a softmax over the chosen logits only, in rank order.
func route(logits []float32, n, experts, k int, sel []int32, wt []float32, weighChosen bool) {
	for r := 0; r < n; r++ {
		p := logits[r*experts : (r+1)*experts]
		if !weighChosen {
			softmax(p)
		}
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
		if weighChosen {
			softmax(w)
			continue
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

// moeFFN writes to res (n × Dim) the mixture of experts' output for the
// normed rows in xb, k experts per row. The batch's rows are grouped by
// expert, so that each
// chosen expert's weights are read once for all the rows that chose it;
// every product is one row's dot product, as a dense matmul computes it,
// so a row's bits do not depend on its batch or the thread count.
func (fw *forward) moeFFN(w *moeWeights, k int, xb, res []float32) {
	if fw.moe == nil {
		fw.moe = &moeScratch{}
	}
	s, sc := fw.s, fw.moe
	n, d, ne, ff := len(fw.rows), w.router.cols, w.router.rows, w.gate[0].rows
	logits := grow(&sc.logits, n*ne)
	s.matmul(logits, w.router, newAct(xb, n, d))
	if w.routerB != nil {
		for r := 0; r < n; r++ {
			addTo(logits[r*ne:(r+1)*ne], w.routerB)
		}
	}
	sel, wt := grow(&sc.sel, n*k), grow(&sc.wt, n*k)
	if w.ds != nil {
		w.ds.route(logits, n, ne, k, sel, wt, grow(&sc.choice, ne+w.ds.groups))
	} else {
		route(logits, n, ne, k, sel, wt, w.weighChosen)
	}

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
		copy(xe[slot[i]*d:(slot[i]+1)*d], xb[r*d:(r+1)*d])
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
	if w.gateB != nil || w.upB != nil {
		buf := grow(&sc.bias, max(ff, d))
		for e := 0; e < ne; e++ {
			lo, hi := count[e], count[e+1]
			if lo == hi {
				continue
			}
			if w.gateB != nil {
				addExpertBias(gate[lo*ff:hi*ff], w.gateB, e, buf)
			}
			if w.upB != nil {
				addExpertBias(up[lo*ff:hi*ff], w.upB, e, buf)
			}
		}
	}
	s.pool.forRange(len(gate), 1024, len(gate)*8, func(lo, hi int) {
		if w.oai {
			swigluOAI(gate[lo:hi], up[lo:hi], w.oaiAlpha, w.oaiLimit)
			return
		}
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
	if w.downB != nil {
		buf := grow(&sc.bias, max(ff, d))
		for e := 0; e < ne; e++ {
			if lo, hi := count[e], count[e+1]; lo < hi {
				addExpertBias(out[lo*d:hi*d], w.downB, e, buf)
			}
		}
	}
	// Weigh each expert's output and add them in rank order (the block
	// adds the residual); rows are independent, so they split freely.
	s.pool.forRange(n, s.pool.grainFor(n, 16), n*k*d, func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			acc := res[r*d : (r+1)*d]
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
		}
	})
}

// moeScratch is moeFFN's scratch, kept across one step's layers.
type moeScratch struct {
	logits, wt, xe, gate, up, out, bias, choice []float32
	sel                                         []int32
	count, next, slot                           []int
}

// grow returns *s resized to n, reallocating only to grow it.
func grow[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	*s = (*s)[:n]
	return *s
}

// swigluOAI is gpt-oss's expert activation, as ggml's swiglu_oai computes
// it in float32: x = min(g, limit), y = up clamped to ±limit, then
// x/(1+e^(α·(−x)))·(y+1), written over g.
func swigluOAI(g, u []float32, alpha, limit float32) {
	u = u[:len(g)]
	for i, v := range g {
		x := min(v, limit)
		y := min(max(u[i], -limit), limit)
		o := x / (1 + expf(float32(alpha*(-x))))
		g[i] = o * (y + 1)
	}
}

// dsRouting is deepseek2's routing, as llama.cpp's build_moe_ffn computes
// it for that graph (MoE.DeepSeek).
type dsRouting struct {
	sigmoid      bool
	bias         []float32 // selection only; nil for none
	norm         bool
	scale        float32
	groups, used int
}

func (d *dsRouting) check(ne, k int) error {
	switch {
	case d.bias != nil && len(d.bias) != ne:
		return fmt.Errorf("%w: expert selection bias of %d for %d experts", ErrShape, len(d.bias), ne)
	case d.groups > 1 && (ne%d.groups != 0 || ne/d.groups < 2 || d.used <= 0 || d.used >= d.groups):
		return fmt.Errorf("%w: %d experts in %d groups, %d used", ErrShape, ne, d.groups, d.used)
	case k <= 0 || k > ne:
		return fmt.Errorf("%w: %d of %d experts", ErrShape, k, ne)
	case !(d.scale > 0):
		return fmt.Errorf("%w: expert weights scale %v", ErrShape, d.scale)
	}
	return nil
}

// route turns each row's logits into probabilities in place (sigmoid or
// softmax), chooses k experts by the probabilities plus the selection
// bias (first keeping the used groups whose two best sum highest), and
// weighs them by their unbiased probabilities, renormalised where norm is
// set, times scale. Ties go to the lower index, as route's. choice is
// scratch of experts + groups values.
func (d *dsRouting) route(logits []float32, n, ne, k int, sel []int32, wt, choice []float32) {
	c, gs := choice[:ne], choice[ne:ne+d.groups]
	ninf := float32(math.Inf(-1))
	kept := make([]bool, d.groups)
	for r := 0; r < n; r++ {
		p := logits[r*ne : (r+1)*ne]
		if d.sigmoid {
			for i, v := range p {
				// ggml's sigmoid: 1/(1+expf(-x)), expf correctly rounded
				// as glibc's.
				p[i] = 1 / (1 + float32(math.Exp(float64(-v))))
			}
		} else {
			softmax(p)
		}
		copy(c, p)
		if d.bias != nil {
			for i := range c {
				c[i] += d.bias[i]
			}
		}
		if d.groups > 1 {
			per := ne / d.groups
			for g := range gs {
				b0, b1 := ninf, ninf
				for _, v := range c[g*per : (g+1)*per] {
					if v > b0 {
						b0, b1 = v, b0
					} else if v > b1 {
						b1 = v
					}
				}
				gs[g] = b0 + b1
			}
			// Keep the used groups with the highest scores (ties: the
			// lower index), mask the others' experts.
			clear(kept)
			for range d.used {
				best := -1
				for g, v := range gs {
					if !kept[g] && (best < 0 || v > gs[best]) {
						best = g
					}
				}
				kept[best] = true
			}
			for g, keep := range kept {
				if !keep {
					for i := g * per; i < (g+1)*per; i++ {
						c[i] = ninf
					}
				}
			}
		}
		s, w := sel[r*k:(r+1)*k], wt[r*k:(r+1)*k]
		for j := range s {
			best := int32(-1)
			for e, v := range c {
				if chosen(s[:j], int32(e)) {
					continue
				}
				if best < 0 || v > c[best] {
					best = int32(e)
				}
			}
			s[j], w[j] = best, p[best]
		}
		if d.norm {
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
		if d.scale != 1 {
			for j := range w {
				w[j] *= d.scale
			}
		}
	}
}
