package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stratanet/strata/layers"
)

// Bounds that keep every sum finite whatever a peer announces.
const (
	maxSeconds = 1e9     // any one cost term, and any measured figure
	maxTokens  = 1 << 24 // a request's prompt or output
	maxCount   = 1 << 24 // a queue depth or a session count
)

type kind uint8

const (
	kindLatency kind = iota
	kindLoad
	kindLocality
	kindOther
	kinds
)

type weighted struct {
	s    Scorer
	w    float64
	kind kind
}

// Router chooses paths with a DP over (layer, node). It is immutable after
// New and safe for concurrent use; each route borrows its scratch space
// from a pool, so routing does not allocate beyond the returned path.
type Router struct {
	model   layers.ModelSpec
	params  layers.CostParams
	fleet   *layers.Fleet
	cfg     Config
	filters []Filter
	extra   []weighted
	scorers []weighted

	// Per-plugin timing (observe.go): nil obs reads no clock.
	obs     Observer
	profile string // the profile's name, for the observer
	picker  string // the picker's name, for the observer

	// The cost model's per-layer constants, computed once (see dec).
	ctx                       int
	maxBatch                  int // 0: no cap
	wBytes, kvTok, fDec       float64
	headBytes, headFLOPs, act float64

	pool sync.Pool
}

var _ Policy = (*Router)(nil)

// New returns a router. It needs a model (WithModel or WithFleet); every
// other option has a default (DefaultConfig, DefaultFilters,
// layers.DefaultCostParams).
func New(opts ...Option) (*Router, error) {
	r := &Router{params: layers.DefaultCostParams(), cfg: DefaultConfig(), filters: DefaultFilters(), picker: PickBestOfSlack}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(r); err != nil {
			return nil, err
		}
	}
	if r.model.Layers <= 0 {
		return nil, fmt.Errorf("%w: no model (use WithModel or WithFleet)", ErrConfig)
	}
	if err := r.cfg.validate(); err != nil {
		return nil, err
	}
	d := layers.DefaultCostParams()
	r.ctx = r.params.Context
	if r.ctx <= 0 {
		r.ctx = d.Context
	}
	switch {
	case r.params.MaxBatch == 0:
		r.maxBatch = d.MaxBatch
	case r.params.MaxBatch > 0:
		r.maxBatch = r.params.MaxBatch
	}
	m := r.model
	r.wBytes, r.kvTok, r.fDec = m.LayerReadBytes(), m.KVBytesPerToken(), m.FLOPsPerToken(r.ctx)
	r.headBytes, r.headFLOPs, r.act = m.HeadBytes(), m.HeadFLOPsPerToken(), m.ActivationBytesPerToken()
	w := r.cfg.Weights
	r.scorers = append([]weighted{
		{LatencyScorer{}, w.Latency, kindLatency},
		{LoadScorer{KVPenalty: r.cfg.KVPenalty}, w.Load, kindLoad},
		{LocalityScorer{}, w.Locality, kindLocality},
	}, r.extra...)
	r.pool.New = func() any { return new(scratch) }
	return r, nil
}

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// Model returns the model the router routes.
func (r *Router) Model() layers.ModelSpec { return r.model }

// weights is the weight bytes a step of b tokens reads in one layer: the
// whole layer for a dense model, the experts b tokens touch for a mixture
// of experts (layers.ModelSpec.LayerReadBytesBatch).
func (r *Router) weights(b int) float64 {
	if !r.model.MoE() {
		return r.wBytes
	}
	return r.model.LayerReadBytesBatch(b)
}

// dec is one decode step of batch b in one layer: the same roofline as
// layers.DecodeLayerTime, with the model's constants hoisted out of the
// per-node loop.
func (r *Router) dec(h *layers.Hardware, b int) float64 {
	bytes := r.weights(b) + float64(b)*float64(r.ctx)*r.kvTok
	return max(bytes/h.MemBandwidth, float64(b)*r.fDec/(h.TFLOPS*1e12))
}

// share is the per-token time of one layer when b sessions share the
// node: the roofline up to the batch cap, and past it the sessions take
// turns at the full batch, so the time grows in proportion.
func (r *Router) share(h *layers.Hardware, b, cap int) float64 {
	if cap <= 0 || b <= cap {
		return r.dec(h, b)
	}
	return r.dec(h, cap) * float64(b) / float64(cap)
}

