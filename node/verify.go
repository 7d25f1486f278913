package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/node/trust"
)

// Spot checks (docs/trust.md): package trust decides and runs them
// (trust.Auditor); the entry draws when to check, carries out the check
// sessions and receipt requests on the network (auditAttempt), and
// rewinds a generation past a proven liar's outputs. The session replays
// without it from the last verified point; tokens already sent are
// compared with the replay's, and a difference ends the generation with
// ErrWrongTokens rather than leaving wrong text standing.

// ErrWrongTokens: tokens already delivered were computed by a node later
// proven faulty, and the replay without it produced different ones.
var ErrWrongTokens = errors.New("node: tokens already sent were wrong (a faulty node was evicted)")

// DefaultVerifyRate is the share of token boundaries at which an entry
// spot-checks one hop.
const DefaultVerifyRate = 0.01

// verifyRate is the entry's rate now: its own when set (an explicit
// --verify-rate), else the swarm's replicated one, else the default.
func (e *entry) verifyRate() float64 {
	if e.cfg.verifyRate >= 0 {
		return e.cfg.verifyRate
	}
	if e.swarmRate != nil {
		if r, ok := e.swarmRate(); ok {
			return r
		}
	}
	return DefaultVerifyRate
}

// shouldAudit draws whether this token boundary gets a spot check.
func (e *entry) shouldAudit() bool {
	return ecore.ShouldAudit(e.verifyRate(), e.holders != nil, rand.Float64())
}

// audit spot-checks one hop of the attempt's path at a token boundary
// (trust.Auditor); the attempt started at start tokens. It returns an
// attempt end when the attempt must stop (a hop proven or suspected
// faulty), nil otherwise.
func (g *generation) audit(ctx context.Context, sid SessionID, areg *attemptReg, start int) *attemptEnd {
	v := g.e.auditor().Audit(ctx, sid, &auditAttempt{g: g, sid: sid, areg: areg, start: start}, trustHops(areg.hops))
	switch {
	case v == nil:
		return nil
	case len(v.Blame) == 0:
		return &attemptEnd{}
	}
	return &attemptEnd{kind: endFault, blame: v.Blame, reason: v.Reason}
}

// auditor is the entry's spot checker, over its fields as they are now.
func (e *entry) auditor() *trust.Auditor {
	return &trust.Auditor{Self: e.cfg.self, Layers: e.cfg.model.info.Layers, Holders: e.holders, Reproducible: e.isReproducible,
		Report: e.report, Counters: &e.vc, Work: &e.work, Now: e.cfg.clock.Now, Log: e.cfg.log}
}

// auditAttempt is what a check needs of one attempt (trust.Attempt): the
// generation's tokens, and the check sessions and receipts it asks for
// on the network, on the entry's clock, giving way to the attempt's
// events.
type auditAttempt struct {
	g     *generation
	sid   SessionID
	areg  *attemptReg
	start int
}

func (a *auditAttempt) Tokens() []int32        { return append(slices.Clone(a.g.prompt), a.g.out...) }
func (a *auditAttempt) PromptLen() int         { return len(a.g.prompt) }
func (a *auditAttempt) Avoided(p peer.ID) bool { return slices.Contains(a.g.gen.Avoid, p.String()) }
func (a *auditAttempt) Verified(p peer.ID, positions int) {
	a.g.verified(p, positions, a.start)
}

func (a *auditAttempt) Inconclusive(p peer.ID) {
	if a.areg.inconclusive == nil {
		a.areg.inconclusive = map[peer.ID]int{}
	}
	a.areg.inconclusive[p]++
}

func (a *auditAttempt) Inconclusives(p peer.ID) int { return a.areg.inconclusive[p] }

func (a *auditAttempt) AskSent(ctx context.Context, i int) (consensus.Receipt, error) {
	return a.g.e.askSent(ctx, a.sid, a.areg.hops, i, a.areg)
}

func (a *auditAttempt) AskReceipt(ctx context.Context, h trust.Hop) (consensus.Receipt, error) {
	return a.g.e.askReceipt(ctx, a.sid, Hop(h), a.areg)
}

func (a *auditAttempt) CheckSession(ctx context.Context, hops, ask []trust.Hop, tokens []int32, logits bool) ([]consensus.Receipt, error) {
	return a.g.e.checkSession(ctx, a.g, wireHops(hops), wireHops(ask), tokens, a.areg, logits)
}

// trustHops and wireHops convert a path between the wire's hops and
// package trust's (the same fields).
func trustHops(hops []Hop) []trust.Hop {
	out := make([]trust.Hop, len(hops))
	for k, h := range hops {
		out[k] = trust.Hop(h)
	}
	return out
}

// hopPeers are the peers of hops, in order.
func hopPeers(hops []Hop) []peer.ID {
	out := make([]peer.ID, len(hops))
	for k, h := range hops {
		out[k] = h.Peer
	}
	return out
}

func wireHops(hops []trust.Hop) []Hop {
	out := make([]Hop, len(hops))
	for k, h := range hops {
		out[k] = Hop(h)
	}
	return out
}

