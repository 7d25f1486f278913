package trust

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
)

// Tolerance checks of hops on engines that are not bit-reproducible: a
// last hop by its own logits (tolAudit), one before it by the last
// hop's logits after it (midAudit), and an exact settlement when such a
// hop signs as go (exactSettle). See docs/trust.md.

// tolAudit checks the last hop i, on an engine that is not
// bit-reproducible, by tolerance: its receipt carries a summary of its
// last logits row, a holder V of its layers (any engine) computes the
// same position from the same tokens in a check session, and the two
// must agree within consensus.LogitsTolerance. On a disagreement a
// third holder W settles it; if W sides with V, the receipts go to the
// leader as tolerance evidence (a shorter ban). An agreeing check vouches
// for the last position's logits only, not for the session's earlier
// work, so it marks no token safe for a replay.
func (c *check) tolAudit(ctx context.Context, i int) *Verdict {
	hops := c.hops
	x := hops[i]
	rx, err := c.at.AskSent(ctx, i)
	if err != nil {
		c.inconclusive(x.Peer)
		c.Log.Debug("tolerance check: no receipt", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	all := c.at.Tokens()
	if rx.Logits == nil || rx.Positions > len(all) || rx.From != x.From || rx.To != x.To ||
		rx.Logits.Tokens != consensus.TokenHash(all[:rx.Positions]) {
		// No logits, or logits of tokens this entry did not send: nothing
		// comparable (an upstream may have altered the tokens it relayed).
		c.inconclusive(x.Peer)
		return nil
	}
	tokens := all[:rx.Positions]
	steps := max(rx.Positions-c.at.PromptLen(), 0) + 1
	alts := c.tolCheckers(hops, i)
	c.shuffle(len(alts), func(a, b int) { alts[a], alts[b] = alts[b], alts[a] })
	// Go checkers first: they add no noise of their own, and only they can
	// hold a hop that signs as go to an exact check (exactSettle).
	slices.SortStableFunc(alts, func(a, b peer.ID) int {
		ra, rb := c.reproducible(a), c.reproducible(b)
		switch {
		case ra == rb:
			return 0
		case ra:
			return -1
		}
		return 1
	})
	run := func(p peer.ID) (consensus.Receipt, error) {
		rs, err := c.checkRun(ctx, hops[:i], []Hop{{Peer: p, From: x.From, To: x.To}}, tokens, rx, true)
		if err != nil {
			return consensus.Receipt{}, err
		}
		return rs[0], nil
	}
	rv, v, end, err := firstCheck(ctx, alts, run)
	if v < 0 {
		if end == nil && !errors.Is(err, ErrAttemptFailing) {
			c.inconclusive(x.Peer)
			c.Log.Debug("tolerance check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		}
		return end
	}
	rel, _ := rx.Logits.Compare(rv.Logits, consensus.LogitsTolerance)
	if rx.Logits.Agrees(rv.Logits, consensus.LogitsTolerance) {
		c.Counters.Conclusive(c.now(), c.sid, x.Peer, alts[v], rx.Positions, steps, false, true, 1)
		c.Counters.ToleranceSeen(rel, false)
		c.Work.Passed(x.Peer)
		return nil
	}
	c.Counters.Conclusive(c.now(), c.sid, x.Peer, alts[v], rx.Positions, steps, true, true, 1)
	c.Counters.ToleranceSeen(rel, true)
	c.Log.Warn("tolerance check: logits differ; asking a third holder", zap.Stringer("hop", x.Peer),
		zap.Stringer("checker", alts[v]), zap.Float64("rel", rel), zap.Int("positions", rx.Positions))
	if eng := rx.Logits.Engine; eng == "" || eng == engine.EngineGo {
		// X signs as go whatever its heartbeat says: held to exact checks.
		return c.exactSettle(ctx, x, rx, rv, alts, v, run, func(why string) *Verdict {
			c.Counters.Unresolved()
			return &Verdict{Blame: []peer.ID{x.Peer, alts[v]},
				Reason: fmt.Sprintf("hop %s and checker %s disagree on the logits of layers [%d, %d): %s",
					shortID(x.Peer), shortID(alts[v]), x.From, x.To, why)}
		})
	}
	for _, p := range alts[v+1:] {
		rw, err := run(p)
		if errors.Is(err, ErrAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			continue
		}
		wv, wx := rw.Logits.Agrees(rv.Logits, consensus.LogitsTolerance), rw.Logits.Agrees(rx.Logits, consensus.LogitsTolerance)
		switch {
		case wv && !wx:
			c.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rx, rv, rw}, Tolerance: true})
			return &Verdict{Blame: []peer.ID{x.Peer},
				Reason: fmt.Sprintf("hop %s failed a tolerance check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case wx && !wv:
			// The checker was off. A go checker is never accused by a
			// tolerance verdict (the leader would refuse it anyway).
			if rv.Logits.Engine != engine.EngineGo {
				c.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rv, rx, rw}, Tolerance: true})
			}
			c.Work.Passed(x.Peer)
			return nil
		}
		break
	}
	c.Counters.Unresolved()
	return &Verdict{Blame: []peer.ID{x.Peer, alts[v]},
		Reason: fmt.Sprintf("hop %s and checker %s disagree on the logits of layers [%d, %d), no third holder settled it",
			shortID(x.Peer), shortID(alts[v]), x.From, x.To)}
}

