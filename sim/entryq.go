package sim

import "github.com/stratanet/strata/routing"

// The entry's admission queue as node/queue.go runs it, for the strata
// policy: a new request that finds no path with KV room for it (or no
// path at all) waits, first in first out, and is admitted when a hop's
// report, a release or a map change makes room; it is refused when its
// deadline passes or the queue is at its bound. A hop's room is its last
// heartbeat's free KV less what this entry admitted onto it since: a
// reservation counts until a report newer than the first newer one the
// entry looked at after the session opened (its first token), or until
// the request ends. Replays do not pass
// through it: the real entry reroutes them directly (node/entry.go).

// The real entry's bounds (node.DefaultEntryQueueMax, DefaultQueueTimeout).
const (
	entryQueueMax     = 1024
	entryQueueTimeout = 30.0
)

// kvResv is KV the entry admitted onto a node that its reports may not
// count yet.
type kvResv struct {
	node     int
	need     int // tokens
	opened   bool
	openBeat int // the report current when the session opened
	next     int // the first newer report a look saw (0: none yet)
}

// countedBy reports whether the report of beat counts r's session: one
// newer than the first newer report a look saw, since that one may have
// been on its way before the session opened (node/queue.go).
func (r *kvResv) countedBy(beat int) bool {
	switch {
	case !r.opened || beat == r.openBeat:
		return false
	case r.next == 0:
		r.next = beat
		return false
	}
	return beat != r.next
}

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
	resv    map[int][]*kvResv
	rep     []kvRep
	beat    int // reports so far
	pending bool
	// queued counts requests that waited, refused those refused; waits
	// are the admitted requests' queue times.
	queued, refused int
	waits           []float64
}

func newEntryQueue(nodes int) *entryQueue {
	eq := &entryQueue{resv: map[int][]*kvResv{}, rep: make([]kvRep, nodes)}
	for i := range eq.rep {
		eq.rep[i].free = -1
	}
	return eq
}

// kvNeed is the queue's KV need in tokens: whole blocks of the prompt
// and of the output (node/queue.go's kvBlocks × kvBlock).
func kvNeed(prompt, output int) int {
	return ((prompt+prefixBlock-1)/prefixBlock + (output+prefixBlock-1)/prefixBlock) * prefixBlock
}

// report records a heartbeat of node i.
func (eq *entryQueue) report(i int, r kvRep) { eq.rep[i] = r }

// fits reports whether node i has room for need tokens, dropping the
// reservations its report now counts.
func (eq *entryQueue) fits(i, need int) bool {
	l := eq.resv[i]
	kept := l[:0]
	held := 0
	for _, r := range l {
		if !r.countedBy(eq.beat) {
			kept = append(kept, r)
			held += r.need
		}
	}
	for k := len(kept); k < len(l); k++ {
		l[k] = nil
	}
	if len(kept) == 0 {
		delete(eq.resv, i)
	} else {
		eq.resv[i] = kept
	}
	rep := eq.rep[i]
	if rep.free < 0 || rep.sessions == 0 && len(kept) == 0 {
		return true
	}
	return rep.free-held >= need
}

// opened re-bases a request's reservations at its first token.
func (eq *entryQueue) opened(rs []*kvResv) {
	for _, r := range rs {
		if !r.opened {
			r.opened, r.openBeat = true, eq.beat
		}
	}
}

// release gives back a request's reservations.
func (eq *entryQueue) release(rs []*kvResv) {
	for _, r := range rs {
		l := eq.resv[r.node]
		for k, x := range l {
			if x == r {
				l = append(l[:k], l[k+1:]...)
				break
			}
		}
		if len(l) == 0 {
			delete(eq.resv, r.node)
		} else {
			eq.resv[r.node] = l
		}
	}
}

// tryAdmit routes q and reserves its KV on the path's hops; a hop short
// of room is avoided and the route tried again, up to 8 times.
func (w *world) tryAdmit(q *query) ([]routing.Hop, bool) {
	eq := w.eq
	need := kvNeed(q.input, q.output)
	var avoid []string
	for range 8 {
		hops, ok := w.routeAvoid(q, append(append([]string(nil), q.avoid...), avoid...), false)
		if !ok {
			return nil, false
		}
		short := ""
		for _, h := range hops {
			if !eq.fits(w.idx[h.Node], need) {
				short = h.Node
				break
			}
		}
		if short == "" {
			for _, h := range hops {
				j := w.idx[h.Node]
				if eq.rep[j].free < 0 {
					continue
				}
				r := &kvResv{node: j, need: need}
				eq.resv[j] = append(eq.resv[j], r)
				q.eresv = append(q.eresv, r)
			}
			return hops, true
		}
		avoid = append(avoid, short)
	}
	return nil, false
}

// enter hands a new request to the admission queue: admitted at once
// when nobody waits and a path has room, else queued until its deadline.
func (w *world) enter(q *query) {
	eq, s := w.eq, w.s
	if len(eq.q) == 0 {
		if hops, ok := w.tryAdmit(q); ok {
			eq.waits = append(eq.waits, 0)
			w.launch(q, hops)
			return
		}
	}
	if len(eq.q) >= entryQueueMax {
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
// (as node/queue.go's poke wakes its admission loop).
func (w *world) poke() {
	if w.eq == nil || w.eq.pending || len(w.eq.q) == 0 {
		return
	}
	w.eq.pending = true
	w.s.schedule(&event{at: w.s.now, kind: evCallback, fn: w.admitLoop})
}

// admitLoop admits from the head of the queue while the head fits; a
// head that does not fit stays there (no overtaking).
func (w *world) admitLoop() {
	eq := w.eq
	eq.pending = false
	for len(eq.q) > 0 {
		wt := eq.q[0]
		hops, ok := w.tryAdmit(wt.q)
		if !ok {
			return
		}
		eq.q = eq.q[1:]
		eq.waits = append(eq.waits, w.s.now-wt.since)
		w.launch(wt.q, hops)
	}
}