// reqInfo is a request's derived figures, the same for every node.
type reqInfo struct {
	req             Request
	prompt, output  int
	steps, decodes  float64
	fPre            float64 // prefill FLOPs per token
	bytes           float64 // activation bytes one crossing carries over the request
	stale           time.Duration
	now             time.Time
	entry           int32 // view index of the entry, -1 if none
	entryZone       int32
	noEntry         bool
	linkW, rttScale float64 // locality weight; and weight·steps/2 for round trips
	cal             *calibration
}

func (r *Router) reqInfo(req Request, v *View, now time.Time) reqInfo {
	q := reqInfo{req: req, now: now, stale: r.cfg.StaleAfter, entry: -1}
	q.prompt = min(max(req.PromptTokens, 0), maxTokens)
	q.output = req.MaxTokens
	if q.output <= 0 {
		q.output = r.cfg.DefaultOutputTokens
	}
	q.output = min(max(q.output, 1), maxTokens)
	q.req.PromptTokens, q.req.MaxTokens = q.prompt, q.output
	// The prefill yields the first token, and each later token is a decode
	// step: output passes through the path in all.
	q.steps = float64(q.output)
	q.decodes = float64(q.output - 1)
	q.fPre = r.model.FLOPsPerToken(max(q.prompt, 1) / 2)
	q.bytes = float64(q.prompt+q.output) * r.act
	q.linkW = r.cfg.Weights.Locality
	q.rttScale = q.linkW * q.steps / 2
	q.noEntry = req.Entry == ""
	if i, ok := v.lookup(req.Entry); ok {
		q.entry, q.entryZone = i, v.zone[i]
	}
	return q
}

