package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// The entry's admission queue. A request that finds no path with KV room
// for it (or no path at all, while the map settles or a layer is being
// repaired) waits here, first in first out, instead of being refused. It
// is admitted when capacity frees: a hop's report shows room, a session
// of this entry ends, the map or a peer's liveness changes. It is refused
// (ErrNoCapacity, with a Retry-After) only when its deadline passes, saying
// what it waited for, or the queue is at its bound. A request whose route
// fails for a reason no wait mends (ErrUncovered: the members cannot hold
// every layer) is refused at once, and so is a queued one when its turn
// meets that reason.
//
// Admission counts KV in blocks against what each hop last reported,
// less this entry's reservations the report does not count yet; those
// rules are node/entry's (Ledger, TryAdmit, Pump), which the simulator
// calls too. The stage's own admission stays the authority.
//
// One goroutine owns the admission decisions (admitLoop); waiters only
// enqueue, wait on their own channel, and take themselves out on their
// deadline or cancellation, under the same mutex, so that a request is
// either admitted once or refused once, never both.

// kvBlock is the KV block size, in tokens, that admission counts in.
const kvBlock = ecore.KVBlock

// kvBlocks is a session's KV need in blocks: ceil(prompt/block) +
// ceil(output/block).
func kvBlocks(prompt, output int) int { return ecore.KVBlocks(prompt, output) }

// kvReport is what a node last reported of its KV cache.
type kvReport struct {
	free     int // tokens; negative when unknown (admit: the stage decides)
	sessions int // sessions open there
	// mark identifies the report (a heartbeat, a status): reservations
	// made against it are subtracted until a newer one arrives.
	mark any
}

func (r kvReport) core() ecore.Report[any] {
	return ecore.Report[any]{Free: r.free, Sessions: r.sessions, Mark: r.mark}
}

// reservation is KV this entry admitted onto a node that the node's
// report did not count yet (node/entry's ledger).
type reservation = ecore.Reservation[any]

// waiter is one queued request.
type waiter struct {
	req   routeReq
	g     *generation // nil for a probe; a thief may take it (steal.go)
	need  int         // KV tokens
	since time.Time
	done  chan admission // buffered: the loop never blocks on it
	// deadline is when its queue timeout ends; noHold exempts it from
	// fair admission (fair.go).
	deadline time.Time
	noHold   bool
	held     bool // fair admission held it back at least once
	// why is the last reason it could not be admitted (nil: never
	// tried, behind the head); a.mu guards it.
	why error
}

// admission is the queue's answer to a waiter.
type admission struct {
	path routing.Path
	resv []*reservation
	err  error // the request cannot be routed at all (a bad profile)
	// stolen: a thief took the request and drives it (steal.go).
	stolen *stolen
}

// admitter is the entry's queue and its reservations.
type admitter struct {
	e     *entry // its routes, reports, load table and clock
	mu    sync.Mutex
	q     []*waiter
	led   *ecore.Ledger[any] // the reservations
	kick  chan struct{}      // buffered 1: something worth another look happened
	waits waitHist
	// queuedN counts requests that had to wait; refusedN those refused
	// (deadline or bound).
	queuedN, refusedN atomic.Uint64
	// hold makes every path look full (tests: a queue that only a thief
	// can drain, while the stages stay real).
	hold atomic.Bool
	// stall: per peer, the head that fair admission last deferred to
	// (fair.go); heldN counts requests it held back at least once.
	stall map[string]*ecore.StallRec
	heldN atomic.Uint64
}

func newAdmitter() *admitter {
	return &admitter{led: ecore.NewLedger[any](), kick: make(chan struct{}, 1), stall: map[string]*ecore.StallRec{}}
}

func (a *admitter) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// queued returns the queue's length and how long its head has waited.
func (a *admitter) queued(now time.Time) (n int, oldest time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.q) > 0 {
		oldest = now.Sub(a.q[0].since)
	}
	return len(a.q), oldest
}

