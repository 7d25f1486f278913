package sim

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/stratanet/strata/node/stage/sched"
)

// query is one user request: a prompt iteration, then Output decode
// iterations, all on the route the prompt took.
type query struct {
	id        int
	input     int
	output    int
	arrival   float64
	route     []int32  // link indices, source → … → sink
	ranLayers []int16  // layers run on route[i]'s destination node
	hopEnd    []int16  // layer the hop hands off at (0: the node's end)
	resv      []int64  // KV reserved on route[i]'s destination (admission mode)
	resvGen   []uint32 // the destination's range generation when it admitted the session
	decodes   int
	prior     int // output tokens delivered before a replay
	retries   int
	cause     cause   // why the last attempt broke
	blame     int     // node the last attempt broke at (-1: none)
	busy      int     // busy answers seen (the entry's backoff count)
	busySince float64 // when the first busy answer came
	avoid     []string
	hard      []string // hops it can never fit, avoided for good
	// The prefix cache (prefix.go): gid names the request across its
	// replays; cold turns the cache off for it after a prefix miss; skip
	// is what this attempt resumed on its first hop; hopFrom is the layer
	// each hop of route starts at; hashes are the block hashes of its
	// token sequence computed so far (blockHashes).
	gid     int
	cold    bool
	skip    int
	hopFrom []int16
	hashes  []uint64
	// eresv is the KV the entry's admission queue reserved (entryq.go),
	// held until the request ends.
	eresv  []*kvResv
	ttft   float64
	done   bool
	failed bool
}

// iter is one iteration of a query in flight.
type iter struct {
	q         *query
	prompt    bool
	tokens    int // prompt: input length; decode: 1
	ctx       int // tokens before this iteration
	hop       int // index of the next link in q.route
	nextLayer int
	issued    float64 // when the coordinator sent it
	sentAt    float64 // when it left the previous node
	entry     int     // layer it entered the current node at
	stop      int     // layer it leaves the current node at
}

type node struct {
	NodeSpec
	queues [][]*iter // per layer, FIFO
	queued int
	cur    int // layer the node runs next (absolute)
	busy   bool
	recv   int // tokens received since the last first-layer batch
	kvUsed int64
	batch  []*iter
	batchL int
	kvPeak int64
	outs   []int32 // outbound link indices
	down   bool
	gen    uint32  // bumped when the node dies, so its pending batch is void
	wait   []*iter // prompts waiting for KV memory (admission mode)
	active int     // sessions holding KV here (admission mode)
	lat    float64 // EWMA of one layer's time, as a heartbeat reports it
	// [accFirst, accEnd) is the range new sessions are admitted to; the
	// node's span [First, End) also holds the layers a range change
	// released while sessions admitted before it (legacy of them) still
	// use them, until sched.Unload lets them go. rangeGen counts range
	// changes.
	accFirst, accEnd int
	legacy           int
	rangeGen         uint32
	held             int // layers loaded: the accepted ones and those still in use
	// pc is the prefix cache (prefix.go), its costs in KV units.
	pc sched.Cache[struct{}]
}

type link struct {
	LinkSpec
	alloc  float64 // bandwidth a transmission gets
	freeAt float64
}

// Window is the measurement window [Start, End) in seconds.
type Window struct{ Start, End float64 }

// Sim is one run: a cluster, a scheduler and a workload on a virtual clock.
type Sim struct {
	clock
	cluster Cluster
	nodes   []*node
	links   []*link
	srcOuts []int32
	sched   scheduler
	win     Window
	stats   stats
	nextID  int

	// onPrompt and onDone let the feeder react to completions; onLost
	// decides what a client does with a query a failure broke (nil: it
	// fails).
	onPrompt func(q *query)
	onDone   func(q *query)
	onLost   func(q *query)
	// onRange hears that a node's held layers changed (reassign's
	// released layers were closed).
	onRange func(ni int)

	// Admission mode: a prompt reserves (input + output) × layers of KV on
	// each hop, or waits in the node's bounded FIFO, as the stage
	// scheduler does; otherwise KV is only accounted (Helix's model).
	reserve      bool
	prefix       bool // stages keep finished sessions' KV (prefix.go)
	maxQueue     int
	queueTimeout float64 // s a prompt may wait for KV memory (0: forever)

	// net gives the link between two endpoints when links are made on
	// demand (swarms); nil: only the cluster's links exist.
	net     func(from, to int) LinkSpec
	linkIdx map[[2]int32]int32
	rng     *rand.Rand
}

