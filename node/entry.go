package node

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/node/trust"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// The entry role. Each generation runs on a goroutine of its own, which
// keeps the prompt and every token so far. An attempt opens a fresh
// session on a routed path: a prefill of everything known, then one
// decode step per token; the last hop sends each token straight back
// here. When a hop fails (an error message, its peer's connection
// closing or death in the peer table, a forwarding failure, or the step
// timeout) the attempt ends, its hops are told to close the session, and
// the next attempt replays the whole prefix on a path that avoids the
// failed peer. With greedy or seeded sampling the tokens are those of a
// run without the failure: the draw for each position is a function of
// the seed and the position only.

// Timings of the entry's waits that are not configured.
const (
	repairPoll = 50 * time.Millisecond // how often a generation with no path looks again
)

// busyBackoff is the wait before the retry-th attempt on busy hops
// (node/entry's BusyBackoff).
func busyBackoff(retry int) time.Duration { return ecore.BusyBackoff(retry) }

// entryConfig is what the entry role is told at start.
type entryConfig struct {
	self                         peer.ID
	model                        *model // info, tokenizer and hash; no layers are opened here
	stepTimeout, repairWait      time.Duration
	maxReplays, defaultMaxTokens int
	wire                         WireMode
	signedFrames                 bool          // hops sign their frames: audits take frame receipts (sigframe.go)
	maxFrame                     int           // the largest activation frame peers accept
	queueMax                     int           // requests the admission queue holds
	queueTimeout                 time.Duration // a queued request's default deadline
	verifyRate                   float64       // share of token boundaries spot-checked (verify.go)
	fair                         fairConfig    // swarm-wide oldest-first admission (fair.go)
	clock                        clockwork.Clock
	log                          *zap.Logger
}

// entryDeps are the entry's seams to the rest of the node: it routes,
// sends and hears of failed peers through these, and knows nothing else
// of the node, so that its tests run with a fake clock and no libp2p.
type entryDeps struct {
	// route picks a path on the committed map (ErrNoPath when none).
	route func(routeReq) (routing.Path, error)
	// send delivers a step to the first hop now (the node's own stage
	// service included); an error fails the attempt.
	send func(ctx context.Context, to peer.ID, m Message) error
	// post queues a message that nobody waits for (a session's close).
	post func(to peer.ID, m Message)
	// draining returns the hops that announced draining.
	draining func(hops []Hop) []peer.ID
	// suspect tells the router that p failed a step just now.
	suspect func(p peer.ID)
	// kv is what a node of the map last reported of its KV cache (nil:
	// nothing known, admission by path only).
	kv func(node string) kvReport
	// changed returns a channel closed at the next change of what
	// routing reads (a heartbeat, a liveness verdict); nil: none.
	changed func() <-chan struct{}
	// holders lists the peers that serve layers [from, to) on the
	// committed map (verify.go); nil: no spot checks.
	holders func(from, to int) []peer.ID
	// reproducible reports whether a peer computes bit-reproducibly (the
	// pure-Go engine), which a spot check's hop, its upstream and its
	// checkers must: another engine's outputs differ in the last bits
	// between a session and a check of it, which would read as a lie.
	// nil: every peer.
	isReproducible func(p peer.ID) bool
	// report hands fault evidence to the leader.
	report func(ctx context.Context, ev consensus.Evidence) error
	// heads is the load table: peer entries' queue heads (fair.go);
	// nil: no fair admission.
	heads func() []peerHead
	// swarmRate is the swarm's replicated verify rate (false: none; nil:
	// no consensus).
	swarmRate func() (float64, bool)
	// profileName resolves a request's profile ("" the default) to the
	// name of the one that routes it; nil: as given.
	profileName func(string) string
	// routed tells routing that path's hops now hold the prefix of block
	// hashes prefix: a generation through them finished, and its close
	// leaves their positions in their prefix caches. nil: not told.
	routed func(path routing.Path, prefix []uint64)
}

