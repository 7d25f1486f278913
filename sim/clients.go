package sim

import (
	"time"

	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// The real entry's limits (node.DefaultMaxReplays, node.DefaultRepairWait).
const (
	maxReplays = 16
	repairWait = 30.0
)

// clients are the users' side: requests that arrive, wait for a free
// client (a closed loop), are sent, and replayed or given up when an
// attempt breaks.
type clients struct {
	w          *world
	nextGID    int
	inflight   int      // requests started and not ended
	lastReplay *query   // the last replay lost made (tests)
	waiting    []*query // arrivals waiting for a free client
}

// lost is the client's reaction to a query a failure or a refusal broke.
// Strata's is the entry's own decision (node/entry's Replay.Ended, see
// replayDecision). Every blamed hop is avoided by later routes while
// another path exists.
func (cl *clients) lost(q *query) {
	s := cl.w.s
	// The client saw which hop failed: Petals clients ban it for a while.
	for _, li := range q.route {
		if to := s.links[li].To; to >= 0 && s.nodes[to].down {
			cl.w.pa.banned[to] = s.now + 60
			cl.w.pa.pathOK = false
		}
	}
	if cl.w.policy == "parallax" ||
		// Petals' replay fails once the session has generated tokens (a
		// position assertion since v2.0, docs/baselines.md).
		cl.w.policy == "petals" && q.prior+q.decodes > 0 {
		cl.failFor(q, FailNotReplayed)
		return
	}
	delay, counted, wait := 0.05, true, cl.w.spec.Timing.ClientTimeoutS
	if cl.w.policy == "strata" {
		wait = repairWait
		var ok bool
		if delay, counted, ok = cl.replayDecision(q); !ok {
			return
		}
	} else if q.retries >= maxReplays {
		cl.failFor(q, FailReplaysExhausted)
		return
	}
	// Client replay: resend the prompt and what was generated, for the rest.
	s.stats.retried++
	nq := &query{input: q.input + q.decodes, output: q.output - q.decodes, prior: q.prior + q.decodes,
		retries: q.retries, busy: q.busy, busySince: q.busySince, avoid: q.avoid, hard: q.hard, blame: -1,
		gid: q.gid, cold: q.cold, eresv: q.eresv}
	if counted {
		nq.retries++
	}
	cl.lastReplay = nq
	arrival := q.arrival
	s.schedule(&event{at: s.now + delay, kind: evCallback, fn: func() { cl.issueRetry(nq, arrival, s.now, wait) }})
}

// arrive starts a request, or queues it for a free client.
func (cl *clients) arrive(q *query) {
	if cl.w.spec.Clients > 0 && cl.inflight >= cl.w.spec.Clients {
		cl.waiting = append(cl.waiting, q)
		return
	}
	cl.inflight++
	cl.w.res.PeakInFlight = max(cl.w.res.PeakInFlight, cl.inflight)
	q.gid = cl.nextGID
	cl.nextGID++
	if cl.w.eq != nil {
		// The entry queues it for a path with KV room (node/entry.TryAdmit).
		q.id = cl.w.s.nextID
		cl.w.s.nextID++
		q.arrival = cl.w.s.now
		cl.w.eq.enter(q)
		return
	}
	// Latency counts from when a client sends it, as the testnet's does.
	cl.issueRetry(q, cl.w.s.now, cl.w.s.now, cl.w.spec.Timing.ClientTimeoutS)
}

// release: a request ended; its client takes the next waiting one, and
// the entry's reservations for it go back.
func (cl *clients) release(q *query) {
	if cl.w.eq != nil && len(q.eresv) > 0 {
		cl.w.eq.release(q.eresv)
		q.eresv = nil
		cl.w.eq.poke()
	}
	cl.inflight--
	if len(cl.waiting) > 0 {
		q := cl.waiting[0]
		cl.waiting = cl.waiting[1:]
		cl.arrive(q)
	}
}

// failFor ends a request for good.
func (cl *clients) failFor(q *query, why string) {
	s := cl.w.s
	defer cl.release(q)
	s.stats.failed++
	s.stats.fail(why)
	if cl.w.ro.covered {
		s.stats.failedWithPath++
	}
}

// issueRetry starts a new or replayed query, waiting for a route while
// the client's wait allows: a fresh request's client retries every
// second (the entry answers Retry-After: 1), a replay polls as the
// entry's reroute does.
func (cl *clients) issueRetry(q *query, arrival, since, wait float64) {
	s := cl.w.s
	q.id = s.nextID
	s.nextID++
	q.arrival = arrival
	if !cl.w.pa.admit(s, q) {
		if s.now-since > wait {
			why := FailNoRoute
			if len(q.hard) > 0 && cl.w.ro.covered {
				why = FailNoKV
			}
			cl.failFor(q, why)
			return
		}
		q.route, q.ranLayers, q.hopEnd = nil, nil, nil
		poll := 1.0
		if q.retries+q.busy > 0 {
			poll = 0.05
		}
		s.schedule(&event{at: s.now + poll, kind: evCallback, fn: func() { cl.issueRetry(q, arrival, since, wait) }})
		return
	}
	cl.send(q)
}

// launch starts a request the entry's queue admitted on hops.
func (cl *clients) launch(q *query, hops []routing.Hop) {
	cl.w.pa.setRoute(q, hops)
	cl.send(q)
}

// send starts a routed attempt's prefill, after the entry's setup time.
func (cl *clients) send(q *query) {
	s := cl.w.s
	it := &iter{q: q, prompt: true, tokens: q.input, issued: s.now}
	if d := cl.w.spec.Timing.EntrySetupMS / 1e3; d > 0 {
		s.schedule(&event{at: s.now + d, kind: evCallback, fn: func() {
			if !q.failed {
				s.depart(it, Source)
			}
		}})
		return
	}
	s.depart(it, Source)
}

// replayDecision folds q's broken attempt into its replay state with
// the entry's rule (node/entry's Replay.Ended): how long to wait before
// routing again, whether the replay counts, and false when q was given
// up (failed here). A busy hop is backed off from without spending a
// replay, within the repair wait from the first busy answer of a run; a
// prefix miss replays at once, cold, blaming nobody; a draining hop is
// left, counted but not against the cap; anything else is a replay, up
// to the cap. The sim's own latency of a reroute stays 50 ms.
func (cl *clients) replayDecision(q *query) (delay float64, counted, ok bool) {
	s := cl.w.s
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
		end.Blame = []string{cl.w.spec.Nodes[q.blame].ID}
	}
	at := func(t float64) time.Time { return cl.w.epoch.Add(time.Duration(t * float64(time.Second))) }
	r := ecore.Replay{Replays: q.retries, Busy: q.busy, BusySince: at(q.busySince), Avoid: q.avoid, Hard: q.hard, Cold: q.cold}
	d := r.Ended(ecore.Config{MaxReplays: maxReplays, RepairWait: time.Duration(repairWait * float64(time.Second))}, at(s.now), end, q.decodes > 0)
	q.busy, q.busySince, q.avoid, q.hard, q.cold = r.Busy, r.BusySince.Sub(cl.w.epoch).Seconds(), r.Avoid, r.Hard, r.Cold
	switch d.Fail {
	case ecore.FailBusy:
		cl.failFor(q, FailBusyTooLong)
		return 0, false, false
	case ecore.FailReplays:
		cl.failFor(q, FailReplaysExhausted)
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