// scheduler is how a replayed system routes: admit fixes what it can when
// a query starts, hop picks a next link when the route has no entry yet,
// observe sees a prompt leave a node, finish releases a query.
type scheduler interface {
	admit(s *Sim, q *query) bool
	hop(s *Sim, q *query, from int) (int32, bool)
	observe(s *Sim, it *iter, from int)
	finish(s *Sim, q *query)
}

// decodeObserver is a scheduler that also hears of every decode
// iteration the coordinator sends out (Helix's MaxFlow charges each to
// its route's round-robin loads).
type decodeObserver interface {
	decode(s *Sim, q *query)
}

func newSim(c Cluster, sch scheduler, w Window) (*Sim, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{cluster: c, sched: sch, win: w}
	s.stats.busy = make([]float64, len(c.Nodes))
	for _, ns := range c.Nodes {
		n := &node{NodeSpec: ns, queues: make([][]*iter, ns.End-ns.First), cur: ns.First,
			accFirst: ns.First, accEnd: ns.End, held: ns.End - ns.First}
		s.nodes = append(s.nodes, n)
	}
	for i, ls := range c.Links {
		l := &link{LinkSpec: ls, alloc: ls.Bandwidth}
		s.links = append(s.links, l)
		if ls.From == Source {
			s.srcOuts = append(s.srcOuts, int32(i))
		} else {
			s.nodes[ls.From].outs = append(s.nodes[ls.From].outs, int32(i))
		}
	}
	return s, nil
}

func (s *Sim) outs(from int) []int32 {
	if from == Source {
		return s.srcOuts
	}
	return s.nodes[from].outs
}

// issue starts a query now.
func (s *Sim) issue(input, output int, arrival float64) *query {
	q := &query{id: s.nextID, input: input, output: output, arrival: arrival}
	s.nextID++
	s.stats.issued++
	if !s.sched.admit(s, q) {
		q.failed = true
		s.stats.failed++
		s.stats.fail(FailNoRoute)
		return q
	}
	it := &iter{q: q, prompt: true, tokens: input, issued: s.now}
	s.depart(it, Source)
	return q
}

// depart sends an iteration out of from (Source or a node) on its route.
func (s *Sim) depart(it *iter, from int) {
	q := it.q
	var li int32
	if it.hop < len(q.route) {
		li = q.route[it.hop]
	} else {
		var ok bool
		li, ok = s.sched.hop(s, q, from)
		if !ok {
			s.fail(q, causeNoHop, -1)
			return
		}
		q.route = append(q.route, li)
		q.ranLayers = append(q.ranLayers, 0)
	}
	it.hop++
	l := s.links[li]
	size := float64(it.tokens) * s.cluster.Model.TokenBytes
	if l.From != Source && l.To != Sink {
		size += float64(it.tokens) * s.cluster.Model.ActivationBytes
	}
	start := math.Max(s.now, l.freeAt)
	dur := size / l.alloc
	l.freeAt = start + dur
	it.sentAt = s.now
	s.stats.bytesSent += size
	lat := l.Latency
	if l.Jitter > 0 && s.rng != nil {
		lat += l.Jitter * s.rng.Float64()
	}
	s.schedule(&event{at: start + dur + lat, kind: evDeliver, node: int32(l.To), it: it})
}

// fail ends an attempt that c broke: its client replays it (onLost) or
// it counts as failed.
func (s *Sim) fail(q *query, c cause, at int) {
	if q.failed || q.done {
		return
	}
	q.failed = true
	q.cause, q.blame = c, at
	s.stats.breaks[c]++
	s.sched.finish(s, q)
	s.releaseKV(q)
	if s.onLost != nil {
		s.onLost(q)
		return
	}
	s.stats.failed++
	s.stats.fail(c.String())
}

