package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/node/trust"
)

// Spot checks (see docs/trust.md). Every hop keeps, per session, two
// running SHA-256 chains: over every input row it took (token IDs on the
// first layer, hidden states after) and over every hidden row it emitted,
// plus the hash of its last output (the logits on the last layer). The
// engine is bit-deterministic and a prefill of n positions equals n
// decode steps, so any holder of the same layers, fed the same inputs
// from position 0 in one stateless prefill, must end with the same
// chains. At a token boundary, with probability verify-rate, the entry
// asks one hop X of the path for its signed receipt, then runs a check
// session: the session's tokens so far through the same upstream hops
// and a second holder V of X's layers, whose signed receipt comes back
// instead of a token. Same input chain and same outputs: X's work so far
// is verified. Different outputs: a third holder W breaks the tie, and
// the three signed receipts go to the leader as evidence against the odd
// one out (consensus.Evidence), who is evicted and banned. The session
// replays without it from the last verified point; tokens already sent
// are compared with the replay's, and a difference ends the generation
// with ErrWrongTokens rather than leaving wrong text standing.
//
// A last hop on an engine that is not bit-reproducible (ggml) is checked
// by tolerance instead (tolAudit): its receipt carries a signed summary
// of its last logits row, compared with a checker's within
// consensus.LogitsTolerance. Such a node before the last hop is checked
// by tolerance too (midAudit): the last hop's logits after it are
// compared with those after a second holder of its layers.

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

// errInconclusive: a check that proves nothing either way;
// errAttemptFailing: one cut short because the session's attempt fails.
var (
	errInconclusive   = errors.New("check inconclusive")
	errAttemptFailing = fmt.Errorf("%w: the session's attempt is failing", errInconclusive)
)