// opened re-bases a generation's reservations once its session is open
// on every hop (its first token came back): the next report of each node
// counts it.
func (a *admitter) opened(rs []*reservation, kv func(string) kvReport) {
	if len(rs) == 0 || kv == nil {
		return
	}
	marks := make(map[string]any, len(rs))
	for _, r := range rs {
		marks[r.Node] = kv(r.Node).mark
	}
	a.mu.Lock()
	a.led.Opened(rs, func(node string) any { return marks[node] })
	a.mu.Unlock()
}

// release gives back a generation's reservations.
func (a *admitter) release(rs []*reservation) {
	if len(rs) == 0 {
		return
	}
	a.mu.Lock()
	a.unreserveLocked(rs)
	a.mu.Unlock()
	a.poke()
}

// unreserveLocked gives back reservations: a generation's at its end, or
// ones never used (a probe, a head held back). a.mu is held.
func (a *admitter) unreserveLocked(rs []*reservation) { a.led.Release(rs) }

// tryFairLocked is tryLocked under fair admission: a head that fits is
// held back (errHeld, its reservations given back) while an older peer
// head waits; wake is when to look again. a.mu is held.
func (a *admitter) tryFairLocked(w *waiter, now time.Time) (adm admission, wake time.Time, err error) {
	e := a.e
	adm, err = a.tryLocked(w)
	if err != nil {
		return adm, time.Time{}, err
	}
	hold, wake := a.olderPeerLocked(w, now)
	if !hold {
		return adm, time.Time{}, nil
	}
	e.adm.unreserveLocked(adm.resv)
	if !w.held {
		w.held = true
		e.adm.heldN.Add(1)
	}
	return admission{}, wake, errHeld
}

// errNoRoom: a path exists, but none has KV room for the request now.
var errNoRoom = ecore.ErrNoRoom

// tryLocked routes w and reserves its KV on the path's hops, or says why
// it cannot now (node/entry's TryAdmit: a path whose hop lacks room is
// tried again without that hop). a.mu is held.
func (a *admitter) tryLocked(w *waiter) (admission, error) {
	e := a.e
	if a.hold.Load() {
		return admission{}, errNoRoom
	}
	route := func(avoid []string) (routing.Path, []string, error) {
		q := w.req
		q.avoid = append(slices.Clone(q.avoid), avoid...)
		path, err := e.routeNow(q)
		if err != nil {
			return path, nil, err
		}
		hops := make([]string, len(path.Hops))
		for i, h := range path.Hops {
			hops[i] = h.Node
		}
		return path, hops, nil
	}
	report := func(node string) ecore.Report[any] {
		if e.kv == nil {
			return ecore.Unknown[any]()
		}
		return e.kv(node).core()
	}
	path, rs, err := ecore.TryAdmit(a.led, w.need, route, report)
	if err != nil {
		return admission{}, err
	}
	return admission{path: path, resv: rs}, nil
}

// errHeld: the request fits, but fair admission holds it back for an
// older request at a peer entry (fair.go).
var errHeld = ecore.ErrHeld

// waitable reports whether err leaves a request in the queue.
func waitable(err error) bool { return ecore.Waitable(err) }