// linkTo returns the link from → to, made on demand where the simulation
// has a network model.
func (s *Sim) linkTo(from, to int) (int32, bool) {
	k := [2]int32{int32(from), int32(to)}
	if li, ok := s.linkIdx[k]; ok {
		return li, true
	}
	if s.net == nil {
		return -1, false
	}
	if s.linkIdx == nil {
		s.linkIdx = map[[2]int32]int32{}
	}
	ls := s.net(from, to)
	ls.From, ls.To = from, to
	li := int32(len(s.links))
	s.links = append(s.links, &link{LinkSpec: ls, alloc: ls.Bandwidth})
	s.linkIdx[k] = li
	return li, true
}

// deliver hands an iteration to a node's queue or to the coordinator.
func (s *Sim) deliver(it *iter, to int) {
	if to == Sink {
		s.receive(it)
		return
	}
	n := s.nodes[to]
	q := it.q
	if q.failed {
		return
	}
	if n.down {
		s.fail(q, causeDied, to)
		return
	}
	l := max(it.nextLayer, n.First)
	stop := n.End
	if h := it.hop - 1; h < len(q.hopEnd) && q.hopEnd[h] > 0 {
		stop = int(q.hopEnd[h])
	}
	if it.nextLayer < n.First || stop > n.End ||
		it.prompt && (it.nextLayer < n.accFirst || stop > n.accEnd) {
		// Routed on a map the node has since left: the hop is gone (a
		// new session is refused on layers the node released).
		s.fail(q, causeStale, to)
		return
	}
	if l >= stop {
		// Nothing left to run here (overlapping ranges): pass it on.
		s.depart(it, to)
		return
	}
	it.entry, it.stop = l, stop
	if s.reserve && it.prompt {
		need := int64(q.input+q.output) * int64(stop-l)
		switch sched.Admit(need, n.kvUsed, n.KVCapacity, len(n.wait), s.maxQueue) {
		case sched.NoKV:
			s.stats.rejected++
			s.fail(q, causeNoKV, to)
			return
		case sched.Busy:
			s.stats.rejected++
			s.fail(q, causeQueueFull, to)
			return
		case sched.Queue:
			n.wait = append(n.wait, it)
			if s.queueTimeout > 0 {
				gen := n.gen
				s.schedule(&event{at: s.now + s.queueTimeout, kind: evCallback, fn: func() { s.expireWait(to, it, gen) }})
			}
			return
		}
		if !s.resume(to, it) {
			s.fail(q, causePrefixMiss, to)
			return
		}
		s.admitAt(n, it, need)
	}
	s.enqueue(to, it, l)
}

func (s *Sim) admitAt(n *node, it *iter, need int64) {
	q := it.q
	for len(q.resv) < len(q.route) {
		q.resv = append(q.resv, 0)
	}
	for len(q.resvGen) < len(q.route) {
		q.resvGen = append(q.resvGen, 0)
	}
	q.resv[it.hop-1] = need
	q.resvGen[it.hop-1] = n.rangeGen
	n.kvUsed += need
	n.kvPeak = max(n.kvPeak, n.kvUsed)
	n.active++
	if s.prefix {
		s.trimCache(n) // the cache lives in what sessions leave
	}
}

func (s *Sim) enqueue(ni int, it *iter, l int) {
	n := s.nodes[ni]
	n.queues[l-n.First] = append(n.queues[l-n.First], it)
	n.queued++
	n.recv += it.tokens
	if !n.busy {
		s.startBatch(ni)
	}
}

// admitWaiting opens waiting sessions, first come first served, while
// memory allows.
func (s *Sim) admitWaiting(ni int) {
	n := s.nodes[ni]
	for len(n.wait) > 0 {
		it := n.wait[0]
		if it.q.failed {
			n.wait = n.wait[1:]
			continue
		}
		need := int64(it.q.input+it.q.output) * int64(it.stop-it.entry)
		if !sched.Fits(need, n.kvUsed, n.KVCapacity) {
			return
		}
		n.wait = n.wait[1:]
		if !s.resume(ni, it) {
			s.fail(it.q, causePrefixMiss, ni)
			continue
		}
		s.admitAt(n, it, need)
		s.enqueue(ni, it, it.entry)
	}
}

// expireWait rejects a prompt still waiting for KV memory after the
// queue timeout, as the stage scheduler does.
func (s *Sim) expireWait(ni int, it *iter, gen uint32) {
	n := s.nodes[ni]
	if n.gen != gen {
		return
	}
	for i, w := range n.wait {
		if w == it {
			n.wait = append(n.wait[:i], n.wait[i+1:]...)
			s.stats.rejected++
			s.fail(it.q, causeQueueTimeout, ni)
			return
		}
	}
}

