package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/stage/sched"
	"github.com/stratanet/strata/node/trust"
	"github.com/stratanet/strata/routing"
)

// The scheduler is the one goroutine that owns this node's layers, KV
// memory and batch slots. Everything else talks to it through its inbox:
// steps and closes from the stage service, loads and releases from
// warmup, and queries. It admits sessions by KV memory (capacity ×
// the KV bytes of the hop's layers), keeps a bounded FIFO of sessions
// waiting for memory, and runs every step that is ready as one batch,
// layer by layer: at layer l the steps whose hop covers l go to the
// engine in one ForwardBatch call, whatever session and hop range they
// belong to. Sends go out on other goroutines (the outbox), so a slow
// peer never stalls the loop.

// outbox delivers what the scheduler produces. Its methods must not block.
type outbox interface {
	forward(to peer.ID, s *Step)
	token(to peer.ID, t *Token)
	fail(to peer.ID, e *ErrorMsg)
	receipt(to peer.ID, r *ReceiptMsg)
}

type schedConfig struct {
	self         peer.ID
	model        ModelInfo
	hash         uint64
	memBudget    int64 // bytes for weights and KV cache
	maxBatch     int   // steps per batch
	maxQueue     int   // sessions waiting for KV memory
	idleTimeout  time.Duration
	queueTimeout time.Duration
	clock        clockwork.Clock // expiry and session ages; nil: the wall clock
	prefixCache  bool            // keep finished sessions' KV for reuse (prefixcache.go)
	log          *zap.Logger
	// sign signs this node's receipts (verify.go); nil: audits and check
	// sessions get no answer.
	sign func(*consensus.Receipt) error
	// signFrames: sign the hidden states this hop sends and require
	// signed ones (sigframe.go); the initial value of scheduler.signFrames.
	signFrames bool
	// wireLossy: every frame of hidden states leaves as f16 or q8, which
	// are not signed (a node on WireAuto signs the frames that go as
	// float32).
	wireLossy bool
	// badFrame counts a refused frame against its sender (nil: none).
	badFrame func(peer.ID)
	// fault corrupts outputs: the test-only fault injector (nil in
	// release builds and by default).
	fault outputFault
	// tolerant: this node's engine is not bit-reproducible, so its
	// last-layer receipts always carry their logits and its receipts name
	// its engine (a tolerance check). The last hop of a session (not of a
	// check session unless asked) carries its logits whatever its engine:
	// a tolerance check of a hop before it compares them (midAudit).
	tolerant bool
	engine   string // the engine's label, which tolerance receipts name
	// tok is the model's tokenizer, which a last hop's grammar reads the
	// tokens' bytes from (nil: constrained sessions are refused).
	tok *engine.Tokenizer
	// batchDone hears of each engine batch: its wall time, the layers it
	// ran and its tokens (the adaptive upload limit, node/weights); nil: none.
	batchDone func(elapsed time.Duration, layers, tokens int)
}

// inboxMsg is what the scheduler's inbox carries: *stepIn, closeIn,
// loadIn, releaseIn or statusReq. The interface is sealed, so the loop's
// switch is over every kind there is.
type inboxMsg interface{ inbox() }

func (*stepIn) inbox()   {}
func (closeIn) inbox()   {}
func (loadIn) inbox()    {}
func (releaseIn) inbox() {}
func (statusReq) inbox() {}
func (auditIn) inbox()   {}

// upAuditIn's inbox() is in sigframe.go.

// Inbox messages.
type (
	stepIn struct {
		from peer.ID
		m    *Step
		at   time.Time
	}
	closeIn struct {
		from peer.ID
		sid  SessionID
	}
	// loadIn hands freshly opened stages to the loop.
	loadIn struct {
		spans []*span
		done  chan struct{}
	}
	// releaseIn marks every layer outside keep for release once idle.
	releaseIn struct {
		keep layers.Range
		done chan struct{}
	}
	// statusReq asks for the loop's status once everything submitted
	// before it is handled.
	statusReq struct{ reply chan *schedStatus }
	// auditIn asks for a session's receipt.
	auditIn struct {
		from peer.ID
		m    *Audit
	}
)

type hopKey struct {
	sid  SessionID
	from int
}

