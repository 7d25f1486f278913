package routing

import (
	"fmt"
	"math"
	"math/rand/v2"
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
	r := &Router{params: layers.DefaultCostParams(), cfg: DefaultConfig(), filters: DefaultFilters()}
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

// dec is one decode step of batch b in one layer: the same roofline as
// layers.DecodeLayerTime, with the model's constants hoisted out of the
// per-node loop.
func (r *Router) dec(h *layers.Hardware, b int) float64 {
	bytes := r.wBytes + float64(b)*float64(r.ctx)*r.kvTok
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

// estimate fills e for node n serving stage st.
func (r *Router) estimate(e *Estimate, n *NodeState, st layers.Stage, q *reqInfo) {
	*e = Estimate{Node: n, Range: st.Range, Steps: int(q.steps)}
	h := n.Hardware
	speed := n.Speed
	batchCap := r.maxBatch
	if r.fleet != nil {
		if p, ok := r.fleet.Profile(n.ID); ok {
			if h.Validate() != nil {
				h = p.Node.Hardware
			}
			if !(speed > 0) {
				speed = p.Node.Speed
			}
			if b := p.Batch(st.Len(), layers.EndsOf(st.Range, r.model.Layers)); b > 0 {
				batchCap = b
			}
		}
	}
	if h.Validate() != nil {
		h = r.cfg.DefaultHardware
	}
	if !(speed > 0) || speed > 1e6 {
		speed = 1
	}
	e.Hardware = h
	a := min(max(n.ActiveSessions, 0), maxCount)
	qd := min(max(n.QueueDepth, 0), maxCount)
	e.Batch, e.MaxBatch = a+qd+1, batchCap

	// A measured layer latency calibrates the model: its ratio to the
	// modelled time at the batch it was measured at scales every modelled
	// time, so the load curve keeps the model's shape but the node's speed.
	corr := 1 / speed
	if lat := n.LayerLatency; lat > 0 && lat < maxSeconds {
		if m := r.dec(&h, max(a, 1)); m > 0 {
			corr = min(max(lat/m, 1e-3), 1e3)
			e.Measured = true
		}
	}
	p := float64(max(q.prompt, 1))
	pre := max((r.wBytes+p*r.kvTok)/h.MemBandwidth, p*q.fPre/(h.TFLOPS*1e12))
	sat := func(b int) float64 {
		if batchCap <= 0 || b <= batchCap {
			return 1
		}
		return float64(b) / float64(batchCap)
	}
	e.LayerTime = seconds(corr * (pre*sat(a+1) + q.decodes*r.share(&h, a+1, batchCap)))
	e.LoadedTime = seconds(corr * (pre*sat(e.Batch) + q.decodes*r.share(&h, e.Batch, batchCap)))
	head := max(r.headBytes/h.MemBandwidth, r.headFLOPs/(h.TFLOPS*1e12))
	e.HeadTime = seconds(corr * q.steps * head)

	lt := q.steps * r.cfg.HopOverhead / 2
	if h.NetBandwidth > 0 {
		lt += q.bytes / h.NetBandwidth
	}
	if n.Relayed {
		lt += q.steps*r.cfg.RelayDelay + q.bytes/r.cfg.RelayBandwidth
	}
	e.LinkTime = seconds(lt)
	e.KVShort = n.FreeKV >= 0 && n.FreeKV < q.req.Tokens()
	e.Stale = n.Updated.IsZero() || q.now.Sub(n.Updated) > q.stale
}

// seconds clamps a modelled time into [0, maxSeconds]; NaN counts as the
// worst.
func seconds(x float64) float64 {
	if !(x <= maxSeconds) {
		return maxSeconds
	}
	return max(x, 0)
}

// score runs the scorers over e. It returns the weighted total, its split
// by kind (the stale surcharge counted as load), and false when a scorer
// made the node unusable (NaN or +Inf).
func (r *Router) score(req *Request, e *Estimate) (NodeCost, [kinds]NodeCost, bool) {
	var by [kinds]NodeCost
	for _, ws := range r.scorers {
		if ws.w == 0 {
			continue
		}
		c := ws.s.Score(req, e)
		parts := [4]float64{c.Layer, c.Visit, c.Link, c.Last}
		for k, x := range parts {
			if math.IsNaN(x) || math.IsInf(x, 1) {
				return NodeCost{}, by, false
			}
			parts[k] = min(max(x, 0), maxSeconds) * ws.w
		}
		b := &by[ws.kind]
		b.Layer += parts[0]
		b.Visit += parts[1]
		b.Link += parts[2]
		b.Last += parts[3]
	}
	var tot NodeCost
	for _, b := range by {
		tot.Layer += b.Layer
		tot.Visit += b.Visit
		tot.Link += b.Link
		tot.Last += b.Last
	}
	if e.Stale && r.cfg.StalePenalty > 0 {
		s := r.cfg.StalePenalty
		by[kindLoad].Layer += s * tot.Layer
		by[kindLoad].Visit += s * tot.Visit
		by[kindLoad].Link += s * tot.Link
		by[kindLoad].Last += s * tot.Last
		tot.Layer, tot.Visit, tot.Link, tot.Last = tot.Layer*(1+s), tot.Visit*(1+s), tot.Link*(1+s), tot.Last*(1+s)
	}
	return tot, by, true
}

// scratch is one route's working memory, reused through the router's pool.
// Stage-indexed slices describe the eligible stages in map order.
type scratch struct {
	est Estimate

	reason  []string // per map stage: why it is not eligible ("" if it is)
	stageOf []int32  // per view node: its eligible stage, or -1
	avoid   []bool   // per view node

	view, start, end, zone []int32
	layer, visit, link, last []float64 // weighted costs as scored
	entry                    []float64 // entry→node and node→entry round trips
	wl, wv, wk, wt           []float64 // the DP's working copies (perturbed or penalised)

	cover []int32 // per layer: eligible holders (diff array, then counts)

	zoneMap []int32   // view zone → compact zone, -1 if unused
	zoneCnt int       // compact zones
	zr      []float64 // compact zone × zone: mean measured round trip, seconds
	zn      []int32   // samples behind zr
	zc      []float64 // zr as a cost
	hx      []float64 // per stage: its excess over its region's round trips, as a cost

	eoff []int32 // CSR of measured links into each stage cheaper than its zone estimate
	ej   []int32
	ec   []float64

	sOff, sIdx   []int32 // stages by start layer
	off          []int32 // per stage: its first slot in pred
	pred         []int32 // per (stage, layer): -1 stay, -2 start, else the stage it came from
	f            []float64
	zmin, inZ    []float64
	zarg, inArg  []int32
	active, next []int32
	tmpF         []float64
	tmpP         []int32
	hopStage     []int32
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

func (r *Router) get() *scratch  { return r.pool.Get().(*scratch) }
func (r *Router) put(s *scratch) { s.est = Estimate{}; r.pool.Put(s) }

// prepare filters and scores the map's stages for one request and lays out
// everything the DP reads. It fails with ErrNoPath, naming the layer, when
// some layer has no eligible holder.
func (r *Router) prepare(s *scratch, m *layers.LayerMap, v *View, q *reqInfo) error {
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
		for _, f := range r.filters {
			if !f.Keep(&q.req, n, q.now) {
				s.reason[k] = f.Name()
				break
			}
		}
		if s.reason[k] != "" {
			continue
		}
		r.estimate(&s.est, n, st, q)
		c, _, ok := r.score(&q.req, &s.est)
		if !ok {
			s.reason[k] = "unscorable"
			continue
		}
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
	r.links(s, v, q)
	return nil
}

// noHolder explains why layer l has no eligible holder.
func (r *Router) noHolder(s *scratch, m *layers.LayerMap, l int) error {
	var why []string
	for k, st := range m.Stages {
		if st.Contains(l) {
			why = append(why, st.Node+": "+s.reason[k])
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
// regions (UnknownRTT where nothing was measured). A node's own term is how
// far its worst measured link exceeds its region pair's mean, so the
// estimate of any pair is never below a measured one: the DP then relaxes
// the measured links, kept as explicit edges, as exact corrections. A node
// with a slow link is thus assumed slow on its unmeasured links too, which
// is the conservative reading.
func (r *Router) zones(s *scratch, v *View, q *reqInfo) {
	const R = MaxRegions + 1
	s.zoneMap = grow(s.zoneMap, R)
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
	s.zr = grow(s.zr, nz*nz)
	s.zn = grow(s.zn, nz*nz)
	clear(s.zr)
	clear(s.zn)
	for i, ls := range v.adj {
		zi := s.zoneMap[v.zone[i]]
		if zi < 0 {
			continue
		}
		for _, l := range ls {
			if zj := s.zoneMap[v.zone[l.peer]]; zj >= 0 {
				s.zr[int(zi)*nz+int(zj)] += r.rtt(l.rtt)
				s.zn[int(zi)*nz+int(zj)]++
			}
		}
	}
	s.zc = grow(s.zc, nz*nz)
	for k := range s.zr {
		if s.zn[k] > 0 {
			s.zr[k] /= float64(s.zn[k])
		} else {
			s.zr[k] = r.cfg.UnknownRTT
		}
		s.zc[k] = q.rttScale * s.zr[k]
	}
	s.hx = grow(s.hx, len(s.view))
	for i, vi := range s.view {
		h := 0.0
		zi := int(s.zone[i]) * nz
		for _, l := range v.adj[vi] {
			if zj := s.zoneMap[v.zone[l.peer]]; zj >= 0 {
				h = max(h, r.rtt(l.rtt)-s.zr[zi+int(zj)])
			}
		}
		s.hx[i] = q.rttScale * h
	}
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

// links lays out the measured links that beat their region estimate, as
// edges into each stage, kept only where the two ranges meet at some layer
// boundary.
func (r *Router) links(s *scratch, v *View, q *reqInfo) {
	S := len(s.view)
	s.eoff = grow(s.eoff, S+1)
	s.ej, s.ec = s.ej[:0], s.ec[:0]
	nz := s.zoneCnt
	for i := range S {
		s.eoff[i] = int32(len(s.ej))
		for _, l := range v.adj[s.view[i]] {
			j := s.stageOf[l.peer]
			if j < 0 {
				continue
			}
			// A boundary b joins j to i when j runs b-1 and i runs b.
			lo, hi := max(s.start[j]+1, s.start[i]), min(s.end[j], s.end[i]-1)
			if lo > hi {
				continue
			}
			c := q.rttScale * r.rtt(l.rtt)
			if c < s.zc[int(s.zone[j])*nz+int(s.zone[i])]+s.hx[j]+s.hx[i] {
				s.ej = append(s.ej, j)
				s.ec = append(s.ec, c)
			}
		}
	}
	s.eoff[S] = int32(len(s.ej))
}

// pairCost is the round-trip cost of a crossing from stage j to stage i.
func (s *scratch) pairCost(j, i int32) float64 {
	c := s.zc[int(s.zone[j])*s.zoneCnt+int(s.zone[i])] + s.hx[j] + s.hx[i]
	for e := s.eoff[i]; e < s.eoff[i+1]; e++ {
		if s.ej[e] == j {
			c = min(c, s.ec[e])
		}
	}
	return c
}

// working copies the scored costs into the DP's working arrays.
func (s *scratch) working() {
	S := len(s.view)
	s.wl, s.wv, s.wk, s.wt = grow(s.wl, S), grow(s.wv, S), grow(s.wk, S), grow(s.wt, S)
	copy(s.wl, s.layer)
	copy(s.wv, s.visit)
	copy(s.wk, s.link)
	copy(s.wt, s.last)
}

// perturb multiplies each node's costs by its own seeded factor in
// [1, 1+slack]. Every path's cost then grows by a factor in that range, so
// the cheapest perturbed path costs at most (1+slack) times the best one:
// one DP picks at random among the near-best paths, weighted towards the
// cheaper ones.
func (s *scratch) perturb(seed uint64, slack float64) {
	if slack <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(seed, perturbStream))
	for i := range s.wl {
		f := 1 + slack*rng.Float64()
		s.wl[i] *= f
		s.wv[i] *= f
		s.wk[i] *= f
		s.wt[i] *= f
	}
}

// dp finds the cheapest path over the working costs and leaves its stages
// in s.hopStage, last hop first, with the boundary where each was entered
// returned through s.pred. It returns the final stage, or -1.
//
// State (l, i): layers [0, l] are done and layer l ran on stage i. Staying
// on i costs its layer cost; switching from j to i at a boundary costs
// j's exit, the round trip, i's entry and visit. The cheapest switch into
// each region comes from the cheapest exit per region plus the region
// pair's estimate, so a boundary costs O(holders + regions²) plus the
// measured edges, not O(holders²).
func (s *scratch) dp(L int) int32 {
	S := int32(len(s.view))
	inf := math.Inf(1)
	// Stages bucketed by start layer.
	s.sOff = grow(s.sOff, L+2)
	clear(s.sOff)
	for i := range S {
		s.sOff[s.start[i]+1]++
	}
	for l := 1; l <= L+1; l++ {
		s.sOff[l] += s.sOff[l-1]
	}
	s.sIdx = grow(s.sIdx, int(S))
	s.tmpP = grow(s.tmpP, L+1) // cursor per start layer, reused below
	copy(s.tmpP, s.sOff[:L+1])
	for i := range S {
		st := s.start[i]
		s.sIdx[s.tmpP[st]] = i
		s.tmpP[st]++
	}
	s.off = grow(s.off, int(S))
	total := int32(0)
	for i := range S {
		s.off[i] = total
		total += s.end[i] - s.start[i]
	}
	s.pred = grow(s.pred, int(total))
	s.f = grow(s.f, int(S))
	for i := range s.f {
		s.f[i] = inf
	}
	nz := s.zoneCnt
	s.zmin, s.inZ = grow(s.zmin, nz), grow(s.inZ, nz)
	s.zarg, s.inArg = grow(s.zarg, nz), grow(s.inArg, nz)

	s.active = s.active[:0]
	for _, i := range s.sIdx[s.sOff[0]:s.sOff[1]] {
		s.f[i] = s.entry[i] + s.wv[i] + s.wl[i]
		s.pred[s.off[i]] = -2
		s.active = append(s.active, i)
	}
	for l := int32(1); l < int32(L); l++ {
		// Cheapest exit per region among the holders of layer l-1.
		for z := range nz {
			s.zmin[z], s.zarg[z] = inf, -1
		}
		for _, j := range s.active {
			x := s.f[j] + s.wk[j] + s.hx[j]
			z := s.zone[j]
			if x < s.zmin[z] || (x == s.zmin[z] && j < s.zarg[z]) {
				s.zmin[z], s.zarg[z] = x, j
			}
		}
		// Cheapest arrival into each region.
		for r := range nz {
			best, arg := inf, int32(-1)
			for q := range nz {
				if s.zarg[q] < 0 {
					continue
				}
				c := s.zmin[q] + s.zc[q*nz+r]
				if c < best || (c == best && s.zarg[q] < arg) {
					best, arg = c, s.zarg[q]
				}
			}
			s.inZ[r], s.inArg[r] = best, arg
		}
		// The holders of layer l.
		s.next = s.next[:0]
		for _, i := range s.active {
			if s.end[i] > l {
				s.next = append(s.next, i)
			}
		}
		s.next = append(s.next, s.sIdx[s.sOff[l]:s.sOff[l+1]]...)
		s.tmpF = grow(s.tmpF, len(s.next))
		s.tmpP = grow(s.tmpP, len(s.next))
		for k, i := range s.next {
			best, p := inf, int32(-3)
			if s.start[i] < l {
				best, p = s.f[i], -1
			}
			enter := s.wk[i] + s.wv[i]
			// If the cheapest arrival is i's own exit, no switch beats
			// staying (costs are non-negative), so it is skipped.
			z := s.zone[i]
			if a := s.inArg[z]; a >= 0 && a != i {
				if c := s.inZ[z] + enter + s.hx[i]; c < best {
					best, p = c, a
				}
			}
			for e := s.eoff[i]; e < s.eoff[i+1]; e++ {
				j := s.ej[e]
				if s.start[j] >= l || s.end[j] < l || s.f[j] == inf {
					continue
				}
				if c := s.f[j] + s.wk[j] + s.ec[e] + enter; c < best || (c == best && p >= 0 && j < p) {
					best, p = c, j
				}
			}
			s.tmpF[k], s.tmpP[k] = best+s.wl[i], p
		}
		for k, i := range s.next {
			s.f[i] = s.tmpF[k]
			s.pred[s.off[i]+l-s.start[i]] = s.tmpP[k]
		}
		s.active, s.next = s.next, s.active
	}
	best, arg := inf, int32(-1)
	for _, i := range s.active {
		if c := s.f[i] + s.wt[i] + s.entry[i]; c < best || (c == best && i < arg) {
			best, arg = c, i
		}
	}
	return arg
}

// trace walks the DP's predecessors back from the final stage and returns
// the hops in order, leaving their stages in s.hopStage.
func (s *scratch) trace(v *View, last int32, L int) []Hop {
	s.hopStage = s.hopStage[:0]
	var rev []Hop
	i, l, to := last, int32(L-1), int32(L)
	for {
		p := s.pred[s.off[i]+l-s.start[i]]
		if p == -1 {
			l--
			continue
		}
		rev = append(rev, Hop{Node: v.nodes[s.view[i]].ID, From: int(l), To: int(to)})
		s.hopStage = append(s.hopStage, i)
		if p < 0 {
			break
		}
		i, to, l = p, l, l-1
	}
	slices.Reverse(rev)
	slices.Reverse(s.hopStage)
	return rev
}

// finish prices the path in s.hopStage with the costs as scored (no
// perturbation or penalty), split by kind.
func (r *Router) finish(s *scratch, m *layers.LayerMap, v *View, q *reqInfo, hops []Hop) Path {
	p := Path{Hops: hops, Epoch: m.Epoch}
	var t [kinds]float64
	t[kindLocality] += s.entry[s.hopStage[0]] + s.entry[s.hopStage[len(s.hopStage)-1]]
	for h, i := range s.hopStage {
		vi := s.view[i]
		st := layers.Stage{Node: hops[h].Node, Range: layers.Range{Start: int(s.start[i]), End: int(s.end[i])}}
		r.estimate(&s.est, &v.nodes[vi], st, q)
		_, by, _ := r.score(&q.req, &s.est)
		n := float64(hops[h].To - hops[h].From)
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
		return Path{}, err
	}
	s.working()
	s.perturb(req.Seed, r.cfg.Slack)
	last := s.dp(m.Layers)
	if last < 0 {
		return Path{}, fmt.Errorf("%w: no chain over [0,%d)", ErrNoPath, m.Layers)
	}
	return r.finish(s, &m, v, &q, s.trace(v, last, m.Layers)), nil
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
		return nil, err
	}
	s.working()
	var out []Path
	for len(out) < k {
		last := s.dp(m.Layers)
		if last < 0 {
			break
		}
		p := r.finish(s, &m, v, &q, s.trace(v, last, m.Layers))
		if slices.ContainsFunc(out, p.Same) {
			break // the penalties could not push it anywhere new
		}
		out = append(out, p)
		charge := max(out[0].Cost, 1e-9)
		for _, i := range s.hopStage {
			s.wv[i] += charge
		}
	}
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
		return Path{}, err
	}
	s.hopStage = s.hopStage[:0]
	for _, h := range p.Hops {
		vi, ok := v.lookup(h.Node)
		i := int32(-1)
		if ok {
			i = s.stageOf[vi]
		}
		if i < 0 {
			return Path{}, fmt.Errorf("%w: hop %v: node is not eligible", ErrNoPath, h)
		}
		if int(s.start[i]) > h.From || int(s.end[i]) < h.To {
			return Path{}, fmt.Errorf("%w: hop %v: node serves [%d,%d)", ErrBadPath, h, s.start[i], s.end[i])
		}
		s.hopStage = append(s.hopStage, i)
	}
	return r.finish(s, &m, v, &q, slices.Clone(p.Hops)), nil
}