// Stage-indexed slices describe the eligible stages in map order.
type scratch struct {
	est Estimate
	cal calibration

	// Per filter, then per scorer (observe.go): calls in this route, the
	// sampled calls and their time; when the picker began.
	calls, timed []int32
	spent        []time.Duration
	pickAt       time.Duration

	minLayer float64 // the fastest eligible stage's LayerTime, for Scores.Latency

	reason  []string // per map stage: why it is not eligible ("" if it is)
	stageOf []int32  // per view node: its eligible stage, or -1
	avoid   []bool   // per view node

	view, start, end, zone   []int32
	layer, visit, link, last []float64 // weighted costs as scored
	entry                    []float64 // entry→node and node→entry round trips
	wl, wv, wk, wt           []float64 // the DP's working copies (perturbed or penalised)

	cover []int32 // per layer: eligible holders (diff array, then counts)

	zoneMap []int32   // view zone → compact zone, -1 if unused
	zoneCnt int       // compact zones
	zr      []float64 // view zone × zone: mean measured round trip, seconds
	zc      []float64 // compact zone × zone: zr as a cost
	hx      []float64 // per stage: its excess over its region's round trips, as a cost

	eoff []int32 // per stage: its first measured link into it in erec
	erec []edge  // measured links between stages, by receiving stage
	eby  []edge  // erec sorted by first boundary
	eLo  []int32
	eact []int32 // links (indices into eby) usable at the current boundary

	sOff, sIdx   []int32   // stages by start layer
	off          []int32   // per stage: its first slot in fh
	fh           []float64 // per (stage, layer): the DP's value
	x            []float64 // per stage: its exit value at the current boundary
	eb           []float64 // per stage: its cheapest arrival over a measured link
	zmin, inZ    []float64
	active, next []int32
	hold         []int32 // the holders of each layer, concatenated, for trace
	holdOff      []int32
	hopStage     []int32
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

func (r *Router) get() *scratch  { return r.pool.Get().(*scratch) }
func (r *Router) put(s *scratch) { s.est = Estimate{}; s.cal.reset(nil); r.pool.Put(s) }

// prepare filters and scores the map's stages for one request and lays out
// everything the DP reads. It fails with ErrNoPath, naming the layer, when
// some layer has no eligible holder.
func (r *Router) prepare(s *scratch, m *layers.LayerMap, v *View, q *reqInfo) error {
	r.startObserve(s)
	s.minLayer = math.Inf(1)
	s.cal.reset(v)
	q.cal = &s.cal
	if err := m.Validate(); err != nil {
		return fmt.Errorf("routing: %w", err)
	}
	L := m.Layers
	if L != r.model.Layers {
		return fmt.Errorf("%w: map has %d layers, model %s has %d", ErrWrongModel, L, r.model.Name, r.model.Layers)
	}
	nv := v.Len()
	s.stageOf = grow(s.stageOf, nv)
	s.avoid = grow(s.avoid, nv)
	for i := range s.stageOf {
		s.stageOf[i] = -1
		s.avoid[i] = false
	}
	for _, id := range q.req.Avoid {
		if i, ok := v.lookup(id); ok {
			s.avoid[i] = true
		}
	}
	s.reason = grow(s.reason, len(m.Stages))
	s.view, s.start, s.end, s.zone = s.view[:0], s.start[:0], s.end[:0], s.zone[:0]
	s.layer, s.visit, s.link, s.last = s.layer[:0], s.visit[:0], s.link[:0], s.last[:0]
	s.cover = grow(s.cover, L+1)
	clear(s.cover)

	for k := range m.Stages {
		st := m.Stages[k]
		s.reason[k] = ""
		vi, ok := v.lookup(st.Node)
		if !ok {
			s.reason[k] = "not in view"
			continue
		}
		if s.avoid[vi] {
			s.reason[k] = "avoided"
			continue
		}
		n := &v.nodes[vi]
		for fi, f := range r.filters {
			var t0 time.Duration
			timed := false
			if r.obs != nil {
				t0, timed = r.begin(s, fi)
			}
			keep := f.Keep(&q.req, n, q.now)
			if timed {
				r.end(s, fi, t0)
			}
			if !keep {
				s.reason[k] = f.Name()
				break
			}
		}
		if s.reason[k] != "" {
			continue
		}
		r.estimate(&s.est, n, st, q, len(v.adj[vi]) > 0)
		c, _, ok := r.score(&q.req, &s.est, r.observed(s))
		if !ok {
			s.reason[k] = "unscorable"
			continue
		}
		s.minLayer = min(s.minLayer, s.est.LayerTime)
		s.stageOf[vi] = int32(len(s.view))
		s.view = append(s.view, vi)
		s.start = append(s.start, int32(st.Start))
		s.end = append(s.end, int32(st.End))
		s.zone = append(s.zone, v.zone[vi])
		s.layer = append(s.layer, c.Layer)
		s.visit = append(s.visit, c.Visit)
		s.link = append(s.link, c.Link)
		s.last = append(s.last, c.Last)
		s.cover[st.Start]++
		s.cover[st.End]--
	}
	run := int32(0)
	for l := 0; l < L; l++ {
		run += s.cover[l]
		if run <= 0 {
			return r.noHolder(s, m, l)
		}
	}
	r.zones(s, v, q)
	r.entryCosts(s, v, q)
	return nil
}

// dropText says why a stage was left out, from the reason the router
// noted: a filter's name, or its own word.
func dropText(reason string) string {
	switch reason {
	case "live":
		return "not alive (filter live)"
	case "phase":
		return "joining or draining (filter phase)"
	case "kv":
		return "too little free KV cache (filter kv)"
	case "not in view", "avoided", "unscorable":
		return reason
	}
	return "dropped by filter " + reason
}

// noHolder explains why layer l has no eligible holder.
func (r *Router) noHolder(s *scratch, m *layers.LayerMap, l int) error {
	var why []string
	for k, st := range m.Stages {
		if st.Contains(l) {
			why = append(why, st.Node+": "+dropText(s.reason[k]))
		}
	}
	if len(why) == 0 {
		return fmt.Errorf("%w: layer %d has no holder in map epoch %d", ErrNoPath, l, m.Epoch)
	}
	return fmt.Errorf("%w: layer %d has no eligible holder in map epoch %d (%s)", ErrNoPath, l, m.Epoch, strings.Join(why, ", "))
}

// rtt clamps a measured round trip.
func (r *Router) rtt(x float64) float64 { return min(max(x, r.cfg.MinRTT), r.cfg.MaxRTT) }

// zones builds the round-trip estimate for unmeasured pairs. An estimate
// per node pair would make every layer boundary O(N²); one that separates
// into a region-pair term plus a term per node keeps it O(N): the DP keeps
// the cheapest exit per region and adds the region pair's term.
//
// The region-pair term is the mean round trip measured between the two
// regions (UnknownRTT where nothing was measured), which the view keeps
// current. A node's own term is how far its worst measured link exceeds
// its region pair's mean, so the estimate of any pair is never below a
// measured one: the DP then relaxes the measured links, kept as explicit
// edges, as exact corrections. A node with a slow link is thus assumed
// slow on its unmeasured links too, which is the conservative reading.
// The same pass over each stage's links lays out those edges, kept only
// where the two ranges meet at some layer boundary.
func (r *Router) zones(s *scratch, v *View, q *reqInfo) {
	s.zoneMap = grow(s.zoneMap, zones)
	for z := range s.zoneMap {
		s.zoneMap[z] = -1
	}
	n := int32(0)
	use := func(z int32) {
		if s.zoneMap[z] < 0 {
			s.zoneMap[z] = n
			n++
		}
	}
	for _, z := range s.zone {
		use(z)
	}
	use(q.entryZone)
	for k := range s.zone {
		s.zone[k] = s.zoneMap[s.zone[k]]
	}
	nz := int(n)
	s.zoneCnt = nz
	// zr covers every view zone (for the links to nodes outside the map);
	// zc only the compact ones the DP uses.
	s.zr = grow(s.zr, zones*zones)
	for a := range int32(zones) {
		for b := range int32(zones) {
			x, ok := 0.0, false
			if v != nil {
				x, ok = v.regionRTT(a, b)
			}
			if !ok {
				x = r.cfg.UnknownRTT
			}
			s.zr[a*zones+b] = r.rtt(x)
		}
	}
	s.zc = grow(s.zc, nz*nz)
	for a := range int32(zones) {
		ca := s.zoneMap[a]
		if ca < 0 {
			continue
		}
		for b := range int32(zones) {
			if cb := s.zoneMap[b]; cb >= 0 {
				s.zc[int(ca)*nz+int(cb)] = q.rttScale * s.zr[a*zones+b]
			}
		}
	}
	S := len(s.view)
	s.hx = grow(s.hx, S)
	s.eoff = grow(s.eoff, S+1)
	s.erec = s.erec[:0]
	for i, vi := range s.view {
		s.eoff[i] = int32(len(s.erec))
		h := 0.0
		zi := v.zone[vi] * zones
		for _, l := range v.adj[vi] {
			rtt := r.rtt(l.rtt)
			h = max(h, rtt-s.zr[zi+v.zone[l.peer]])
			j := s.stageOf[l.peer]
			if j < 0 {
				continue
			}
			// A boundary b joins j to i when j runs b-1 and i runs b.
			lo, hi := max(s.start[j]+1, s.start[i]), min(s.end[j], s.end[i]-1)
			if lo > hi {
				continue
			}
			s.erec = append(s.erec, edge{j: j, i: int32(i), lo: lo, hi: hi, c: q.rttScale * rtt})
		}
		s.hx[i] = q.rttScale * h
	}
	s.eoff[S] = int32(len(s.erec))
}

// entryCosts charges each stage the round trips to and from the entry: a
// step starts at the entry (the token) and ends there (the next token).
func (r *Router) entryCosts(s *scratch, v *View, q *reqInfo) {
	S := len(s.view)
	s.entry = grow(s.entry, S)
	if q.noEntry {
		clear(s.entry)
		return
	}
	ez := s.zoneMap[q.entryZone]
	nz := s.zoneCnt
	hop := q.linkW * q.steps * r.cfg.HopOverhead
	for i := range S {
		s.entry[i] = s.zc[int(ez)*nz+int(s.zone[i])] + s.hx[i] + hop
	}
	if q.entry < 0 {
		return
	}
	for _, l := range v.adj[q.entry] {
		if i := s.stageOf[l.peer]; i >= 0 {
			s.entry[i] = q.rttScale*r.rtt(l.rtt) + hop
		}
	}
	if i := s.stageOf[q.entry]; i >= 0 {
		s.entry[i] = 0 // the entry serves the hop itself
	}
}

// finish prices the path in s.hopStage with the costs as scored (no
// perturbation or penalty), split by kind.
func (r *Router) finish(s *scratch, m *layers.LayerMap, v *View, q *reqInfo, hops []Hop) Path {
	p := Path{Hops: hops, Epoch: m.Epoch}
	var t [kinds]float64
	var u unitSums
	t[kindLocality] += s.entry[s.hopStage[0]] + s.entry[s.hopStage[len(s.hopStage)-1]]
	for h, i := range s.hopStage {
		vi := s.view[i]
		st := layers.Stage{Node: hops[h].Node, Range: layers.Range{Start: int(s.start[i]), End: int(s.end[i])}}
		r.estimate(&s.est, &v.nodes[vi], st, q, len(v.adj[vi]) > 0)
		_, by, _ := r.score(&q.req, &s.est, nil) // the picker's time
		n := float64(hops[h].To - hops[h].From)
		u.add(&q.req, &s.est, n, s.minLayer, h == len(s.hopStage)-1)
		crossings := 0.0
		if h > 0 {
			crossings++
			t[kindLocality] += s.pairCost(s.hopStage[h-1], i)
		}
		if h < len(s.hopStage)-1 {
			crossings++
		}
		for k, b := range by {
			t[k] += b.Visit + n*b.Layer + crossings*b.Link
			if h == len(s.hopStage)-1 {
				t[k] += b.Last
			}
		}
	}
	p.Terms = Breakdown{Latency: t[kindLatency], Load: t[kindLoad], Locality: t[kindLocality], Other: t[kindOther]}
	p.Terms.Scores = u.scores(t[kindLocality], r.cfg.Weights.Locality)
	p.Cost = t[kindLatency] + t[kindLoad] + t[kindLocality] + t[kindOther]
	return p
}

// Route chooses a path for req over map m as v sees the swarm at now. It
// takes the cheapest path but for seeded noise (Config.Slack) that spreads
// requests over the near-best paths, so that entries routing on the same
// view between load updates do not herd onto one path.
func (r *Router) Route(m layers.LayerMap, v *View, req Request, now time.Time) (Path, error) {
	if r.cfg.Candidates > 1 {
		paths, err := r.Paths(m, v, req, now, r.cfg.Candidates)
		if err != nil {
			return Path{}, err
		}
		p, _ := PickWithin(paths, r.cfg.Slack, req.Seed)
		return p, nil
	}
	s := r.get()
	defer r.put(s)
	q := r.reqInfo(req, v, now)
	if err := r.prepare(s, &m, v, &q); err != nil {
		r.report(s, false)
		return Path{}, err
	}
	r.pickStart(s)
	s.working()
	s.perturb(req.Seed, r.cfg.Slack)
	hops, ok := s.solve(v, m.Layers)
	if !ok {
		r.report(s, true)
		return Path{}, fmt.Errorf("%w: no chain over [0,%d)", ErrNoPath, m.Layers)
	}
	p := r.finish(s, &m, v, &q, hops)
	r.report(s, true)
	return p, nil
}

// Paths returns up to k diverse paths for req, cheapest first: the best
// path, then each next best once the nodes of the paths before it are
// charged the best path's whole cost per visit, so that a later path
// reuses a node only where every alternative is worse than that. Costs are
// unperturbed; the entry can keep the rest as ready fallbacks, or choose
// with PickWithin.
func (r *Router) Paths(m layers.LayerMap, v *View, req Request, now time.Time, k int) ([]Path, error) {
	if k < 1 {
		return nil, nil
	}
	s := r.get()
	defer r.put(s)
	q := r.reqInfo(req, v, now)
	if err := r.prepare(s, &m, v, &q); err != nil {
		r.report(s, false)
		return nil, err
	}
	r.pickStart(s)
	s.working()
	var out []Path
	for len(out) < k {
		hops, ok := s.solve(v, m.Layers)
		if !ok {
			break
		}
		p := r.finish(s, &m, v, &q, hops)
		if slices.ContainsFunc(out, p.Same) {
			break // the penalties could not push it anywhere new
		}
		out = append(out, p)
		charge := max(out[0].Cost, 1e-9)
		for _, i := range s.hopStage {
			s.wv[i] += charge
		}
	}
	r.report(s, true)
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no chain over [0,%d)", ErrNoPath, m.Layers)
	}
	slices.SortStableFunc(out, func(a, b Path) int {
		switch {
		case a.Cost < b.Cost:
			return -1
		case a.Cost > b.Cost:
			return 1
		}
		return 0
	})
	return out, nil
}