// askReceipt asks hop h for its receipt of the session. An event of the
// session's attempt (a failed peer) ends the wait at once and is left
// for the attempt.
func (e *entry) askReceipt(ctx context.Context, sid SessionID, h Hop, areg *attemptReg) (consensus.Receipt, error) {
	return e.askVia(ctx, sid, h, "", &Audit{Session: sid, From: h.From}, areg)
}

// askVia sends ask to via (to h itself when via is "") and waits for h's
// receipt from either.
func (e *entry) askVia(ctx context.Context, sid SessionID, h Hop, via peer.ID, ask Message, areg *attemptReg) (consensus.Receipt, error) {
	ch, done := e.rcpt.Wait(trust.ReceiptKey{Session: sid, From: h.From}, h.Peer, via)
	defer done()
	to := h.Peer
	if via != "" {
		to = via
	}
	if err := e.send(ctx, to, ask); err != nil {
		return consensus.Receipt{}, err
	}
	t := e.cfg.clock.NewTimer(e.cfg.stepTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r, nil
	case ev := <-areg.events:
		areg.post(ev)
		return consensus.Receipt{}, trust.ErrAttemptFailing
	case <-t.Chan():
		return consensus.Receipt{}, fmt.Errorf("%w: no receipt within %v", trust.ErrInconclusive, e.cfg.stepTimeout)
	case <-ctx.Done():
		return consensus.Receipt{}, ctx.Err()
	case <-e.ctx.Done():
		return consensus.Receipt{}, ErrClosed
	}
}

// checkSession runs one check session of tokens through hops, whose last
// hop answers with its receipt (with its logits summary when logits);
// the hops in ask, which still hold the session then, are asked for
// theirs after. It returns ask's receipts, then the last hop's. Like
// askReceipt, it gives way to an event of the session's attempt.
func (e *entry) checkSession(ctx context.Context, g *generation, hops, ask []Hop, tokens []int32, areg *attemptReg,
	logits bool) ([]consensus.Receipt, error) {
	sid := newSessionID()
	reg := &attemptReg{hops: hops, events: make(chan event, 8)}
	e.checks.add(sid, reg)
	last := hops[len(hops)-1]
	ch, done := e.rcpt.Wait(trust.ReceiptKey{Session: sid, From: last.From}, last.Peer, "")
	defer func() {
		done()
		e.checks.remove(sid)
		for _, h := range hops {
			e.post(h.Peer, &Close{Session: sid})
		}
	}()
	// Cold: the checker computes every position, whatever it caches.
	step := &Step{Session: sid, Entry: e.cfg.self, Hops: hops, Tokens: tokens, Check: true, Logits: logits,
		Open: &Open{MaxTokens: len(tokens), Model: e.cfg.model.hash, Sampling: g.sp, Cold: true}}
	if err := e.send(ctx, hops[0].Peer, step); err != nil {
		return nil, fmt.Errorf("%w: %w", trust.ErrInconclusive, err)
	}
	t := e.cfg.clock.NewTimer(e.cfg.stepTimeout)
	defer t.Stop()
	var r consensus.Receipt
	select {
	case r = <-ch:
	case ev := <-reg.events:
		why := ev.why
		if ev.err != nil {
			why = ev.err.Text
		}
		return nil, fmt.Errorf("%w: %s", trust.ErrInconclusive, why)
	case ev := <-areg.events:
		areg.post(ev)
		return nil, trust.ErrAttemptFailing
	case <-t.Chan():
		return nil, fmt.Errorf("%w: no answer within %v", trust.ErrInconclusive, e.cfg.stepTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.ctx.Done():
		return nil, ErrClosed
	}
	out := make([]consensus.Receipt, 0, len(ask)+1)
	for _, l := range ask {
		// The earlier links still hold the check session: ask them.
		rl, err := e.askReceipt(ctx, sid, l, areg)
		if err != nil {
			return nil, err
		}
		out = append(out, rl)
	}
	return append(out, r), nil
}

// used notes that the attempt starting now, at len(g.out) tokens, runs
// on hops: tokens from here on depend on their outputs.
func (g *generation) used(hops []Hop) {
	if g.safe == nil {
		g.safe = map[peer.ID]int{}
	}
	for _, h := range hops {
		if s, ok := g.safe[h.Peer]; !ok || s > len(g.out) {
			g.safe[h.Peer] = len(g.out)
		}
	}
}

// verified records that p's outputs at positions [0, positions) of the
// attempt that started at start tokens passed a check. The tokens they
// fed are then safe from p, if those before the attempt already were:
// the check covers this attempt's session only.
func (g *generation) verified(p peer.ID, positions, start int) {
	if s, ok := g.safe[p]; ok && s >= start {
		g.safe[p] = max(s, positions-len(g.prompt)+1)
	}
}

// rewind takes the generation back to the last point up to which no
// token depends on an unverified output of the faulty peer: the tokens
// after it are produced again, and compared with the ones already sent
// (deliver).
func (g *generation) rewind(faulty peer.ID) {
	if len(g.sent) < len(g.out) {
		g.sent = slices.Clone(g.out)
	}
	if s, ok := g.safe[faulty]; ok {
		g.out = g.out[:min(max(s, 0), len(g.out))]
	}
}