// hopSession is one session's state on this hop.
type hopSession struct {
	key    hopKey
	entry  peer.ID
	to     int
	rest   []Hop            // the hops after this one
	segs   []seg            // the stages its layers run on, in order
	sess   []engine.Session // one per seg
	cap    int
	pos    int
	bytes  int64
	sp     engine.SamplingParams
	hist   []int32 // input tokens: the last hop samples with them, every hop caches by them
	last   time.Time
	chain  trust.Chains // what this hop took and gave, for receipts (trust.Chains)
	check  bool         // a check session
	logits bool         // its receipt carries the last logits row's summary (Step.Logits)
	// lp: the last hop returns each token's log-probabilities with its
	// top alternatives (Open.LogProbs, Open.TopLogProbs); the work is
	// done only for sessions that ask.
	lp    bool
	topLP int
	// up is the receipt the upstream hop signed over its last frame
	// (sigframe.go); zero until a signed frame arrives.
	up consensus.Receipt
	// gram constrains a last hop's sampling (Open.Grammar): it has
	// consumed the tokens at positions gramFrom..gramFed.
	gram              *grammar.Constraint
	gramFrom, gramFed int
}

// schedStatus is the loop's published summary, for heartbeats, routing
// of the node's own entry role, and tests.
type schedStatus struct {
	Held []bool // layers loaded and not being released
	// Spans are the ranges of the stages that hold the held layers.
	Spans        []layers.Range
	Loaded       int // layers loaded, releasing ones included
	Sessions     int
	Queue        int
	KVBudget     int64 // bytes left for KV after weights
	KVUsed       int64
	FreeKV       int64 // tokens over the held layers; -1 when none held
	LayerLatency time.Duration
	Steps        uint64
	Batches      uint64
	BatchedSteps uint64 // steps that ran in a batch of two or more
	Rejected     uint64 // steps answered with an error
	Waited       uint64 // sessions that waited for KV memory
	// The prefix cache: sessions resumed from it, positions they did not
	// recompute, its size, and its summary for heartbeats (nil: empty).
	PrefixHits, PrefixTokens uint64
	PrefixEntries            int
	PrefixBytes              int64
	PrefixEvictions          uint64
	Prefixes                 *routing.PrefixSummary
}

type scheduler struct {
	cfg    schedConfig
	out    outbox
	in     chan inboxMsg
	status atomic.Pointer[schedStatus]
	done   chan struct{}
	// signFrames: see schedConfig.signFrames (atomic: benchmarks switch
	// it between rounds).
	signFrames atomic.Bool

	// Owned by the loop.
	stages   *stageTable
	sessions map[hopKey]*hopSession
	// adm admits sessions by KV memory and holds those waiting for it
	// (sched.Admission: the rules, which the simulator runs too).
	adm      sched.Admission[*stepIn]
	deferred []*stepIn
	ewma     float64 // seconds per layer of a batch, prefills included
	steps    uint64
	batches  uint64
	batched  uint64
	rejected uint64
	cache    *prefixCache // nil: no prefix cache
}

func newScheduler(cfg schedConfig, out outbox) *scheduler {
	if cfg.maxBatch <= 0 {
		cfg.maxBatch = 64
	}
	if cfg.maxQueue < 0 {
		cfg.maxQueue = 0
	}
	if cfg.clock == nil {
		cfg.clock = clockwork.NewRealClock()
	}
	s := &scheduler{cfg: cfg, out: out, in: make(chan inboxMsg, 1024), done: make(chan struct{}),
		stages: newStageTable(cfg.model.Layers, cfg.log), sessions: map[hopKey]*hopSession{},
		adm: sched.Admission[*stepIn]{MaxQueue: cfg.maxQueue}}
	if cfg.prefixCache {
		s.cache = &prefixCache{}
	}
	s.signFrames.Store(cfg.signFrames)
	s.publish()
	return s
}

