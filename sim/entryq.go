package sim

import (
	"slices"

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
	w       *world
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

func newEntryQueue(w *world, nodes int) *entryQueue {
	eq := &entryQueue{w: w, led: ecore.NewLedger[int](), rep: make([]kvRep, nodes)}
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
func (eq *entryQueue) tryAdmit(q *query) ([]routing.Hop, bool) {
	route := func(avoid []string) ([]routing.Hop, []string, error) {
		hops, ok := eq.w.pa.routeAvoid(q, append(slices.Clone(q.avoid), avoid...))
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
		func(node string) ecore.Report[int] { return eq.reportOf(eq.w.m.idx[node]) })
	if err != nil {
		return nil, false
	}
	q.eresv = append(q.eresv, rs...)
	return hops, true
}

// enter hands a new request to the admission queue (node/entry's
// Arrive): admitted at once when nobody waits and a path has room, else
// queued until its deadline, or refused at the queue's bound.
func (eq *entryQueue) enter(q *query) {
	s := eq.w.s
	var hops []routing.Hop
	v, _ := ecore.Arrive(ecore.Arrival{Queued: len(eq.q), Bound: entryQueueMax, Wait: true}, func() error {
		var ok bool
		if hops, ok = eq.tryAdmit(q); !ok {
			return ecore.ErrNoRoom
		}
		return nil
	})
	switch v {
	case ecore.Admitted:
		eq.waits = append(eq.waits, 0)
		eq.w.cl.launch(q, hops)
		return
	case ecore.Full:
		eq.refused++
		eq.w.cl.failFor(q, FailQueueRefused)
		return
	}
	wt := &entryWaiter{q: q, since: s.now}
	eq.q = append(eq.q, wt)
	eq.queued++
	s.schedule(&event{at: s.now + entryQueueTimeout, kind: evCallback, fn: func() { eq.queueDeadline(wt) }})
	eq.poke()
}

func (eq *entryQueue) queueDeadline(wt *entryWaiter) {
	for k, x := range eq.q {
		if x == wt {
			eq.q = append(eq.q[:k], eq.q[k+1:]...)
			eq.refused++
			eq.w.cl.failFor(wt.q, FailQueueRefused)
			eq.poke() // the head may have changed
			return
		}
	}
}

// poke asks for another look at the queue, once, at the current time
// (the node pokes its admission loop so).
func (eq *entryQueue) poke() {
	if eq == nil || eq.pending || len(eq.q) == 0 {
		return
	}
	eq.pending = true
	eq.w.s.schedule(&event{at: eq.w.s.now, kind: evCallback, fn: eq.admitLoop})
}

// admitLoop admits from the head of the queue while the head fits; a
// head that does not fit stays there (no overtaking): node/entry's Pump.
func (eq *entryQueue) admitLoop() {
	eq.pending = false
	var hops []routing.Hop
	n := ecore.Pump(eq.q, func(wt *entryWaiter) error {
		var ok bool
		if hops, ok = eq.tryAdmit(wt.q); !ok {
			return ecore.ErrNoRoom
		}
		return nil
	}, func(wt *entryWaiter, _ error) {
		eq.waits = append(eq.waits, eq.w.s.now-wt.since)
		eq.w.cl.launch(wt.q, hops)
	})
	eq.q = eq.q[n:]
}