// startBatch picks the next layer, cyclically from the node's current one,
// whose queue is non-empty, and runs one batch of it.
func (s *Sim) startBatch(ni int) {
	n := s.nodes[ni]
	if n.queued == 0 {
		n.busy = false
		return
	}
	if n.cur < n.First || n.cur >= n.End {
		n.cur = n.First // the span shrank under a batch of a released layer
	}
	L := n.End - n.First
	li := n.cur - n.First
	for k := 0; k < L && len(n.queues[li]) == 0; k++ {
		li = (li + 1) % L
	}
	q := n.queues[li]
	var pReq, pTok, dTok, dCtx int
	batch := n.batch[:0]
	rest := q[:0]
	for _, it := range q {
		take := false
		if it.prompt {
			if pReq+1 <= n.Caps.PromptMaxRequests && pTok+it.tokens <= n.Caps.PromptMaxTokens {
				pReq++
				pTok += it.tokens
				take = true
			}
		} else if dTok+1 <= n.Caps.DecodeMaxTokens && dCtx+it.ctx <= n.Caps.DecodeMaxContext {
			dTok++
			dCtx += it.ctx
			take = true
		}
		if take {
			batch = append(batch, it)
		} else {
			rest = append(rest, it)
		}
	}
	if len(batch) == 0 {
		// A single request above the caps would stall the node forever;
		// Helix asserts there. Run it alone and count it.
		batch = append(batch, rest[0])
		if rest[0].prompt {
			pTok = rest[0].tokens
		} else {
			dTok = 1
		}
		copy(rest, rest[1:])
		rest = rest[:len(rest)-1]
		s.stats.overCap++
	}
	for i := len(rest); i < len(q); i++ {
		q[i] = nil
	}
	n.queues[li] = rest
	n.queued -= len(batch)
	n.batch = batch
	n.batchL = n.First + li
	t := n.Timer.LayerTime(pTok, dTok)
	if n.batchL == n.First {
		// Helix: CPU concat and host-to-GPU copy of what arrived.
		a := float64(n.recv) * s.cluster.Model.ActivationBytes
		t += a/4e9 + a/5e9
		n.recv = 0
	}
	n.busy = true
	// The figure a node's heartbeat reports (sched.Latency): every
	// batch, prefills included.
	n.lat = sched.Latency(n.lat, t)
	s.stats.batches++
	s.stats.busy[ni] += t
	s.schedule(&event{at: s.now + t, kind: evBatchDone, node: int32(ni), gen: n.gen})
}

func (s *Sim) batchDone(ni int, gen uint32) {
	n := s.nodes[ni]
	if gen != n.gen {
		return // the node died while this batch ran
	}
	l := n.batchL
	for _, it := range n.batch {
		if it.q.failed {
			continue
		}
		if !s.reserve {
			if it.prompt {
				n.kvUsed += int64(it.tokens)
			} else {
				n.kvUsed++
			}
		}
		it.nextLayer = l + 1
		if l+1 == it.stop {
			if it.prompt {
				it.q.ranLayers[it.hop-1] = int16(it.stop - it.entry)
				s.sched.observe(s, it, ni)
			}
			s.depart(it, ni)
		} else {
			n.queues[l+1-n.First] = append(n.queues[l+1-n.First], it)
			n.queued++
		}
	}
	n.kvPeak = max(n.kvPeak, n.kvUsed)
	if !s.reserve && n.kvUsed > n.KVCapacity {
		s.stats.kvOverflow++
	}
	for i := range n.batch {
		n.batch[i] = nil
	}
	n.batch = n.batch[:0]
	n.cur = l + 1
	if n.cur == n.End {
		n.cur = n.First
	}
	s.startBatch(ni)
}