// submit hands a message to the loop, waiting while the inbox is full.
func (s *scheduler) submit(ctx context.Context, m inboxMsg) error {
	select {
	case s.in <- m:
		return nil
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sync returns the loop's status as of now: everything submitted before
// the call has been handled, and the status it returns is published.
func (s *scheduler) sync(ctx context.Context) (*schedStatus, error) {
	r := statusReq{reply: make(chan *schedStatus, 1)}
	if err := s.submit(ctx, r); err != nil {
		return nil, err
	}
	select {
	case st := <-r.reply:
		return st, nil
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *scheduler) run(ctx context.Context) {
	defer s.shutdown()
	tick := s.cfg.clock.NewTicker(max(s.cfg.idleTimeout/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		ready := s.deferred
		s.deferred = nil
		if len(ready) == 0 {
			select {
			case <-ctx.Done():
				return
			case m := <-s.in:
				s.handle(m, &ready)
			case <-tick.Chan():
				s.expire(s.cfg.clock.Now())
			}
		}
		// Whatever else has arrived joins this batch.
	drain:
		for len(ready) < s.cfg.maxBatch {
			select {
			case m := <-s.in:
				s.handle(m, &ready)
			default:
				break drain
			}
		}
		s.admitWaiting(&ready)
		if len(ready) > 0 {
			s.execute(ctx, ready)
		}
		s.publish()
	}
}

func (s *scheduler) shutdown() {
	close(s.done)
	if s.cache != nil {
		s.cache.close()
	}
	for _, hs := range s.sessions {
		for _, es := range hs.sess {
			es.Close()
		}
	}
	s.sessions = nil
	s.stages.close()
}

func (s *scheduler) handle(m inboxMsg, ready *[]*stepIn) {
	switch m := m.(type) {
	case *stepIn:
		s.onStep(m, ready)
	case closeIn:
		s.onClose(m, ready)
	case loadIn:
		for _, sp := range m.spans {
			if s.stages.keepHeld(sp) {
				continue
			}
			// A range stage takes its layers over from what held them.
			// Cached prefixes over those layers are of the old stages.
			if s.cache != nil {
				s.cache.dropLayers(func(l int) bool { return l >= sp.lo && l < sp.hi })
			}
			s.stages.take(sp)
		}
		// Published before the warmer hears it is done: it announces
		// the node's status next, from this.
		s.publish()
		close(m.done)
	case releaseIn:
		s.stages.mark(m.keep)
		if s.cache != nil {
			s.cache.dropLayers(s.stages.releasing)
		}
		s.stages.freeReleased()
		s.publish()
		close(m.done)
	case statusReq:
		s.publish()
		m.reply <- s.status.Load()
	case auditIn:
		s.onAudit(m)
	case upAuditIn:
		s.onUpAudit(m)
	}
}

func (s *scheduler) reject(in *stepIn, code ErrorCode, at peer.ID, format string, args ...any) {
	s.rejected++
	to := in.m.Entry
	if to == "" {
		to = in.from
	}
	s.out.fail(to, &ErrorMsg{Session: in.m.Session, Code: code, Peer: at, Text: fmt.Sprintf(format, args...)})
}

// room is the memory for KV: what the weights leave.
func (s *scheduler) room() int64 { return s.cfg.memBudget - s.stages.weightBytes() }

func (s *scheduler) freeBytes() int64 { return s.adm.Free(s.room()) }

func (s *scheduler) onStep(in *stepIn, ready *[]*stepIn) {
	m := in.m
	h := m.Hops[0]
	key := hopKey{m.Session, h.From}
	if m.Open == nil {
		hs := s.sessions[key]
		switch {
		case hs == nil:
			if s.adm.Any(func(w *stepIn) bool { return w.m.Session == m.Session && w.m.Hops[0].From == h.From }) {
				s.reject(in, CodeBadFrame, "", "step for session %s before it was admitted", m.Session)
				return
			}
			s.reject(in, CodeUnknownSession, "", "no session %s at layer %d", m.Session, h.From)
		case hs.entry != m.Entry || hs.to != h.To || !sameHops(hs.rest, m.Hops[1:]):
			s.reject(in, CodeBadFrame, "", "session %s: step off its path", m.Session)
		case m.Pos != hs.pos:
			s.reject(in, CodeBadFrame, "", "session %s: step at position %d, session holds %d", m.Session, m.Pos, hs.pos)
		case m.Pos+len(m.Tokens) > hs.cap:
			s.reject(in, CodeBadFrame, "", "session %s: %d + %d positions beyond its capacity %d", m.Session, m.Pos, len(m.Tokens), hs.cap)
		default:
			hs.last = in.at
			*ready = append(*ready, in)
		}
		return
	}
	if _, dup := s.sessions[key]; dup {
		s.reject(in, CodeDuplicate, "", "session %s is already open here", m.Session)
		return
	}
	if m.Open.Model != s.cfg.hash {
		s.reject(in, CodeWrongModel, "", "step routed for another model")
		return
	}
	if m.Open.MaxTokens > s.cfg.model.Context || m.Pos+len(m.Tokens) > m.Open.MaxTokens {
		s.reject(in, CodeBadFrame, "", "capacity %d for %d + %d positions (context %d)", m.Open.MaxTokens, m.Pos, len(m.Tokens), s.cfg.model.Context)
		return
	}
	if m.Pos != 0 {
		s.reject(in, CodeBadFrame, "", "a session opens at position 0, not %d", m.Pos)
		return
	}
	need, ok := s.stages.need(h, m.Open.MaxTokens)
	if !ok {
		s.reject(in, CodeNotServing, "", "layers [%d, %d) are not served here", h.From, h.To)
		return
	}
	switch s.adm.Offer(in, need, s.room(), in.at) {
	case sched.NoKV:
		s.reject(in, CodeNoKV, "", "session of %d positions needs %d bytes of KV cache, more than this node has", m.Open.MaxTokens, need)
	case sched.Busy:
		s.reject(in, CodeBusy, "", "admission queue full (%d waiting)", s.adm.Waiting())
	case sched.Open:
		if s.open(in, need) {
			*ready = append(*ready, in)
		}
	}
}

// open creates the session's KV caches; need was checked against memory.
func (s *scheduler) open(in *stepIn, need int64) bool {
	m := in.m
	h := m.Hops[0]
	hs := &hopSession{key: hopKey{m.Session, h.From}, entry: m.Entry, to: h.To, rest: append([]Hop(nil), m.Hops[1:]...),
		cap: m.Open.MaxTokens, bytes: need, sp: m.Open.Sampling, last: in.at, chain: trust.NewChains(), check: m.Check,
		logits: !m.Check || m.Logits || s.cfg.tolerant, lp: m.Open.LogProbs, topLP: m.Open.TopLogProbs}
	if m.Open.Grammar != nil && h.To == s.cfg.model.Layers && !m.Check {
		c, code, err := openConstraint(s.cfg.tok, m.Open)
		if err != nil {
			s.reject(in, code, "", "%v", err)
			return false
		}
		hs.gram, hs.gramFrom, hs.gramFed = c, m.Open.GrammarFrom, m.Open.GrammarFrom
	}
	var r resume
	if s.cache != nil && !m.Open.Cold {
		r = resumePoint(s.cache, s.sessions, h, m.Tokens, m.Skip)
		hs.pos, hs.chain = r.n, r.chain
	}
	if h.From > 0 && hs.pos != m.Skip {
		s.reject(in, CodePrefixMiss, "", "session %s resumed %d positions this hop does not hold", m.Session, m.Skip)
		return false
	}
	var err error
	if hs.segs, err = s.stages.segs(h.From, h.To); err != nil {
		s.reject(in, CodeInternal, "", "open session: %v", err)
		return false
	}
	// A resumed source holds one session per layer (the pure-Go engine's
	// stages, the only ones that resume a prefix).
	src, srcFrom := r.src, r.from
	if hs.pos > 0 && len(hs.segs) != h.To-h.From {
		s.unopen(hs)
		s.reject(in, CodeInternal, "", "open session: %v", fmt.Errorf("%w: a range stage cannot resume a prefix", engine.ErrSession))
		return false
	}
	for _, g := range hs.segs {
		var es engine.Session
		var err error
		if ps, ok := g.st.(engine.PrefixStage); ok && hs.pos > 0 {
			es, err = ps.NewSessionFrom(src[g.lo-srcFrom], hs.pos, hs.cap)
		} else if hs.pos > 0 {
			err = fmt.Errorf("%w: the stage cannot resume a prefix", engine.ErrSession)
		} else {
			es, err = g.st.NewSession(hs.cap)
		}
		if err != nil {
			s.unopen(hs)
			s.reject(in, CodeInternal, "", "open session at layers [%d, %d): %v", g.lo, g.hi, err)
			return false
		}
		hs.sess = append(hs.sess, es)
	}
	s.sessions[hs.key] = hs
	s.adm.Reserve(need)
	if hs.pos > 0 {
		s.cache.c.Resumed(hs.pos)
		hs.hist = append(hs.hist, m.Tokens[:hs.pos]...)
	}
	if s.cache != nil {
		s.cache.trim(s.freeBytes()) // the cache lives in what sessions leave
	}
	return true
}

// unopen undoes a failed open: its sessions and its hold on the stages.
func (s *scheduler) unopen(hs *hopSession) {
	for _, e := range hs.sess {
		e.Close()
	}
	for _, g := range hs.segs {
		s.stages.unref(g.sp)
	}
	hs.sess, hs.segs = nil, nil
}

// resume is where a session opening on a hop starts: n positions copied
// from src (one session per layer from layer from), with the receipt
// chains as a cold run's stand there. n == 0: computed from the start.
type resume struct {
	n     int
	src   []engine.Session
	from  int
	chain trust.Chains
}

// resumePoint decides where a session over hop h opening with tokens
// resumes (sched.Resume): the first hop from its longest match, in the
// prefix cache or in a live session over the same layers (leaving one
// position to compute); a later hop exactly where the first hop resumed
// (skip), which it must hold too, or not at all (the caller refuses the
// step: its hidden states start at skip). A live session counts as
// cached: the previous turn's, whose close may reach this hop after the
// next turn's first step, or another conversation's with the same
// opening. It reads cache and live and changes nothing but the cache's
// LRU clock.
func resumePoint(cache *prefixCache, live map[hopKey]*hopSession, h Hop, tokens []int32, skip int) resume {
	first := h.From == 0
	limit := sched.Limit(first, len(tokens), skip, prefixBlock)
	type source struct {
		sess  []engine.Session
		marks []trust.Mark // the source's receipt chains' states (trust.Chains)
	}
	var srcs []source
	var ms []sched.Match
	if e, n := cache.lookup(h.From, h.To, tokens, limit); e != nil {
		srcs = append(srcs, source{e.sess, e.marks})
		ms = append(ms, sched.Match{Blocks: n, Chains: len(e.marks)})
	}
	for _, o := range live {
		if o.key.from != h.From || o.to != h.To { // the same range only, as lookup
			continue
		}
		srcs = append(srcs, source{o.sess, o.chain.Marks()})
		ms = append(ms, sched.Match{Blocks: sharedBlocks(o.hist, tokens, limit*prefixBlock) / prefixBlock, Chains: len(o.chain.Marks())})
	}
	i, blocks, _ := sched.Resume(first, limit, skip/prefixBlock, ms)
	if i < 0 {
		return resume{chain: trust.NewChains()}
	}
	// The receipt chains go on from the source's, as a cold run's.
	n := blocks * prefixBlock
	c, ok := trust.ChainsAt(srcs[i].marks, n)
	if !ok {
		return resume{chain: trust.NewChains()}
	}
	return resume{n: n, src: srcs[i].sess, from: h.From, chain: c}
}

// admitWaiting opens waiting sessions, first come first served, while
// memory allows.
func (s *scheduler) admitWaiting(ready *[]*stepIn) {
	for {
		w, ok := s.adm.Head()
		if !ok {
			return
		}
		in := w.V
		need, ok := s.stages.need(in.m.Hops[0], in.m.Open.MaxTokens)
		if !ok {
			s.adm.Pop()
			s.reject(in, CodeNotServing, "", "layers [%d, %d) were released", in.m.Hops[0].From, in.m.Hops[0].To)
			continue
		}
		if !s.adm.Fits(need, s.room()) {
			return
		}
		s.adm.Pop()
		if s.open(in, need) {
			*ready = append(*ready, in)
		}
	}
}

func (s *scheduler) onClose(c closeIn, ready *[]*stepIn) {
	for k, hs := range s.sessions {
		if k.sid == c.sid && hs.entry == c.from {
			s.drop(hs, true)
		}
	}
	s.adm.Remove(func(w *stepIn) bool { return w.m.Session == c.sid && w.m.Entry == c.from })
	kr := (*ready)[:0]
	for _, w := range *ready {
		if w.m.Session != c.sid || w.m.Entry != c.from {
			kr = append(kr, w)
		}
	}
	*ready = kr
}

// drop frees a session and any layer released meanwhile. A session that
// ended normally (keep) goes to the prefix cache if its layers stay.
func (s *scheduler) drop(hs *hopSession, keep bool) {
	if s.sessions[hs.key] != hs {
		return
	}
	delete(s.sessions, hs.key)
	// The cache keeps one session per layer (see open).
	if keep && s.cache != nil && len(hs.hist) == hs.pos && len(hs.segs) == hs.to-hs.key.from {
		stages := make([]engine.Stage, 0, len(hs.sess))
		var per int64
		for _, g := range hs.segs {
			if s.stages.serves(g) {
				stages = append(stages, g.st)
				per += g.sp.kvPerLayer()
			}
		}
		if len(stages) == len(hs.sess) {
			s.cache.add(hs.key.from, hs.to, hs.hist, hs.chain.Marks(), hs.sess, stages, per)
			hs.sess = nil // add closed them
		}
	}
	for _, es := range hs.sess {
		es.Close()
	}
	hs.sess = nil
	for _, g := range hs.segs {
		s.stages.unref(g.sp)
	}
	hs.segs = nil
	s.adm.Release(hs.bytes)
	if s.cache != nil {
		s.cache.trim(s.freeBytes())
	}
}

func (s *scheduler) expire(now time.Time) {
	for _, hs := range s.sessions {
		if sched.Stale(now, hs.last, s.cfg.idleTimeout) {
			s.cfg.log.Debug("session expired", zap.Stringer("session", hs.key.sid), zap.Int("from", hs.key.from))
			s.drop(hs, true)
		}
	}
	for _, w := range s.adm.Expire(now, s.cfg.queueTimeout) {
		s.reject(w.V, CodeBusy, "", "waited %v for KV memory", now.Sub(w.At).Round(time.Millisecond))
	}
}

// openConstraint starts an open's grammar over tok's vocabulary, with
// the code of its refusal.
func openConstraint(tok *engine.Tokenizer, o *Open) (*grammar.Constraint, ErrorCode, error) {
	if tok == nil {
		return nil, CodeNotServing, errors.New("this node has no tokenizer to constrain sampling with")
	}
	g, spec, err := grammar.CompileCached(o.Grammar)
	if err != nil {
		return nil, CodeGrammar, fmt.Errorf("grammar: %w", err)
	}
	return grammar.NewConstraint(g, grammar.TokenizerVocab(tok, spec.Keep)), 0, nil
}

// constrain feeds the grammar the tokens it has not seen (a step's, a
// replay's whole output) and returns the logits with what it does not
// allow next masked: a pure function of the tokens, so any last hop of
// any attempt draws the same token.
func (hs *hopSession) constrain(logits []float32) ([]float32, error) {
	for p := max(hs.gramFed, hs.gramFrom); p < hs.pos && p < len(hs.hist); p++ {
		if err := hs.gram.Accept(hs.hist[p]); err != nil {
			return nil, fmt.Errorf("grammar: position %d: %w", p, err)
		}
		hs.gramFed = p + 1
	}
	return hs.gram.Apply(logits)
}

func (s *scheduler) publish() {
	st := &schedStatus{Held: s.stages.held(), Sessions: len(s.sessions), Queue: s.adm.Waiting(),
		KVUsed: s.adm.Used(), FreeKV: -1, LayerLatency: time.Duration(s.ewma * float64(time.Second)),
		Steps: s.steps, Batches: s.batches, BatchedSteps: s.batched, Rejected: s.rejected, Waited: s.adm.Waited()}
	if c := s.cache; c != nil {
		st.PrefixHits, st.PrefixTokens, st.PrefixEntries, st.PrefixBytes = c.c.Hits, c.c.Reused, c.c.Len(), c.c.Cost()
		st.PrefixEvictions, st.Prefixes = c.c.Evicted, c.summary
	}
	st.KVBudget = s.room()
	if per := s.stages.summary(st); per > 0 {
		st.FreeKV = max(s.freeBytes(), 0) / per
	}
	s.status.Store(st)
}

func sameHops(a, b []Hop) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