// tolCheckers are the holders that can check last hop i by tolerance:
// any engine, but neither the hop, the hop before it, nor avoided.
func (c *check) tolCheckers(hops []Hop, i int) []peer.ID {
	h := hops[i]
	var out []peer.ID
	for _, p := range c.Holders(h.From, h.To) {
		if p == h.Peer || (i > 0 && hops[i-1].Peer == p) || c.at.Avoided(p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// midCheckers are the holders that can stand in for hop i (not the last)
// in a mid-path tolerance check: they serve its layers and are neither
// it, its neighbours (hops must alternate), the last hop (whose logits
// are compared, so it must be a fourth node) nor avoided. Go nodes come
// first, each group shuffled: a bit-reproducible checker adds no noise
// of its own.
func (c *check) midCheckers(hops []Hop, i int) []peer.ID {
	h := hops[i]
	var goes, others []peer.ID
	for _, p := range c.Holders(h.From, h.To) {
		if p == h.Peer || (i > 0 && hops[i-1].Peer == p) || hops[i+1].Peer == p || hops[len(hops)-1].Peer == p ||
			c.at.Avoided(p) {
			continue
		}
		if c.reproducible(p) {
			goes = append(goes, p)
		} else {
			others = append(others, p)
		}
	}
	for _, s := range [][]peer.ID{goes, others} {
		c.shuffle(len(s), func(a, b int) { s[a], s[b] = s[b], s[a] })
	}
	return append(goes, others...)
}

// midRun runs a check session of tokens through hops with p in place of
// hop i, the last hop answering with its logits summary, and returns p's
// receipt of hop i's layers and the last hop's. want is the session's
// last-hop receipt the answer must be comparable with.
func (c *check) midRun(ctx context.Context, hops []Hop, i int, p peer.ID, tokens []int32, want consensus.Receipt) (consensus.Receipt, consensus.Receipt, error) {
	path := slices.Clone(hops)
	path[i].Peer = p
	rs, err := c.at.CheckSession(ctx, path, path[i:i+1], tokens, true)
	if err != nil {
		return consensus.Receipt{}, consensus.Receipt{}, err
	}
	rm, rt := rs[0], rs[1]
	if rt.Model != want.Model || rt.From != want.From || rt.To != want.To || rt.Positions != want.Positions ||
		rt.Logits == nil || rt.Logits.Tokens != want.Logits.Tokens {
		return rm, rt, fmt.Errorf("%w: the last hop's logits are missing or follow other tokens", ErrInconclusive)
	}
	if rm.From != hops[i].From || rm.To != hops[i].To || rm.Positions != want.Positions {
		return rm, rt, fmt.Errorf("%w: the stand-in's receipt covers other work", ErrInconclusive)
	}
	return rm, rt, nil
}

// midAudit checks hop i, before the last and on an engine that is not
// bit-reproducible (or not heard yet), by tolerance. Its hidden rows
// cannot be compared, so their effect is: the session's last hop's
// logits (computed after X) are compared with those of a check session
// through the same upstream and downstream hops with a second holder W in
// X's place. Agreement passes X. On a disagreement the entry runs the
// check session through X too, so that all three runs are of one kind
// (the evidence the leader gets is of check sessions), and then through
// a third holder; the odd one out is reported with tolerance evidence of
// the mid-path kind (consensus.Evidence.Tails), never a go node. If X
// agrees in the check but not in the session, it (or a hop around it)
// behaved otherwise there: unresolved, the attempt replays avoiding X,
// nobody is reported.
func (c *check) midAudit(ctx context.Context, i int) *Verdict {
	hops := c.hops
	x, l := hops[i], hops[len(hops)-1]
	rl, err := c.at.AskReceipt(ctx, l)
	if err != nil {
		c.inconclusive(x.Peer)
		c.Log.Debug("mid-path tolerance check: no receipt from the last hop", zap.Stringer("hop", l.Peer), zap.Error(err))
		return nil
	}
	all := c.at.Tokens()
	if rl.Logits == nil || rl.Positions > len(all) || rl.From != l.From || rl.To != l.To ||
		rl.Logits.Tokens != consensus.TokenHash(all[:rl.Positions]) {
		c.inconclusive(x.Peer)
		return nil
	}
	tokens := all[:rl.Positions]
	steps := max(rl.Positions-c.at.PromptLen(), 0) + 1
	tol := consensus.LogitsTolerance
	run := func(p peer.ID) (consensus.Receipt, consensus.Receipt, error) {
		return c.midRun(ctx, hops, i, p, tokens, rl)
	}
	alts := c.midCheckers(hops, i)
	v := -1
	var rv, tv consensus.Receipt
	for k, p := range alts {
		if rv, tv, err = run(p); err == nil {
			v = k
			break
		}
		if ctx.Err() != nil {
			return &Verdict{}
		}
		if errors.Is(err, ErrAttemptFailing) {
			return nil
		}
	}
	if v < 0 {
		c.inconclusive(x.Peer)
		c.Log.Debug("mid-path tolerance check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	rel, _ := rl.Logits.Compare(tv.Logits, tol)
	if rl.Logits.Agrees(tv.Logits, tol) {
		c.Counters.Conclusive(c.now(), c.sid, x.Peer, alts[v], rl.Positions, steps, false, true, 1)
		c.Counters.ToleranceSeen(rel, false)
		c.Work.Passed(x.Peer)
		return nil
	}
	c.Counters.Conclusive(c.now(), c.sid, x.Peer, alts[v], rl.Positions, steps, true, true, 1)
	c.Counters.ToleranceSeen(rel, true)
	c.Log.Warn("mid-path tolerance check: logits differ; checking the hop and a third holder", zap.Stringer("hop", x.Peer),
		zap.Stringer("checker", alts[v]), zap.Float64("rel", rel), zap.Int("positions", rl.Positions))
	unresolved := func(why string) *Verdict {
		c.Counters.Unresolved()
		return &Verdict{Blame: []peer.ID{x.Peer, alts[v]},
			Reason: fmt.Sprintf("hop %s and checker %s disagree on the logits after layers [%d, %d): %s",
				shortID(x.Peer), shortID(alts[v]), x.From, x.To, why)}
	}
	ra, ta, err := run(x.Peer)
	switch {
	case errors.Is(err, ErrAttemptFailing) || ctx.Err() != nil:
		return nil
	case err != nil:
		return unresolved("the hop did not answer a check")
	case ta.Logits.Agrees(tv.Logits, tol):
		c.Counters.Unresolved()
		return &Verdict{Blame: []peer.ID{x.Peer},
			Reason: fmt.Sprintf("the logits after hop %s differ in its session, not in a check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
	}
	// Bit-reproducible upstream hops must feed every run alike; otherwise
	// the difference may be theirs.
	if !slices.ContainsFunc(hops[:i], func(h Hop) bool { return !c.reproducible(h.Peer) }) && ra.InChain != rv.InChain {
		return unresolved("the upstream fed them differently")
	}
	if ra.Engine == "" || ra.Engine == engine.EngineGo {
		// X's signed receipt claims the go engine, whatever its heartbeat
		// says: no tolerance verdict may accuse it, but it is held to an
		// exact check by go holders fed the same input.
		return c.exactSettle(ctx, x, ra, rv, alts, v, func(p peer.ID) (consensus.Receipt, error) {
			rm, _, err := run(p)
			return rm, err
		}, unresolved)
	}
	for _, p := range alts[v+1:] {
		rw, tw, err := run(p)
		if errors.Is(err, ErrAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			continue
		}
		wv, wx := tw.Logits.Agrees(tv.Logits, tol), tw.Logits.Agrees(ta.Logits, tol)
		switch {
		case wv && !wx:
			c.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{ra, rv, rw}, Tails: []consensus.Receipt{ta, tv, tw}, Tolerance: true})
			return &Verdict{Blame: []peer.ID{x.Peer},
				Reason: fmt.Sprintf("hop %s failed a tolerance check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case wx && !wv:
			// The checker was off in its check; a go checker is never
			// accused by a tolerance verdict (the leader would refuse it).
			if rv.Engine != "" && rv.Engine != engine.EngineGo {
				c.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rv, ra, rw}, Tails: []consensus.Receipt{tv, ta, tw}, Tolerance: true})
			}
			c.Work.Passed(x.Peer)
			return nil
		}
		break
	}
	return unresolved("no third holder settled it")
}

// exactSettle settles a tolerance check whose hop X signed a receipt (ra)
// that names no engine other than go: no tolerance verdict may accuse
// it, so it is held to an exact comparison with go holders fed the same
// input (rv, the first checker's, then third holders run by run), and
// exact evidence accuses it (the whole ban). Without a go checker fed the
// same input nothing is proven.
func (c *check) exactSettle(ctx context.Context, x Hop, ra, rv consensus.Receipt, alts []peer.ID, v int,
	run func(peer.ID) (consensus.Receipt, error), unresolved func(string) *Verdict) *Verdict {
	isGo := func(r consensus.Receipt) bool {
		return (r.Engine == "" || r.Engine == engine.EngineGo) && c.reproducible(r.Signer)
	}
	if !isGo(rv) || !rv.SameInput(ra) {
		return unresolved("the hop claims the go engine and no go checker was fed its input")
	}
	if ra.SameOutput(rv) {
		return unresolved("the hop agrees exactly in a check, not in its session")
	}
	for _, p := range alts[v+1:] {
		if !c.reproducible(p) {
			continue
		}
		rw, err := run(p)
		if errors.Is(err, ErrAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil || !isGo(rw) || !rw.SameInput(ra) {
			continue
		}
		if rw.SameOutput(rv) {
			c.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{ra, rv, rw}})
			return &Verdict{Blame: []peer.ID{x.Peer},
				Reason: fmt.Sprintf("hop %s, claiming the go engine, failed an exact check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		}
		break
	}
	return unresolved("no go third holder settled it exactly")
}