// entry is the entry role: it starts generations, drives each on a
// goroutine of its own that it joins on close, and routes the tokens,
// errors and peer failures it hears to the attempts they concern.
type entry struct {
	cfg entryConfig
	entryDeps
	counters *counters

	ctx    context.Context // ends with close
	cancel context.CancelFunc
	mu     sync.RWMutex // generate's wg.Add against close's wg.Wait
	wg     sync.WaitGroup
	reg    registry
	adm    *admitter
	checks registry       // spot checks' check sessions (verify.go), apart from generations
	rcpt   trust.Receipts // receipts awaited by spot checks
	vc     trust.Counters // spot-check counts
	work   trust.Work     // per peer, steps served since its last check passed
}

func newEntry(cfg entryConfig, deps entryDeps, c *counters) *entry {
	if cfg.clock == nil {
		cfg.clock = clockwork.NewRealClock()
	}
	if cfg.log == nil {
		cfg.log = zap.NewNop()
	}
	if cfg.queueMax <= 0 {
		cfg.queueMax = DefaultEntryQueueMax
	}
	if cfg.queueTimeout <= 0 {
		cfg.queueTimeout = DefaultQueueTimeout
	}
	e := &entry{cfg: cfg, entryDeps: deps, counters: c, reg: registry{gens: map[SessionID]*attemptReg{}}, adm: newAdmitter(),
		checks: registry{gens: map[SessionID]*attemptReg{}}}
	e.adm.e = e
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.adm.admitLoop() }()
	return e
}

// capacityChanged is a hint from the node that routing's inputs changed
// (its own status, a map notice): the queue looks again.
func (e *entry) capacityChanged() { e.adm.poke() }

// stop ends every generation (their callers get ErrClosed) and refuses
// new ones; wait joins them.
func (e *entry) stop() {
	e.mu.Lock()
	e.cancel()
	e.mu.Unlock()
}

func (e *entry) wait() { e.wg.Wait() }

func (e *entry) onToken(from peer.ID, t *Token)    { e.reg.onToken(from, t) }
func (e *entry) onError(from peer.ID, m *ErrorMsg) { e.reg.onError(from, m); e.checks.onError(from, m) }

// peerDown fails every attempt whose path uses p.
func (e *entry) peerDown(p peer.ID, why string) {
	if e.suspect != nil {
		e.suspect(p)
	}
	for _, r := range []*registry{&e.reg, &e.checks} {
		r.mu.Lock()
		for sid, a := range r.gens {
			if a.uses(p) {
				a.post(event{sid: sid, down: p, why: why})
			}
		}
		r.mu.Unlock()
	}
}

func newSessionID() SessionID {
	var s SessionID
	_, _ = rand.Read(s[:])
	return s
}