// admitLoop owns admission: whenever something changed, it admits from
// the head of the queue while the head fits. A head that does not fit
// stays at the head (FIFO: later requests do not overtake it); so does
// one that fair admission holds back, which is looked at again on the
// next change or when the hold can end (a peer row turning stale, the
// stall bound, the head's own deadline), whichever comes first.
func (a *admitter) admitLoop() {
	e := a.e
	for {
		var changed <-chan struct{}
		if e.changed != nil {
			changed = e.changed() // before looking: a change during the look wakes us
		}
		var wake time.Time
		now := e.cfg.clock.Now()
		a.mu.Lock()
		var adm admission
		n := ecore.Pump(a.q, func(w *waiter) error {
			var at time.Time
			var err error
			adm, at, err = a.tryFairLocked(w, now)
			if err != nil && waitable(err) {
				w.why, wake = err, at
			}
			return err
		}, func(w *waiter, err error) {
			adm.err = err
			w.done <- adm
		})
		a.q = a.q[n:]
		a.mu.Unlock()
		var tick <-chan time.Time
		var timer clockwork.Timer
		if !wake.IsZero() {
			timer = e.cfg.clock.NewTimer(max(wake.Sub(now), time.Millisecond))
			tick = timer.Chan()
		}
		select {
		case <-e.ctx.Done():
		case <-a.kick:
		case <-changed:
		case <-tick:
		}
		if timer != nil {
			timer.Stop()
		}
		if e.ctx.Err() != nil {
			return
		}
	}
}

// admitAt returns a path with KV room for g, queueing g until there is
// one within its queue timeout, or the thief that took g from the queue
// (steal.go). The reservations it returns are given back with release
// when the generation ends. head puts g at the head of the queue (a
// request that a thief gave back), ahead of those that came after it.
func (a *admitter) admitAt(ctx context.Context, g *generation, timeout time.Duration, head bool) admission {
	e := a.e
	path, resv, st, err := e.adm.admitW(ctx, g, timeout, head)
	return admission{path: path, resv: resv, stolen: st, err: err}
}

func (a *admitter) admitW(ctx context.Context, g *generation, timeout time.Duration, head bool) (routing.Path, []*reservation, *stolen, error) {
	e := a.e
	now := e.cfg.clock.Now()
	w := &waiter{req: g.routeReq(nil), g: g, need: kvBlocks(len(g.prompt)+len(g.out), g.maxTokens-len(g.out)) * kvBlock, since: now,
		done: make(chan admission, 1), deadline: now.Add(timeout),
		// One that cannot wait, and one a thief gave back (judged oldest
		// once already), are not held for peers.
		noHold: timeout < 0 || head || g.stolen}
	a.mu.Lock()
	// node/entry's Arrive: at once when nobody waits ahead (and, with
	// fair admission, no older request waits at a peer entry), else queued.
	var adm admission
	v, err := ecore.Arrive(ecore.Arrival{Queued: len(a.q), Bound: e.cfg.queueMax, Jump: g.stolen, Head: head, Wait: timeout >= 0},
		func() error {
			var err error
			adm, _, err = a.tryFairLocked(w, now)
			return err
		})
	switch v {
	case ecore.Admitted, ecore.Refused:
		a.mu.Unlock()
		if err == nil {
			a.waits.observe(0)
		}
		return adm.path, adm.resv, nil, err
	case ecore.NoWait:
		n := len(a.q)
		a.mu.Unlock()
		if err != nil {
			return routing.Path{}, nil, nil, &retryAfter{err: fmt.Errorf("%w: %w (the request asked not to queue)", ErrNoCapacity, err), after: time.Second}
		}
		return routing.Path{}, nil, nil, &retryAfter{err: fmt.Errorf("%w: %d request(s) queued ahead (the request asked not to queue)", ErrNoCapacity, n),
			after: a.retryHint(now)}
	case ecore.Full:
		n := len(a.q)
		a.mu.Unlock()
		a.refusedN.Add(1)
		return routing.Path{}, nil, nil, &retryAfter{err: fmt.Errorf("%w: %w (%d waiting)", ErrNoCapacity, ErrQueueFull, n), after: a.retryHint(now)}
	}
	w.why = err
	if head {
		a.q = slices.Insert(a.q, 0, w)
	} else {
		a.q = append(a.q, w)
	}
	a.mu.Unlock()
	a.queuedN.Add(1)
	a.poke()

	timer := e.cfg.clock.NewTimer(timeout)
	defer timer.Stop()
	var why error
	timedOut := false
	select {
	case adm := <-w.done:
		a.waits.observe(e.cfg.clock.Since(now))
		return adm.path, adm.resv, adm.stolen, adm.err
	case <-timer.Chan():
		timedOut = true
	case <-ctx.Done():
		why = ctx.Err()
	case <-e.ctx.Done():
		why = ErrClosed
	}
	a.mu.Lock()
	if timedOut {
		why = &retryAfter{err: fmt.Errorf("%w: %w: queued %v: %s", ErrNoCapacity, ErrQueueTimeout, timeout, a.whyLocked(w)),
			after: a.retryHintLocked(e.cfg.clock.Now())}
		a.refusedN.Add(1)
	}
	if i := slices.Index(a.q, w); i >= 0 {
		a.q = slices.Delete(a.q, i, i+1)
		a.mu.Unlock()
		a.poke() // the head may have changed
		return routing.Path{}, nil, nil, why
	}
	a.mu.Unlock()
	// Admitted just as it gave up: the admission stands only for a
	// caller still waiting; otherwise its reservations go back.
	adm = <-w.done
	if ctx.Err() != nil || e.ctx.Err() != nil {
		a.release(adm.resv)
		if adm.stolen != nil {
			_ = adm.stolen.s.Reset() // the thief stops
		}
		return routing.Path{}, nil, nil, why
	}
	a.waits.observe(e.cfg.clock.Since(now))
	return adm.path, adm.resv, adm.stolen, adm.err
}