// receive handles an iteration back at the coordinator.
func (s *Sim) receive(it *iter) {
	q := it.q
	if q.failed {
		return
	}
	in := s.now >= s.win.Start && s.now < s.win.End
	if it.prompt {
		if q.skip > 0 {
			s.stats.prefixResumed++
		}
		q.ttft = s.now - q.arrival
		// A replay's prefill is not a first token when tokens were
		// already delivered before the failure.
		if in && q.prior == 0 {
			s.stats.ttft = append(s.stats.ttft, q.ttft)
		}
		if s.onPrompt != nil {
			s.onPrompt(q)
		}
	} else {
		q.decodes++
		if in {
			s.stats.decodeTokens++
			s.stats.tpot = append(s.stats.tpot, s.now-it.issued)
		}
		s.stats.series.add(s.now, 1)
	}
	if q.decodes >= q.output {
		s.complete(q)
		return
	}
	it.prompt = false
	it.tokens = 1
	it.ctx = q.input + q.decodes
	it.hop = 0
	it.nextLayer = 0
	it.issued = s.now
	if d, ok := s.sched.(decodeObserver); ok {
		d.decode(s, q)
	}
	s.depart(it, Source)
}

func (s *Sim) complete(q *query) {
	q.done = true
	if s.now >= s.win.Start && s.now < s.win.End {
		s.stats.completed++
		s.stats.goodTokens += int64(q.prior + q.output)
	}
	s.sched.finish(s, q)
	s.releaseKV(q)
	if s.onDone != nil {
		s.onDone(q)
	}
}

// releaseKV frees what the query holds on every node of its route: its
// context on every layer it ran there.
func (s *Sim) releaseKV(q *query) {
	if s.reserve {
		for i, r := range q.resv {
			if r == 0 {
				continue
			}
			q.resv[i] = 0
			to := s.links[q.route[i]].To
			n := s.nodes[to]
			if n.down {
				continue
			}
			n.kvUsed = max(n.kvUsed-r, 0)
			n.active = max(n.active-1, 0)
			if s.prefix {
				s.cacheSession(q, i, n)
				s.trimCache(n)
			}
			if n.legacy > 0 && i < len(q.resvGen) && q.resvGen[i] != n.rangeGen {
				s.released(to)
			}
			s.admitWaiting(to)
		}
		return
	}
	held := int64(q.input + q.decodes)
	for i, li := range q.route {
		to := s.links[li].To
		if to == Sink || q.ranLayers[i] == 0 {
			continue
		}
		s.nodes[to].kvUsed -= held * int64(q.ranLayers[i])
		if s.nodes[to].kvUsed < 0 {
			s.nodes[to].kvUsed = 0
		}
	}
}

// run fires events until the clock passes until or nothing is left.
func (s *Sim) run(until float64) {
	for {
		if len(s.events) == 0 || s.events[0].at > until {
			return
		}
		e, _ := s.next()
		switch e.kind {
		case evArrive:
			s.issue(e.q.input, e.q.output, e.at)
		case evDeliver:
			s.deliver(e.it, int(e.node))
		case evBatchDone:
			s.batchDone(int(e.node), e.gen)
		case evFeed, evCallback:
			e.fn()
		}
	}
}

// stats are what a run measures.
type stats struct {
	issued, completed, failed int
	retried, rejected         int
	breaks                    [nCauses]int   // attempts broken, by cause
	failedBy                  map[string]int // requests failed for good, by cause
	failedWithPath            int            // of those, failed while every layer was served
	decodeTokens              int64          // decode iterations returned in the window
	goodTokens                int64          // output tokens of queries completed in the window
	ttft, tpot                []float64
	batches                   int64
	overCap, kvOverflow       int
	// The prefix cache: hops that resumed, positions they skipped, later
	// hops that missed, entries evicted for memory.
	prefixHits, prefixMisses int
	prefixResumed            int // prefills that came back resumed on every hop
	prefixReused             int64
	prefixEvicted            int
	bytesSent                float64
	busy                     []float64
	series                   series
}

func (st *stats) fail(why string) {
	if st.failedBy == nil {
		st.failedBy = map[string]int{}
	}
	st.failedBy[why]++
}

// series bins decode tokens per fixed interval for the throughput plot.
type series struct {
	bin    float64
	counts []float64
}

func (sr *series) add(t, v float64) {
	if sr.bin <= 0 {
		return
	}
	i := int(t / sr.bin)
	for len(sr.counts) <= i {
		sr.counts = append(sr.counts, 0)
	}
	sr.counts[i] += v
}

// percentile follows Helix's analysis: sort, take index ⌊n·p⌋.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	i := min(int(float64(len(c))*p), len(c)-1)
	return c[i]
}