// generate starts a generation (see Node.Generate).
func (e *entry) generate(ctx context.Context, req Request) (*Stream, error) {
	if e.ctx.Err() != nil {
		return nil, ErrClosed
	}
	in := e.cfg.model.info
	if req.Model != "" && req.Model != in.Name {
		return nil, fmt.Errorf("%w: %q (this swarm serves %q)", ErrUnknownModel, req.Model, in.Name)
	}
	set := 0
	for _, b := range []bool{req.Prompt != "", len(req.Messages) > 0, len(req.Tokens) > 0} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, fmt.Errorf("%w: give exactly one of a prompt, messages and tokens", ErrBadRequest)
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("%w: max tokens %d", ErrBadRequest, req.MaxTokens)
	}
	if err := validateSampling(req.Sampling); err != nil {
		return nil, err
	}
	if req.TopLogProbs < 0 || req.TopLogProbs > MaxTopLogProbs || req.TopLogProbs > 0 && !req.LogProbs {
		return nil, fmt.Errorf("%w: %d top log-probabilities (0 to %d, and only with log-probabilities)", ErrBadRequest, req.TopLogProbs, MaxTopLogProbs)
	}
	prompt, err := e.cfg.model.prompt(req)
	if err != nil {
		return nil, err
	}
	maxTok := req.MaxTokens
	if maxTok == 0 {
		maxTok = min(e.cfg.defaultMaxTokens, in.Context-len(prompt))
	}
	if len(prompt)+maxTok > in.Context || maxTok <= 0 {
		return nil, fmt.Errorf("%w: %d prompt tokens + %d to generate > %d", ErrPromptTooLong, len(prompt), max(maxTok, 1), in.Context)
	}
	// A replay's prefill carries everything but the last token in one
	// frame (prefill is not chunked).
	dt := DTypeF32 // WireAuto may pick it
	switch e.cfg.wire {
	case WireF16:
		dt = DTypeF16
	case WireQ8:
		dt = DTypeQ8
	}
	if frame := (len(prompt) + maxTok) * (int(dt.rowBytes(in.Hidden)) + 4); frame+64<<10 > e.cfg.maxFrame {
		return nil, fmt.Errorf("%w: a prefill of %d positions takes %d bytes, above the %d-byte activation frame limit",
			ErrPromptTooLong, len(prompt)+maxTok, frame, e.cfg.maxFrame)
	}
	var gram []byte
	var gramG *grammar.Grammar
	var gramV *grammar.Vocab
	if req.Grammar != nil {
		gram = req.Grammar.Encode()
		if len(gram) > MaxGrammar {
			return nil, fmt.Errorf("%w: %w: a grammar of %d bytes (at most %d)", ErrBadRequest, grammar.ErrTooLarge, len(gram), MaxGrammar)
		}
		var spec *grammar.Spec
		var err error
		if gramG, spec, err = grammar.CompileCached(gram); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		gramV = grammar.TokenizerVocab(e.cfg.model.tok, spec.Keep)
	}
	rnd := newSessionID()
	g := &generation{e: e, prompt: prompt, maxTokens: maxTok, sp: req.Sampling, grammar: gram, gramG: gramG, gramV: gramV,
		text: newTextState(e.cfg.model.tok, req.Stop, req.Keep), seed: binary.LittleEndian.Uint64(rnd[:8]), profile: req.Profile,
		stolen: req.stolen, lp: req.LogProbs, topLP: req.TopLogProbs,
		gen: ecore.NewGen(ecore.Config{Self: e.cfg.self.String(), MaxReplays: e.cfg.maxReplays, RepairWait: e.cfg.repairWait,
			StepTimeout: e.cfg.stepTimeout, Vocab: in.Vocab})}
	if req.Follow != nil {
		g.pin = req.Follow.path.Load()
	}
	g.res.Profile = req.Profile
	if e.profileName != nil {
		g.res.Profile = e.profileName(req.Profile)
	}
	wait := req.QueueTimeout
	if wait == 0 {
		wait = e.cfg.queueTimeout
	}
	first := e.adm.admitAt(ctx, g, wait, false)
	resv, err := first.resv, first.err
	g.resv = resv
	if errors.Is(err, routing.ErrUnknownProfile) {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err != nil {
		if errors.Is(err, ErrNoCapacity) || errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return nil, err
		}
		return nil, &retryAfter{err: fmt.Errorf("%w: %w", ErrNoCapacity, err), after: time.Second}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ctx.Err() != nil {
		e.adm.release(resv)
		if first.stolen != nil {
			_ = first.stolen.s.Reset()
		}
		return nil, ErrClosed
	}
	e.counters.requests.Add(1)
	gctx, cancel := context.WithCancel(ctx)
	s := &Stream{deltas: make(chan Delta, 16), done: make(chan struct{}), cancel: cancel, prompt: len(prompt)}
	g.stream = s
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer cancel()
		defer func() { e.adm.release(g.resv) }()
		res, err := g.runAdmitted(gctx, first, wait)
		if err != nil {
			e.counters.failed.Add(1)
			if errors.Is(err, context.Canceled) && e.ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrClosed, err)
			}
		}
		s.res, s.err = res, err
		close(s.deltas)
		close(s.done)
	}()
	return s, nil
}

// runAdmitted runs g from its admission: on the path it was given, or
// through the thief that took it; a thief's stream that broke sends it
// back to the head of the queue (steal.go), whence it runs here or is
// stolen again.
func (g *generation) runAdmitted(ctx context.Context, adm admission, wait time.Duration) (Result, error) {
	e := g.e
	for adm.stolen != nil {
		done, err := g.runStolen(ctx, adm.stolen)
		if done {
			return g.result(), err
		}
		adm = e.adm.admitAt(ctx, g, wait, true)
		g.resv = adm.resv
		if adm.err != nil {
			return g.result(), fmt.Errorf("%w: after a thief gave the request back: %w", ErrSessionLost, adm.err)
		}
	}
	return g.run(ctx, adm.path)
}