// retryHint is the Retry-After of a refusal: how long the head of the
// queue has waited (the queue drains at about that pace), within [1 s,
// the queue timeout].
func (a *admitter) retryHint(now time.Time) time.Duration {
	e := a.e
	e.adm.mu.Lock()
	defer e.adm.mu.Unlock()
	return a.retryHintLocked(now)
}

// retryHintLocked is retryHint with a.mu held.
func (a *admitter) retryHintLocked(now time.Time) time.Duration {
	e := a.e
	var oldest time.Duration
	if q := e.adm.q; len(q) > 0 {
		oldest = now.Sub(q[0].since)
	}
	return min(max(oldest.Round(time.Second), time.Second), max(e.cfg.queueTimeout, time.Second))
}

// whyLocked says why w is still waiting: the last reason it could not be
// admitted, or, never tried behind the head, the head's. a.mu is held.
func (a *admitter) whyLocked(w *waiter) string {
	why := w.why
	ahead := slices.Index(a.q, w)
	if why == nil && ahead > 0 {
		why = a.q[0].why
	}
	text := "no path with KV room"
	if why != nil {
		text = why.Error()
	}
	if ahead > 0 {
		return fmt.Sprintf("%d earlier request(s) ahead of it; the first waits: %s", ahead, text)
	}
	return text
}

// waitBounds are the queue wait histogram's upper bounds, in seconds.
var waitBounds = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// waitHist counts queue waits (admitted requests only).
type waitHist struct {
	mu     sync.Mutex
	counts [13]uint64 // per bound, then +Inf
	sum    time.Duration
	n      uint64
}

func (h *waitHist) observe(d time.Duration) {
	s := d.Seconds()
	i := len(waitBounds)
	for j, b := range waitBounds {
		if s <= b {
			i = j
			break
		}
	}
	h.mu.Lock()
	h.counts[i]++
	h.sum += d
	h.n++
	h.mu.Unlock()
}

// WaitHistogram is a histogram of queue waits: Counts[i] requests waited
// at most Bounds[i] seconds (cumulative, as Prometheus has it).
type WaitHistogram struct {
	Bounds []float64
	Counts []uint64
	Sum    time.Duration
	Count  uint64
}

func (h *waitHist) snapshot() WaitHistogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := WaitHistogram{Bounds: slices.Clone(waitBounds), Counts: make([]uint64, len(waitBounds)), Sum: h.sum, Count: h.n}
	var c uint64
	for i := range waitBounds {
		c += h.counts[i]
		out.Counts[i] = c
	}
	return out
}