// audit spot-checks one hop of the attempt's path at a token boundary;
// the attempt started at start tokens.
// It returns an attempt end when the attempt must stop (a hop proven or
// suspected faulty), nil otherwise.
func (g *generation) audit(ctx context.Context, sid SessionID, areg *attemptReg, start int) *attemptEnd {
	hops := areg.hops
	e := g.e
	// The hops with a second holder; the entry does not check itself.
	// Only a bit-reproducible hop, fed by bit-reproducible hops, can be
	// checked: the check session reruns its upstream cold.
	var cand []int
	for i, h := range hops {
		if !e.reproducible(h.Peer) {
			break
		}
		if h.Peer != e.cfg.self && len(g.checkers(hops, i, 1)) > 0 {
			cand = append(cand, i)
		}
	}
	// A last hop on another engine is checked by tolerance on its logits
	// (tolerance.go in consensus), whatever engines feed it.
	tol := len(hops) - 1
	if x := hops[tol]; x.Peer == e.cfg.self || x.To != e.cfg.model.info.Layers || e.reproducible(x.Peer) ||
		len(g.tolCheckers(hops, tol)) == 0 {
		tol = -1
	} else {
		cand = append(cand, tol)
	}
	// A hop before the last on another engine (or one not heard yet) is
	// checked by tolerance too, on the last hop's logits through the same
	// downstream (midAudit): an engine label opts no hop out of checks.
	var mid []int
	if hops[len(hops)-1].To == e.cfg.model.info.Layers {
		for i, h := range hops[:len(hops)-1] {
			if h.Peer != e.cfg.self && !e.reproducible(h.Peer) && len(g.midCheckers(hops, i)) > 0 {
				mid = append(mid, i)
			}
		}
	}
	cand = append(cand, mid...)
	if len(cand) == 0 {
		return nil
	}
	e.vc.Audit()
	i := trust.PickAudit(hopPeers(hops), cand, e.work.Unverified, rand.IntN)
	if i == tol {
		return g.tolAudit(ctx, sid, areg, i)
	}
	if slices.Contains(mid, i) {
		return g.midAudit(ctx, sid, areg, i)
	}
	x := hops[i]
	rx, err := e.askSent(ctx, sid, hops, i, areg)
	if err != nil {
		e.vc.Inconclusive()
		e.cfg.log.Debug("spot check: no receipt", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	all := append(slices.Clone(g.prompt), g.out...)
	if rx.Positions > len(all) || rx.From != x.From || rx.To != x.To {
		e.vc.Inconclusive()
		return nil
	}
	tokens := all[:rx.Positions]
	steps := max(rx.Positions-len(g.prompt), 0) + 1 // the prefill, then one per decode step
	// Checkers: single second holders, else chains that cover the layers
	// together (trust.Checkers); each re-runs X's input cold.
	alts := g.checkers(hops, i, maxCheckers)
	run := func(links []Hop) ([]consensus.Receipt, error) {
		return e.checkRun(ctx, g, hops[:i], links, tokens, rx, areg, false)
	}
	rvs, v, end, err := firstCheck(ctx, alts, run)
	if v < 0 {
		if end == nil && !errors.Is(err, errAttemptFailing) {
			e.vc.Inconclusive()
			e.cfg.log.Debug("spot check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		}
		return end
	}
	ch := alts[v]
	rv, checker := rvs[len(rvs)-1], ch[len(ch)-1].Peer
	if rv.SameOutput(rx) {
		e.vc.Conclusive(e.cfg.clock.Now(), sid, x.Peer, checker, rx.Positions, steps, false, false, len(ch))
		e.work.Passed(x.Peer)
		g.verified(x.Peer, rx.Positions, start)
		return nil
	}
	e.vc.Conclusive(e.cfg.clock.Now(), sid, x.Peer, checker, rx.Positions, steps, true, false, len(ch))
	e.cfg.log.Warn("spot check mismatch; asking a third opinion", zap.Stringer("hop", x.Peer), zap.Stringer("checker", checker),
		zap.Int("links", len(ch)), zap.Int("positions", rx.Positions), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
	// A third opinion: the next checkers, single holders first, that share
	// no node with the first (a node in both would vote twice).
	for _, links := range alts[v+1:] {
		if sharesPeer(links, ch) {
			continue
		}
		rws, err := run(links)
		if errors.Is(err, errAttemptFailing) || ctx.Err() != nil {
			return nil // the attempt ends on its own event; nobody is blamed
		}
		if err != nil {
			continue
		}
		rw := rws[len(rws)-1]
		switch {
		case rw.SameOutput(rv):
			e.fault(ctx, exactEvidence(rx, rvs, rws))
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
				reason: fmt.Sprintf("hop %s failed a spot check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case rw.SameOutput(rx):
			// The checker was wrong; the session's hop was right. A single
			// checker is proven faulty; a chain is, as one witness, but no
			// one link of it: its inner rows have no second opinion, so
			// nobody is accused (docs/trust.md).
			if len(ch) == 1 {
				e.fault(ctx, exactEvidence(rv, []consensus.Receipt{rx}, rws))
			} else {
				e.cfg.log.Warn("spot check: a chained checker was outvoted; no single link of it can be blamed",
					zap.Stringers("chain", hopPeers(ch)), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
			}
			e.work.Passed(x.Peer)
			g.verified(x.Peer, rx.Positions, start)
			return nil
		}
		break // three answers: nothing to prove
	}
	// No majority: replay without the hop or any node of its checker, and
	// prove nothing.
	e.vc.Unresolved()
	return &attemptEnd{kind: endFault, blame: append([]peer.ID{x.Peer}, hopPeers(ch)...),
		reason: fmt.Sprintf("hop %s and checker %s disagree on layers [%d, %d), no third opinion settled it", shortID(x.Peer),
			chainName(ch), x.From, x.To)}
}

// exactEvidence is the evidence against accused's signer, whose two
// witnesses (each its receipts in layer order: one for a single holder,
// the links' for a chain) agree with each other: a single witness goes
// first, as the evidence's format wants one there where it has one.
func exactEvidence(accused consensus.Receipt, w1, w2 []consensus.Receipt) consensus.Evidence {
	if len(w1) > 1 && len(w2) == 1 {
		w1, w2 = w2, w1
	}
	ev := consensus.Evidence{Receipts: [3]consensus.Receipt{accused, w1[len(w1)-1], w2[len(w2)-1]}, Chain: w2[:len(w2)-1]}
	if len(w1) > 1 {
		ev.FirstChain = w1[:len(w1)-1]
	}
	return ev
}

// sharesPeer reports whether two checkers have a node in common.
func sharesPeer(a, b []Hop) bool {
	return slices.ContainsFunc(a, func(h Hop) bool { return slices.ContainsFunc(b, func(o Hop) bool { return o.Peer == h.Peer }) })
}

func hopPeers(hops []Hop) []peer.ID {
	out := make([]peer.ID, len(hops))
	for k, h := range hops {
		out[k] = h.Peer
	}
	return out
}

// chainName names a checker in a reason: its nodes, in layer order.
func chainName(links []Hop) string {
	var b strings.Builder
	for k, l := range links {
		if k > 0 {
			b.WriteString("+")
		}
		b.WriteString(shortID(l.Peer))
	}
	return b.String()
}

// firstCheck runs a check on each of alts in turn until one answers: its
// receipt and index. v < 0 when none did: end is set when ctx ended the
// generation; err is the last failure (errAttemptFailing: the session's
// own path is failing, so the check says nothing of the hop).
func firstCheck[T, R any](ctx context.Context, alts []T, run func(T) (R, error)) (rv R, v int, end *attemptEnd, err error) {
	for k, p := range alts {
		if rv, err = run(p); err == nil {
			return rv, k, nil, nil
		}
		if ctx.Err() != nil {
			return rv, -1, &attemptEnd{}, err
		}
		if errors.Is(err, errAttemptFailing) {
			break
		}
	}
	return rv, -1, nil, err
}

// reproducible: whether p's outputs can be compared bit for bit (see
// entryDeps.isReproducible).
func (e *entry) reproducible(p peer.ID) bool {
	return e.isReproducible == nil || e.isReproducible(p)
}

// maxCheckers bounds the checkers an exact check tries for one hop
// (each that does not answer costs a step timeout) and among which it
// seeks a third opinion.
const maxCheckers = 16

// checkers are the checkers of hop i, by trust.Checkers: single holders
// of its layers, then chains of holders that cover them together, each
// on the bit-reproducible engine, neither the hop nor avoided by this
// generation, and the first link not the hop before it (hops must
// alternate). The holders are shuffled first: that draws the tie-break
// among checkers of as many links, spreading checks over them.
func (g *generation) checkers(hops []Hop, i, limit int) [][]Hop {
	h := hops[i]
	var hs []trust.Holder
	at := map[peer.ID]int{}
	ok := map[peer.ID]bool{}
	for l := h.From; l < h.To; l++ {
		for _, p := range g.e.holders(l, l+1) {
			good, seen := ok[p]
			if !seen {
				good = p != h.Peer && !slices.Contains(g.gen.Avoid, p.String()) && g.e.reproducible(p)
				ok[p] = good
			}
			if !good {
				continue
			}
			// A committed range is one run of layers: the first run found
			// is the holder's part of [From, To).
			switch k, found := at[p]; {
			case !found:
				at[p] = len(hs)
				hs = append(hs, trust.Holder{ID: string(p), From: l, To: l + 1})
			case hs[k].To == l:
				hs[k].To = l + 1
			}
		}
	}
	rand.Shuffle(len(hs), func(a, b int) { hs[a], hs[b] = hs[b], hs[a] })
	var prev string
	if i > 0 {
		prev = string(hops[i-1].Peer)
	}
	var out [][]Hop
	for _, c := range trust.Checkers(h.From, h.To, hs, prev, consensus.MaxChain+1, limit) {
		links := make([]Hop, len(c))
		for k, l := range c {
			links[k] = Hop{Peer: peer.ID(l.ID), From: l.From, To: l.To}
		}
		out = append(out, links)
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
		return consensus.Receipt{}, errAttemptFailing
	case <-t.Chan():
		return consensus.Receipt{}, fmt.Errorf("%w: no receipt within %v", errInconclusive, e.cfg.stepTimeout)
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
		return nil, fmt.Errorf("%w: %w", errInconclusive, err)
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
		return nil, fmt.Errorf("%w: %s", errInconclusive, why)
	case ev := <-areg.events:
		areg.post(ev)
		return nil, errAttemptFailing
	case <-t.Chan():
		return nil, fmt.Errorf("%w: no answer within %v", errInconclusive, e.cfg.stepTimeout)
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

// checkRun runs a check session: tokens through the upstream hops and
// the links (one holder of the checked layers, or a chain that covers
// them), and returns the links' receipts when they cover the same input
// as want's. The last link answers at once; the others are asked after.
// Like askReceipt, it gives way to an event of the session's attempt.
//
// With tol (a tolerance check of a last hop, one link), the last link is
// asked for its logits, and what must match is the token history, not
// the input chain: the upstream hops may be on engines whose rows differ
// in the last bits between the session and the check.
func (e *entry) checkRun(ctx context.Context, g *generation, upstream, links []Hop, tokens []int32, want consensus.Receipt,
	areg *attemptReg, tol bool) ([]consensus.Receipt, error) {
	out, err := e.checkSession(ctx, g, append(slices.Clone(upstream), links...), links[:len(links)-1], tokens, areg, tol)
	if err != nil {
		return nil, err
	}
	r := out[len(out)-1]
	first := out[0]
	if tol {
		if r.Model != want.Model || r.From != want.From || r.To != want.To || r.Positions != want.Positions ||
			r.Logits == nil || want.Logits == nil || r.Logits.Tokens != want.Logits.Tokens {
			return nil, fmt.Errorf("%w: the checker's logits are missing or follow other tokens", errInconclusive)
		}
		// Bit-reproducible upstream hops must feed the checker what they
		// fed the hop: otherwise one of them erred in the session or in the
		// check, and the difference would be blamed on the hop.
		if !slices.ContainsFunc(upstream, func(h Hop) bool { return !e.reproducible(h.Peer) }) && r.InChain != want.InChain {
			return nil, fmt.Errorf("%w: the checker was fed other input", errInconclusive)
		}
		return out, nil
	}
	if first.Model != want.Model || first.From != want.From || first.Positions != want.Positions ||
		first.InChain != want.InChain || r.To != want.To {
		return nil, fmt.Errorf("%w: the checker was fed other input", errInconclusive)
	}
	for k := 1; k < len(out); k++ {
		if out[k].InChain != out[k-1].OutChain || out[k].Positions != want.Positions {
			return nil, fmt.Errorf("%w: the links of a chained checker disagree on what passed between them", errInconclusive)
		}
	}
	return out, nil
}

// fault reports proven evidence to the leader.
func (e *entry) fault(ctx context.Context, ev consensus.Evidence) {
	accused := ev.Receipts[0].Signer
	e.cfg.log.Warn("spot check: reporting a faulty node", zap.Stringer("node", accused),
		zap.Stringer("witness1", ev.Receipts[1].Signer), zap.Stringer("witness2", ev.Receipts[2].Signer))
	if e.report == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.report(ctx, ev); err != nil {
		e.cfg.log.Warn("fault report refused", zap.Stringer("node", accused), zap.Error(err))
		return
	}
	e.vc.Reported()
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