// generation is one request's state at the entry.
type generation struct {
	e         *entry // not the node: the entry role only
	prompt    []int32
	maxTokens int
	sp        engine.SamplingParams
	grammar   []byte // Open.Grammar: the spec's wire form (nil: free)
	// The grammar as the entry checks the last hop's tokens with it:
	// gramM has consumed gramLen tokens of out (rebuilt when out is
	// rewound).
	gramG   *grammar.Grammar
	gramV   *grammar.Vocab
	gramM   *grammar.Constraint
	gramLen int
	text    *textState
	stream  *Stream
	seed    uint64 // for the router's choice among near-best paths
	profile string // the scheduling profile, "" for the default
	out     []int32
	// gen decides the attempts: replays, reroutes, back-offs, the peers
	// given up on (node/entry); this file carries its effects out.
	gen   *ecore.Gen
	res   Result
	start time.Time
	// safe counts, per peer that served an attempt, the leading tokens
	// of out that depend on no unverified output of it; sent holds what
	// was delivered before a rewind (verify.go).
	safe map[peer.ID]int
	sent []int32
	resv []*reservation // the KV its admission reserved
	// stolen: handed over by a loaded entry; admitted ahead of this
	// entry's queue, never held or queued (steal.go).
	stolen bool
	// lp: the request wants log-probabilities (Request.LogProbs), with
	// topLP alternatives; lps holds them for out, one per token.
	lp    bool
	topLP int
	lps   []TokenLogProbs
	// pin is the path of the generation it follows (Request.Follow),
	// taken while usable; nil: routed as usual.
	pin *routing.Path
}

func (g *generation) routeReq(avoid []string) routeReq {
	return routeReq{prompt: len(g.prompt), max: g.maxTokens, seed: g.seed + uint64(len(g.res.Paths)), avoid: avoid,
		profile: g.profile, prefix: routing.BlockHashes(append(slices.Clone(g.prompt), g.out...), prefixBlock), pin: g.pin}
}

// routeNow routes q with what is in flight now.
func (e *entry) routeNow(q routeReq) (routing.Path, error) {
	q.busy = e.reg.busy()
	return e.route(q)
}

// attemptEnd says how an attempt ended (a spot check's verdict,
// verify.go); node/entry's End in peer IDs.
type attemptEnd struct {
	kind   endKind
	blame  []peer.ID // peers to avoid on the next attempt
	reason string
}

func (a attemptEnd) core() ecore.End {
	e := ecore.End{Kind: a.kind, Reason: a.reason}
	for _, p := range a.blame {
		e.Blame = append(e.Blame, p.String())
	}
	return e
}

type endKind = ecore.EndKind

const (
	endFailure = ecore.EndFailure // a hop failed: replay elsewhere
	endFault   = ecore.EndFault   // a hop failed a spot check: replay from the last verified point
)

