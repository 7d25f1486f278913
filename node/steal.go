package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/swarm"
)

// Work stealing between entries (FastDeploy's global scheduler, over the
// heartbeats' load table). An entry with spare path capacity (an empty
// queue of its own, and room for a session now) that sees a peer's
// entry queue with a head that waited at least the steal threshold asks
// that peer for work on proto.Steal. The loaded entry takes the head
// waiter out of its queue (under the queue's mutex, so that it is either
// admitted locally or stolen, once) and only then sends it: the prompt
// (with any tokens already delivered), sampling, what is left of max
// tokens, stop strings and profile. The thief admits it without queueing
// (a thief that finds no room now refuses it) and drives it on its own
// routing; each token comes back on the same stream and the loaded
// entry delivers it to its client as its own (its stop strings, its
// text state). A stream that breaks before the first token puts the
// request back at the head of the loaded entry's queue; after it, the
// loaded entry replays from the tokens received, as for a failed path.

// DefaultStealAfter is how long a peer's queue head must have waited
// before an idle entry steals from it.
const DefaultStealAfter = 50 * time.Millisecond

// stolen is a handed-over request as its victim's generation sees it.
type stolen struct {
	s    *swarm.Stream
	from peer.ID
}

// takeHead removes the queue's head for a thief if it waited at least
// min, and returns it; nil when there is none. A head that wants
// log-probabilities stays: the steal protocol's token frames carry none;
// so does a constrained one: its handover carries no grammar.
func (a *admitter) takeHead(now time.Time, min time.Duration) *waiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) == 0 || a.q[0].g == nil || !ecore.Stealable(a.q[0].since, a.q[0].g.lp, a.q[0].g.grammar != nil, now, min) {
		return nil
	}
	w := a.q[0]
	a.q = a.q[1:]
	return w
}

// serveSteal is the victim's side: it answers one thief's ask.
func (e *entry) serveSteal(s *swarm.Stream) {
	from := s.Peer()
	_ = s.SetDeadline(e.cfg.clock.Now().Add(e.cfg.stepTimeout))
	m, err := readSteal(s)
	if err != nil || m.Kind != stealAsk {
		_ = s.Reset()
		return
	}
	var w *waiter
	if e.ctx.Err() == nil {
		w = e.adm.takeHead(e.cfg.clock.Now(), m.MinWait)
	}
	if w == nil {
		_ = writeSteal(s, stealMsg{Kind: stealNone})
		_ = s.Close()
		return
	}
	e.adm.poke() // the head changed
	g := w.g
	h := &handover{Tokens: append(slices.Clone(g.prompt), g.out...), MaxTokens: g.maxTokens - len(g.out), Sampling: g.sp,
		Stop: g.text.stop, Profile: g.profile}
	if err := writeSteal(s, stealMsg{Kind: stealHand, Hand: h}); err != nil {
		// Not handed over: the request goes back to the head, untouched.
		_ = s.Reset()
		e.adm.pushHead(w)
		return
	}
	_ = s.SetDeadline(time.Time{})
	e.counters.stolenFrom.Add(1)
	e.cfg.log.Debug("request stolen", zap.String("thief", shortID(from)), zap.Int("tokens", len(h.Tokens)))
	w.done <- admission{stolen: &stolen{s: s, from: from}}
}

// pushHead puts a taken waiter back at the head of the queue.
func (a *admitter) pushHead(w *waiter) {
	a.mu.Lock()
	a.q = slices.Insert(a.q, 0, w)
	a.mu.Unlock()
	a.poke()
}

// runStolen delivers the tokens a thief streams back. It returns done
// when the generation is over (err says how); otherwise the stream broke
// and the caller admits the request again.
func (g *generation) runStolen(ctx context.Context, st *stolen) (done bool, err error) {
	e := g.e
	stop := context.AfterFunc(ctx, func() { _ = st.s.Reset() })
	defer stop()
	defer func() {
		if done {
			_ = st.s.Close()
		} else {
			_ = st.s.Reset()
		}
	}()
	if g.start.IsZero() {
		g.start = e.cfg.clock.Now()
	}
	g.res.Paths = append(g.res.Paths, "stolen by "+shortID(st.from))
	for {
		// A thief that is alive but stuck: its own generation fails a
		// step within the step timeout, and waits a repair at most.
		_ = st.s.SetReadDeadline(e.cfg.clock.Now().Add(e.cfg.stepTimeout + e.cfg.repairWait))
		m, rerr := readSteal(st.s)
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if e.ctx.Err() != nil {
			return true, ErrClosed
		}
		if rerr == nil && m.Kind == stealToken && int(m.Token) >= e.cfg.model.info.Vocab {
			rerr = fmt.Errorf("%w: token %d outside the vocabulary", ErrBadSteal, m.Token)
		}
		switch {
		case rerr == nil && m.Kind == stealToken:
			fin, err := g.deliver(ctx, g.gen.ThiefToken(e.cfg.clock.Now(), m.Token), nil) // never one with log-probabilities (takeHead)
			if err != nil || fin {
				return true, err
			}
		default:
			why := "stream broke"
			switch {
			case rerr != nil:
				why = rerr.Error()
			case m.Kind == stealFail:
				why = m.Err
			case m.Kind == stealDone:
				why = "ended before the generation did"
			}
			e.cfg.log.Info("stolen request returned", zap.String("thief", shortID(st.from)), zap.Int("tokens", len(g.out)),
				zap.String("reason", why))
			if g.gen.ThiefBroke(e.cfg.clock.Now(), len(g.out) > 0) {
				e.counters.replays.Add(1)
			}
			return false, nil
		}
	}
}