// Evaluate prices a given path for req as Route would, for comparing
// policies on the same terms. The path must chain over [0, L) on nodes
// that serve those layers in m and pass the filters.
func (r *Router) Evaluate(m layers.LayerMap, v *View, req Request, now time.Time, p Path) (Path, error) {
	if err := p.Validate(m.Layers); err != nil {
		return Path{}, err
	}
	s := r.get()
	defer r.put(s)
	q := r.reqInfo(req, v, now)
	if err := r.prepare(s, &m, v, &q); err != nil {
		r.report(s, false)
		return Path{}, err
	}
	r.pickStart(s)
	s.hopStage = s.hopStage[:0]
	for _, h := range p.Hops {
		vi, ok := v.lookup(h.Node)
		i := int32(-1)
		if ok {
			i = s.stageOf[vi]
		}
		if i < 0 {
			r.report(s, true)
			return Path{}, fmt.Errorf("%w: hop %v: node is not eligible", ErrNoPath, h)
		}
		if int(s.start[i]) > h.From || int(s.end[i]) < h.To {
			r.report(s, true)
			return Path{}, fmt.Errorf("%w: hop %v: node serves [%d,%d)", ErrBadPath, h, s.start[i], s.end[i])
		}
		s.hopStage = append(s.hopStage, i)
	}
	out := r.finish(s, &m, v, &q, slices.Clone(p.Hops))
	r.report(s, true)
	return out, nil
}