// run drives g's attempts from path until it ends: g.gen decides what
// follows each attempt's end, and run carries it out.
func (g *generation) run(ctx context.Context, path routing.Path) (Result, error) {
	e := g.e
	if g.start.IsZero() { // a stolen request's start stands
		g.start = e.cfg.clock.Now()
	}
	for {
		effs, err := g.attempt(ctx, path)
		if err != nil {
			return g.result(), err
		}
		for _, ef := range effs {
			switch ef := ef.(type) {
			case ecore.Done:
				return g.result(), nil
			case ecore.Rewind:
				g.rewind(peerOf(ef.Peer))
			case ecore.Fail:
				if ef.Failure {
					e.counters.hopFailures.Add(1)
				}
				switch ef.Why {
				case ecore.FailBusy:
					return g.result(), fmt.Errorf("%w: %w: hops busy for %v", ErrSessionLost, ErrNoCapacity, e.cfg.repairWait)
				case ecore.FailUnreachable:
					return g.result(), fmt.Errorf("%w: first hops unreachable for %v, last: %s", ErrSessionLost, e.cfg.repairWait, ef.End.Reason)
				}
				return g.result(), fmt.Errorf("%w: %d replays, last: %s", ErrSessionLost, ef.Replays, ef.End.Reason)
			case ecore.Backoff:
				// Admission, not failure: wait, and try again (elsewhere
				// if possible).
				if ef.End.Kind == ecore.EndUnreachable {
					e.cfg.log.Info("first hop unreachable; backing off", zap.String("reason", ef.End.Reason), zap.Int("retry", ef.Retry))
				} else {
					e.cfg.log.Debug("hop busy; backing off", zap.String("reason", ef.End.Reason), zap.Int("retry", ef.Retry))
				}
				select {
				case <-ctx.Done():
					return g.result(), ctx.Err()
				case <-e.ctx.Done():
					return g.result(), ErrClosed
				case <-e.cfg.clock.After(ef.Delay):
				}
			case ecore.Reroute:
				switch {
				case ef.Failure:
					e.counters.hopFailures.Add(1)
					e.cfg.log.Info("hop failed; replaying on a new path", zap.String("reason", ef.End.Reason), zap.Strings("blame", ef.End.Blame),
						zap.Int("position", len(g.prompt)+len(g.out)), zap.String("path", path.String()))
				case ef.End.Kind == ecore.EndPrefixMiss:
					e.cfg.log.Debug("prefix cache miss on a later hop; replaying cold", zap.String("reason", ef.End.Reason))
				case ef.End.Kind == ecore.EndMove:
					e.cfg.log.Info("hop draining; moving the session", zap.Strings("draining", ef.End.Blame),
						zap.Int("position", len(g.prompt)+len(g.out)), zap.String("path", path.String()))
				}
				if path, err = g.reroute(ctx); err != nil {
					return g.result(), err
				}
			}
		}
	}
}

func (g *generation) result() Result {
	r := g.res
	r.Replays = g.gen.Replays
	r.Tokens = slices.Clone(g.out)
	if g.lp {
		r.LogProbs = slices.Clone(g.lps[:len(g.out)])
	}
	r.Text = string(g.text.full)
	r.StopSequence = g.text.matched
	r.Usage = Usage{PromptTokens: len(g.prompt), CompletionTokens: len(g.out), TotalTokens: len(g.prompt) + len(g.out)}
	r.Total = g.e.cfg.clock.Since(g.start)
	return r
}