// steal is the thief's side of one handover: it asks p for work and, if
// handed a request, admits and drives it, streaming the tokens back.
// It reports whether it got one.
func (e *entry) steal(ctx context.Context, open func(context.Context, peer.ID) (*swarm.Stream, error), p peer.ID, minWait time.Duration) bool {
	actx, cancel := context.WithTimeout(ctx, e.cfg.stepTimeout)
	s, err := open(actx, p)
	cancel()
	if err != nil {
		return false
	}
	_ = s.SetDeadline(e.cfg.clock.Now().Add(e.cfg.stepTimeout))
	if err := writeSteal(s, stealMsg{Kind: stealAsk, MinWait: minWait}); err != nil {
		_ = s.Reset()
		return false
	}
	m, err := readSteal(s)
	if err != nil || m.Kind != stealHand {
		_ = s.Reset()
		return false
	}
	_ = s.SetDeadline(time.Time{})
	h := m.Hand
	gen, err := e.generate(ctx, Request{Tokens: h.Tokens, MaxTokens: h.MaxTokens, Sampling: h.Sampling, Stop: h.Stop,
		Profile: h.Profile, QueueTimeout: -1, stolen: true})
	if err != nil {
		// Refused here (no room after all): it goes back to the head of
		// the victim's queue, and this peer is not asked again until its
		// next heartbeat.
		_ = writeSteal(s, stealMsg{Kind: stealFail, Err: err.Error()})
		_ = s.Close()
		return false
	}
	e.counters.stolen.Add(1)
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.ctx.Err() != nil {
		gen.cancel()
		_ = s.Reset()
		return true
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer gen.cancel()
		// The victim closing or resetting the stream (its client left)
		// ends the generation here.
		go func() {
			var b [1]byte
			_, _ = s.Read(b[:])
			gen.cancel()
		}()
		for {
			d, err := gen.Recv()
			if err != nil {
				break
			}
			for _, t := range d.Tokens {
				if writeSteal(s, stealMsg{Kind: stealToken, Token: t}) != nil {
					_ = s.Reset()
					return
				}
			}
		}
		if _, err := gen.Result(); err != nil {
			_ = writeSteal(s, stealMsg{Kind: stealFail, Err: err.Error()})
		} else {
			_ = writeSteal(s, stealMsg{Kind: stealDone})
		}
		_ = s.Close()
	}()
	return true
}

// spare reports whether this entry could take a stolen request now: a
// path has room for a typical session, and its queue is empty or, with
// fair admission, its head is held back (for an older peer head, which
// the caller steals only if older than ours). ours is our head's
// enqueue instant, zero when the queue is empty.
func (e *entry) spare() (ok bool, ours time.Time) {
	a := e.adm
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) > 0 {
		if !e.cfg.fair.On || !a.q[0].held {
			return false, time.Time{}
		}
		ours = a.q[0].since
	}
	w := &waiter{req: routeReq{prompt: stealProbe, max: stealProbe}, need: kvBlocks(stealProbe, stealProbe) * kvBlock}
	adm, err := e.adm.tryLocked(w)
	if err != nil {
		return false, time.Time{}
	}
	a.unreserveLocked(adm.resv) // a probe only: give the room back
	return true, ours
}

// stealProbe is the prompt and output size, in tokens, of the session
// that spare checks room for.
const stealProbe = 64

// stealLoop is the thief: on each change of the peer table (a heartbeat)
// it looks for the peer whose queue head waited longest, past the
// threshold, and asks it for work while it has spare capacity. A peer
// that had nothing is not asked again before its next heartbeat. With
// fair admission and a queue of its own (held back), it steals only a
// head older than its own by the slack, so that stealing and holding
// agree on who goes first.
func (e *entry) stealLoop(peers *swarm.PeerTable, open func(context.Context, peer.ID) (*swarm.Stream, error), after time.Duration) {
	asked := map[peer.ID]*swarm.Heartbeat{}
	for {
		changed := peers.Changed()
		for {
			var victims []ecore.Victim
			for _, p := range peers.Live() {
				if hb := p.Heartbeat; hb != nil {
					victims = append(victims, ecore.Victim{ID: string(p.ID), Queue: hb.EntryQueue, Wait: hb.EntryWait, Asked: asked[p.ID] == hb})
				}
			}
			best := peer.ID(ecore.PickVictim(string(e.cfg.self), victims, after))
			if best == "" {
				break
			}
			ok, ours := e.spare()
			if !ok {
				break
			}
			if !ours.IsZero() {
				best = ""
				if e.heads != nil {
					best = peer.ID(ecore.OldestPeerHead(e.heads(), string(e.cfg.self), e.cfg.clock.Now(), ours, e.cfg.fair.Slack, func(id string) bool {
						p, ok := peers.Get(peer.ID(id))
						return !ok || p.Heartbeat == nil || p.Heartbeat.EntryWait < after || asked[peer.ID(id)] == p.Heartbeat
					}))
				}
				if best == "" {
					break
				}
			}
			if pp, ok := peers.Get(best); ok {
				asked[best] = pp.Heartbeat
			}
			minWait := ecore.StealMinWait(ours, e.cfg.clock.Now(), e.cfg.fair.Slack)
			if !e.steal(e.ctx, open, best, minWait) {
				continue
			}
			delete(asked, best) // it had work: it may have more
		}
		select {
		case <-e.ctx.Done():
			return
		case <-changed:
		}
	}
}
