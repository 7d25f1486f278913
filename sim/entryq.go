package sim

import (
	"slices"
	"time"

	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// The entry's admission queue for the strata policy, on node/entry's
// decisions (TryAdmit, the KV ledger, Pump), which the node runs too: a
// new request that finds no path with KV room for it (or no path at
// all) waits, first in first out, and is admitted when a hop's report, a
// release or a map change makes room; it is refused when its deadline
// passes or the queue is at its bound. Heartbeat rounds mark the
// reports. Replays do not pass through it: the entry reroutes them
// directly (node/entry's Gen).

// The real entry's bounds (node.DefaultEntryQueueMax, DefaultQueueTimeout).
const (
	entryQueueMax     = 1024
	entryQueueTimeout = 30.0
)

// kvResv is KV the entry admitted onto a node that its reports may not
// count yet: node/entry's reservation, marked by heartbeat rounds.
type kvResv = ecore.Reservation[int]

// kvRep is a node's last heartbeat figures, as the entry reads them.
type kvRep struct {
	free     int // tokens; -1: unknown (the stage decides)
	sessions int // open and waiting
}

type entryWaiter struct {
	q     *query
	since float64
}

type entryQueue struct {
	q       []*entryWaiter
	led     *ecore.Ledger[int] // the reservations, per node ID
	rep     []kvRep
	beat    int // heartbeat rounds so far: the reports' mark
	pending bool
	// queued counts requests that waited, refused those refused; waits
	// are the admitted requests' queue times.
	queued, refused int
	waits           []float64
}

func newEntryQueue(nodes int) *entryQueue {
	eq := &entryQueue{led: ecore.NewLedger[int](), rep: make([]kvRep, nodes)}
	for i := range eq.rep {
		eq.rep[i].free = -1
	}
	return eq
}

// report records a heartbeat of node i.
func (eq *entryQueue) report(i int, r kvRep) { eq.rep[i] = r }

// reportOf is node i's last report in node/entry's form.
func (eq *entryQueue) reportOf(i int) ecore.Report[int] {
	return ecore.Report[int]{Free: eq.rep[i].free, Sessions: eq.rep[i].sessions, Mark: eq.beat}
}

// opened re-bases a request's reservations at its first token.
func (eq *entryQueue) opened(rs []*kvResv) {
	eq.led.Opened(rs, func(string) int { return eq.beat })
}

// release gives back a request's reservations.
func (eq *entryQueue) release(rs []*kvResv) { eq.led.Release(rs) }

// tryAdmit routes q and reserves its KV on the path's hops (node/entry's
// TryAdmit: a hop short of room is avoided and the route tried again).
func (w *world) tryAdmit(q *query) ([]routing.Hop, bool) {
	eq := w.eq
	route := func(avoid []string) ([]routing.Hop, []string, error) {
		hops, ok := w.routeAvoid(q, append(slices.Clone(q.avoid), avoid...))
		if !ok {
			return nil, nil, routing.ErrNoPath
		}
		names := make([]string, len(hops))
		for i, h := range hops {
			names[i] = h.Node
		}
		return hops, names, nil
	}
	hops, rs, err := ecore.TryAdmit(eq.led, ecore.KVNeed(q.input, q.output), route,
		func(node string) ecore.Report[int] { return eq.reportOf(w.idx[node]) })
	if err != nil {
		return nil, false
	}
	q.eresv = append(q.eresv, rs...)
	return hops, true
}

// enter hands a new request to the admission queue (node/entry's
// Arrive): admitted at once when nobody waits and a path has room, else
// queued until its deadline, or refused at the queue's bound.
func (w *world) enter(q *query) {
	eq, s := w.eq, w.s
	var hops []routing.Hop
	v, _ := ecore.Arrive(ecore.Arrival{Queued: len(eq.q), Bound: entryQueueMax, Wait: true}, func() error {
		var ok bool
		if hops, ok = w.tryAdmit(q); !ok {
			return ecore.ErrNoRoom
		}
		return nil
	})
	switch v {
	case ecore.Admitted:
		eq.waits = append(eq.waits, 0)
		w.launch(q, hops)
		return
	case ecore.Full:
		eq.refused++
		w.failFor(q, FailQueueRefused)
		return
	}
	wt := &entryWaiter{q: q, since: s.now}
	eq.q = append(eq.q, wt)
	eq.queued++
	s.schedule(&event{at: s.now + entryQueueTimeout, kind: evCallback, fn: func() { w.queueDeadline(wt) }})
	w.poke()
}

func (w *world) queueDeadline(wt *entryWaiter) {
	eq := w.eq
	for k, x := range eq.q {
		if x == wt {
			eq.q = append(eq.q[:k], eq.q[k+1:]...)
			eq.refused++
			w.failFor(wt.q, FailQueueRefused)
			w.poke() // the head may have changed
			return
		}
	}
}

// poke asks for another look at the queue, once, at the current time
// (the node pokes its admission loop so).
func (w *world) poke() {
	if w.eq == nil || w.eq.pending || len(w.eq.q) == 0 {
		return
	}
	w.eq.pending = true
	w.s.schedule(&event{at: w.s.now, kind: evCallback, fn: w.admitLoop})
}

// admitLoop admits from the head of the queue while the head fits; a
// head that does not fit stays there (no overtaking): node/entry's Pump.
func (w *world) admitLoop() {
	eq := w.eq
	eq.pending = false
	var hops []routing.Hop
	n := ecore.Pump(eq.q, func(wt *entryWaiter) error {
		var ok bool
		if hops, ok = w.tryAdmit(wt.q); !ok {
			return ecore.ErrNoRoom
		}
		return nil
	}, func(wt *entryWaiter, _ error) {
		eq.waits = append(eq.waits, w.s.now-wt.since)
		w.launch(wt.q, hops)
	})
	eq.q = eq.q[n:]
}

// replayDecision folds q's broken attempt into its replay state with
// the entry's rule (node/entry's Replay.Ended): how long to wait before
// routing again, whether the replay counts, and false when q was given
// up (failed here). A busy hop is backed off from without spending a
// replay, within the repair wait from the first busy answer of a run; a
// prefix miss replays at once, cold, blaming nobody; a draining hop is
// left, counted but not against the cap; anything else is a replay, up
// to the cap. The sim's own latency of a reroute stays 50 ms.
func (w *world) replayDecision(q *query) (delay float64, counted, ok bool) {
	s := w.s
	c := q.cause
	end := ecore.End{Kind: ecore.EndFailure}
	switch {
	case c.busy():
		end.Kind = ecore.EndBusy
	case c == causeMoved:
		end.Kind = ecore.EndMove
	case c == causePrefixMiss:
		end.Kind = ecore.EndPrefixMiss
	case c == causeNoKV:
		end.Kind = ecore.EndNoKV
	}
	if q.blame >= 0 && end.Kind != ecore.EndPrefixMiss {
		end.Blame = []string{w.spec.Nodes[q.blame].ID}
	}
	at := func(t float64) time.Time { return w.epoch.Add(time.Duration(t * float64(time.Second))) }
	r := ecore.Replay{Replays: q.retries, Busy: q.busy, BusySince: at(q.busySince), Avoid: q.avoid, Hard: q.hard, Cold: q.cold}
	d := r.Ended(ecore.Config{MaxReplays: maxReplays, RepairWait: time.Duration(repairWait * float64(time.Second))}, at(s.now), end, q.decodes > 0)
	q.busy, q.busySince, q.avoid, q.hard, q.cold = r.Busy, r.BusySince.Sub(w.epoch).Seconds(), r.Avoid, r.Hard, r.Cold
	switch d.Fail {
	case ecore.FailBusy:
		w.failFor(q, FailBusyTooLong)
		return 0, false, false
	case ecore.FailReplays:
		w.failFor(q, FailReplaysExhausted)
		return 0, false, false
	}
	switch {
	case d.Backoff > 0:
		return d.Backoff.Seconds(), false, true
	case end.Kind == ecore.EndPrefixMiss:
		q.blame = -1
		return 0, false, true
	}
	return 0.05, d.Counted, true
}