// attempt drives one session on path until the generation ends or a hop
// fails: it feeds g.gen what happens (tokens, errors, deaths, timeouts,
// spot checks' answers) and carries out the effects, and returns those
// that end the attempt, for run.
func (g *generation) attempt(ctx context.Context, path routing.Path) ([]ecore.Effect, error) {
	e := g.e
	names := make([]string, len(path.Hops))
	for i, h := range path.Hops {
		names[i] = h.Node
	}
	pending := g.gen.Step(e.cfg.clock.Now(), ecore.Start{Hops: names, Pos: len(g.prompt) + len(g.out)})
	hops, err := hopsOf(path)
	if err != nil {
		countReplays(e.counters, pending)
		return g.gen.Step(e.cfg.clock.Now(), ecore.Rejected{Reason: err.Error()}), nil
	}
	g.res.Paths = append(g.res.Paths, path.String())
	g.stream.path.Store(&path)
	g.res.Scores = append(g.res.Scores, PathScore{Cost: path.Cost, Terms: path.Terms})
	sid := newSessionID()
	reg := &attemptReg{hops: hops, events: make(chan event, 8)}
	e.reg.add(sid, reg)
	defer func() {
		e.reg.remove(sid)
		for _, h := range hops {
			e.post(h.Peer, &Close{Session: sid})
		}
	}()
	start := len(g.out)
	g.used(hops)
	timer := e.cfg.clock.NewTimer(e.cfg.stepTimeout)
	defer timer.Stop()
	var tok *Token // the token being delivered
	fed := 0       // positions the last step fed
	for {
		if len(pending) == 0 {
			ev, t, err := g.await(ctx, reg, timer)
			if err != nil {
				return nil, err
			}
			if t != nil {
				tok = t
			}
			pending = g.gen.Step(e.cfg.clock.Now(), ev)
			continue
		}
		ef := pending[0]
		pending = pending[1:]
		var ev ecore.Event // what carrying ef out led to
		switch ef := ef.(type) {
		case ecore.Close, ecore.Done:
			return append([]ecore.Effect{ef}, pending...), nil
		case ecore.Send:
			countReplays(e.counters, []ecore.Effect{ef})
			step := &Step{Session: sid, Entry: e.cfg.self, Hops: hops, Pos: len(g.prompt) + len(g.out) - 1}
			if ef.Prefill {
				step = &Step{Session: sid, Entry: e.cfg.self, Hops: hops, Pos: 0, Tokens: append(slices.Clone(g.prompt), g.out...),
					Open: &Open{MaxTokens: len(g.prompt) + g.maxTokens, Model: e.cfg.model.hash, Sampling: g.sp, Cold: g.gen.Cold,
						LogProbs: g.lp, TopLogProbs: g.topLP, Grammar: g.grammar, GrammarFrom: len(g.prompt)}}
			} else {
				step.Tokens = []int32{g.out[len(g.out)-1]}
			}
			fed = len(step.Tokens)
			// The step's time starts before its send, so that a send that
			// hangs counts too, and a fake clock's test that saw the send
			// knows the timer is set.
			if !timer.Stop() {
				select {
				case <-timer.Chan():
				default:
				}
			}
			timer.Reset(e.cfg.stepTimeout)
			if err := e.send(ctx, hops[0].Peer, step); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				// A dial that failed (swarm.ErrUnreachable) reached no hop:
				// node/entry backs off instead of spending a replay.
				ev = ecore.SendFailed{Reason: err.Error(), Unreachable: errors.Is(err, swarm.ErrUnreachable)}
			}
		case ecore.Deliver:
			// The entry's own checks of what the token carries, then the
			// caller.
			last := hops[len(hops)-1].Peer.String()
			if g.lp {
				if why := g.checkLP(tok.LP); why != "" {
					ev = ecore.Rejected{From: last, Reason: why}
					break
				}
			}
			if why := g.gramCheck(ef.Token); why != "" {
				ev = ecore.Rejected{From: last, Reason: why}
				break
			}
			e.work.Served(hopPeers(hops), fed)
			finished, err := g.deliver(ctx, ef, tok.LP)
			if err != nil {
				return nil, err
			}
			if finished && e.routed != nil {
				// Every position fed, the last token not: what the hops hold.
				fed := append(slices.Clone(g.prompt), g.out[:len(g.out)-1]...)
				e.routed(path, routing.BlockHashes(fed, prefixBlock))
			}
			d := ecore.Delivered{Finished: finished, Audit: !finished && len(g.out) > len(g.sent) && e.shouldAudit()}
			if !finished && !d.Audit {
				d.Draining = peerStrings(e.draining(hops))
			}
			ev = d
		case ecore.Audit:
			c := ecore.Checked{}
			if end := g.audit(ctx, sid, reg, start); end != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				ce := end.core()
				c.Fail = &ce
			} else {
				c.Draining = peerStrings(e.draining(hops))
			}
			ev = c
		}
		if ev != nil {
			pending = append(pending, g.gen.Step(e.cfg.clock.Now(), ev)...)
		}
	}
}

// countReplays counts the replays among effs.
func countReplays(c *counters, effs []ecore.Effect) {
	for _, ef := range effs {
		if s, ok := ef.(ecore.Send); ok && s.Replay {
			c.replays.Add(1)
		}
	}
}

// await waits for what ends a step: a token, a hop's error, a peer's
// death, the step timeout. An error only when the generation must stop
// (its caller went, the entry closed, a request the grammar cannot
// serve).
func (g *generation) await(ctx context.Context, reg *attemptReg, timer clockwork.Timer) (ecore.Event, *Token, error) {
	e := g.e
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-e.ctx.Done():
		return nil, nil, ErrClosed
	case <-timer.Chan():
		return ecore.TimedOut{}, nil, nil
	case ev := <-reg.events:
		switch {
		case ev.down != "":
			return ecore.PeerDown{Peer: ev.down.String(), Reason: "peer " + shortID(ev.down) + " " + ev.why}, nil, nil
		case ev.err != nil:
			at := ev.from
			if ev.err.Peer != "" {
				at = ev.err.Peer
			}
			hf := ecore.HopFailed{At: at.String(), Reason: fmt.Sprintf("%s from %s: %s", ev.err.Code, shortID(ev.from), ev.err.Text)}
			switch ev.err.Code {
			case CodeBusy, CodeNotServing:
				// Not serving: the hop is still loading its range (a
				// queued request admitted as it joins) or released it
				// for a newer map; like a full queue, back off and
				// route again within the repair wait instead of
				// burning replays in a tight loop.
				hf.Kind = ecore.EndBusy
			case CodeNoKV:
				hf.Kind = ecore.EndNoKV
			case CodePrefixMiss:
				hf.Kind = ecore.EndPrefixMiss
			case CodeGrammar:
				// Believed only if the entry's own matcher agrees;
				// otherwise the hop is blamed like any failure.
				if why := g.gramStuck(); why != "" {
					return nil, nil, fmt.Errorf("%w: %s", ErrBadRequest, why)
				}
			}
			return hf, nil, nil
		}
		return ecore.TokenArrived{From: ev.from.String(), Pos: ev.tok.Pos, Token: ev.tok.Token}, ev.tok, nil
	}
}

// peerOf is the peer a node/entry decision names (in routing's form).
func peerOf(s string) peer.ID {
	p, err := peer.Decode(s)
	if err != nil {
		return peer.ID(s)
	}
	return p
}

// peerStrings names peers as routing and node/entry do.
func peerStrings(ps []peer.ID) []string {
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// deliver hands one token (with its log-probabilities, when asked: lp
// is nil otherwise) to the caller and reports whether the generation is
// over.
func (g *generation) deliver(ctx context.Context, dv ecore.Deliver, lp *TokenLP) (bool, error) {
	e := g.e
	id := dv.Token
	now := e.cfg.clock.Now()
	if len(g.out) == 0 {
		g.res.TTFT = now.Sub(g.start)
		e.adm.opened(g.resv, e.kv) // the hops' next reports count the session
	}
	if dv.Recovered {
		d := dv.Latency
		g.res.ReplayLatency = append(g.res.ReplayLatency, d)
		g.res.ReplayedAt = append(g.res.ReplayedAt, len(g.out))
		e.counters.replayed(d)
		e.cfg.log.Info("replay recovered", zap.Duration("replay_latency", d), zap.Int("position", len(g.prompt)+len(g.out)))
	}
	if n := len(g.out); n < len(g.sent) {
		// Redoing tokens already sent after a fault: they stand if the
		// replay agrees, and the generation ends flagged if not.
		if g.sent[n] != id {
			return false, fmt.Errorf("%w: token %d (position %d) was %d, the replay without the faulty node gives %d",
				ErrWrongTokens, n, len(g.prompt)+n, g.sent[n], id)
		}
		g.out = append(g.out, id)
		return false, nil
	}
	g.out = append(g.out, id)
	var lps []TokenLogProbs
	if g.lp {
		// lps stays as long as out: a rewind (verify.go) keeps those of
		// the tokens it redoes, which come back the same.
		g.lps = g.lps[:len(g.out)-1]
		if lp != nil {
			g.lps = append(g.lps, g.logProbs(id, lp))
		} else {
			g.lps = append(g.lps, TokenLogProbs{Token: id, LogProb: float32(math.NaN())})
		}
		lps = g.lps[len(g.out)-1:]
	}
	e.counters.tokens.Add(1)
	text, stopped := g.text.add(id)
	switch {
	case stopped || e.cfg.model.tok.IsEnd(id):
		g.res.FinishReason = FinishStop
	case len(g.out) >= g.maxTokens:
		g.res.FinishReason = FinishLength
	}
	if g.res.FinishReason != "" {
		text += g.text.flush()
	}
	select {
	case g.stream.deltas <- Delta{Tokens: []int32{id}, Text: text, LogProbs: lps}:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-e.ctx.Done():
		return false, ErrClosed
	}
	return g.res.FinishReason != "", nil
}
