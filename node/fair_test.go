package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/swarm"
)

// Swarm-wide oldest-first admission (fair.go): the queue logic on the
// entry rig's fake clock, with the load table set by the test, then on
// real nodes.

const (
	fairBeat  = 500 * time.Millisecond
	fairStall = 4 * time.Second
)

func newFairRig(t *testing.T) *entryRig {
	return newEntryRigWith(t, 1, func(c *entryConfig) { c.fair = newFairConfig(true, fairBeat, fairStall) })
}

// setHeads replaces the load table and tells the queue, as a heartbeat
// would.
func (r *entryRig) setHeads(hs ...peerHead) {
	r.mu.Lock()
	r.heads = hs
	r.mu.Unlock()
	r.bump()
}

func (r *entryRig) held() uint64 { return r.e.adm.heldN.Load() }

// blockTimers waits until n fake-clock timers are set (the queued
// request's deadline, the queue's wake for a hold).
func (r *entryRig) blockTimers(n int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(ctx, n); err != nil {
		r.t.Fatal(err)
	}
}

func (r *entryRig) finish(g queuedGen, prompt, max int) {
	r.t.Helper()
	if g.err != nil {
		r.t.Fatalf("request %d: %v", g.tag, g.err)
	}
	res, err := g.s.Result()
	if err != nil {
		r.t.Fatalf("request %d: %v", g.tag, err)
	}
	r.wantTokens(res, prompt, max)
}

// TestFairHoldsForOlderPeerHead: with room on the path, a new request
// (and one behind it, not counted as held: FIFO keeps it) waits while a
// peer entry's head is older; a request that asked not to queue is not
// held; both run once the peer's queue is no longer than ours. A new
// request held so runs once the older head is gone from the table.
func TestFairHoldsForOlderPeerHead(t *testing.T) {
	r := newFairRig(t)
	x := testPeer(t, 50)
	now := r.clock.Now()
	r.setHeads(peerHead{ID: string(x), N: 100, Enq: now.Add(-2 * time.Second), Until: now.Add(time.Hour)})
	s, err := r.e.generate(context.Background(), Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4, QueueTimeout: -1})
	if err != nil {
		t.Fatalf("a request that asked not to queue: %v", err)
	}
	r.finish(queuedGen{s: s, tag: -1}, 3, 4)
	out := make(chan queuedGen, 2)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 0, out)
	r.waitQueued(1)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 1, out)
	r.waitQueued(2)
	noGen(t, out)
	if h := r.held(); h != 1 {
		t.Fatalf("%d requests held back, want the head only", h)
	}

	// The peer's queue is now no longer than ours: it is not waited for.
	r.setHeads(peerHead{ID: string(x), N: 1, Enq: now.Add(-2 * time.Second), Until: now.Add(time.Hour)})
	r.finish(recvGen(t, out), 3, 4)
	r.finish(recvGen(t, out), 3, 4)
	r.waitQueued(0)

	r.setHeads(peerHead{ID: string(x), N: 2, Enq: now.Add(-2 * time.Second), Until: now.Add(time.Hour)})
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 2, out)
	r.waitQueued(1)
	noGen(t, out)
	r.setHeads() // the peer's head left its queue
	r.finish(recvGen(t, out), 3, 4)
	if h := r.held(); h != 2 {
		t.Fatalf("%d held", h)
	}
}

// TestFairIgnoresStaleRows: a stale row, or a peer head older by no more
// than the slack, holds nothing; a row that turns stale while it holds a
// request releases it with no further change to the table.
func TestFairIgnoresStaleRows(t *testing.T) {
	r := newFairRig(t)
	x, y := testPeer(t, 50), testPeer(t, 51)
	now := r.clock.Now()
	r.setHeads(peerHead{ID: string(x), N: 100, Enq: now.Add(-5 * time.Second), Until: now},
		peerHead{ID: string(y), N: 100, Enq: now.Add(-fairBeat / 4), Until: now.Add(time.Hour)})
	s, err := r.e.generate(context.Background(), Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4, QueueTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.finish(queuedGen{s: s}, 3, 4)
	if h := r.held(); h != 0 {
		t.Fatalf("%d held for a stale row or a head within the slack", h)
	}

	r.setHeads(peerHead{ID: string(x), N: 100, Enq: now.Add(-5 * time.Second), Until: now.Add(time.Second)})
	out := make(chan queuedGen, 1)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4, QueueTimeout: 10 * time.Second}, 0, out)
	r.waitQueued(1)
	r.blockTimers(2)
	r.clock.Advance(time.Second - time.Millisecond)
	noGen(t, out)
	r.clock.Advance(time.Millisecond) // x's row is stale now
	r.finish(recvGen(t, out), 3, 4)
	if h := r.held(); h != 1 {
		t.Fatalf("%d held", h)
	}
}

// TestFairStallBound: a peer head that never moves (one that never fits
// anywhere) holds a request for the stall bound at most, counted from
// the first hold; a head that moves restarts the bound.
func TestFairStallBound(t *testing.T) {
	r := newFairRig(t)
	x := testPeer(t, 50)
	t0 := r.clock.Now()
	r.setHeads(peerHead{ID: string(x), N: 100, Enq: t0.Add(-2 * time.Second), Until: t0.Add(time.Hour)})
	out := make(chan queuedGen, 2)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 0, out)
	r.waitQueued(1)
	r.blockTimers(2)
	r.clock.Advance(fairStall - time.Millisecond)
	noGen(t, out)
	r.clock.Advance(time.Millisecond)
	r.finish(recvGen(t, out), 3, 4)

	// A head that moves by more than a heartbeat interval is progress.
	t1 := r.clock.Now() // x's row is the same head: its bound has passed
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 1, out)
	r.finish(recvGen(t, out), 3, 4)
	moved := t0.Add(-2 * time.Second).Add(2 * fairBeat)
	r.setHeads(peerHead{ID: string(x), N: 100, Enq: moved, Until: t1.Add(time.Hour)})
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, 2, out)
	r.waitQueued(1)
	r.blockTimers(2)
	r.clock.Advance(fairStall / 2)
	moved = moved.Add(2 * fairBeat)
	r.setHeads(peerHead{ID: string(x), N: 100, Enq: moved, Until: t1.Add(time.Hour)})
	waitFor(t, 30*time.Second, "the hold restarted by the moved head", func() bool {
		r.e.adm.mu.Lock()
		defer r.e.adm.mu.Unlock()
		s := r.e.adm.stall[string(x)]
		return s != nil && s.Enq.Equal(moved)
	})
	r.blockTimers(2)
	r.clock.Advance(fairStall/2 + time.Millisecond) // past the first head's bound
	noGen(t, out)
	r.clock.Advance(fairStall/2 - time.Millisecond)
	r.finish(recvGen(t, out), 3, 4)
}

// TestFairDeadlineBound: a request is not held within fairMargin of its
// own deadline: it is admitted then, not refused.
func TestFairDeadlineBound(t *testing.T) {
	r := newFairRig(t)
	now := r.clock.Now()
	r.setHeads(peerHead{ID: string(testPeer(t, 50)), N: 100, Enq: now.Add(-2 * time.Second), Until: now.Add(time.Hour)})
	out := make(chan queuedGen, 1)
	const timeout = 3 * time.Second
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4, QueueTimeout: timeout}, 0, out)
	r.waitQueued(1)
	r.blockTimers(2)
	r.clock.Advance(timeout - fairMargin - time.Millisecond)
	noGen(t, out)
	r.clock.Advance(time.Millisecond)
	r.finish(recvGen(t, out), 3, 4)
	if n := r.e.adm.refusedN.Load(); n != 0 {
		t.Fatalf("%d refused", n)
	}
}

// TestFairOnSwarm: on real nodes, B (fair admission on) holds a new
// request while A's queue head, older, shows in the load table, and
// runs it once that head leaves A's queue; C (fair admission off)
// admits at once; an ask whose min wait exceeds A's head's wait gets
// nothing.
func TestFairOnSwarm(t *testing.T) {
	const prompt, maxTokens = "Once upon a time", 12
	noStall := func(c *config) error { c.fairStall = time.Hour; return nil }
	// B's rows turn stale after 3 of its heartbeat intervals: longer
	// than the test's own, so that a late heartbeat from A on a loaded
	// machine does not end the hold.
	ns := stealSwarm(t, nil, []Option{noStall, WithSwarmOptions(swarm.WithHeartbeatInterval(4 * testHeartbeat))},
		[]Option{WithFairAdmission(false)})
	a, b, c := ns[0], ns[1], ns[2]
	a.entry.adm.hold.Store(true)
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aerr := make(chan error, 2)
	for range 2 { // a queue longer than B's will be
		go func() {
			_, err := a.Complete(actx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
			aerr <- err
		}()
	}
	waitFor(t, 10*time.Second, "A's queue in B's and C's load tables", func() bool {
		for _, n := range []*Node{b, c} {
			p, ok := n.host.Peers().Get(a.ID())
			if !ok || p.Heartbeat == nil || p.Heartbeat.EntryQueue != 2 {
				return false
			}
		}
		return true
	})

	// A thief whose own head is older than A's gets nothing.
	s, err := c.host.Streams().Open(ctx, a.ID(), proto.Steal)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSteal(s, stealMsg{Kind: stealAsk, MinWait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if m, err := readSteal(s); err != nil || m.Kind != stealNone {
		t.Fatalf("ask with a min wait above A's head's: %v, %+v", err, m)
	}
	_ = s.Close()

	// C, fair admission off, does not wait for A's head.
	if res, err := c.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy}); err != nil || !slices.Equal(res.Tokens, want) {
		t.Fatalf("C: %v, tokens equal %v", err, slices.Equal(res.Tokens, want))
	}
	if mc := c.Metrics(); mc.EntryQueued != 0 || c.entry.adm.heldN.Load() != 0 {
		t.Fatalf("C queued %d, held %d", mc.EntryQueued, c.entry.adm.heldN.Load())
	}

	// A's head older than B's slack (half its interval) by far.
	waitFor(t, 10*time.Second, "A's head a second old in B's load table", func() bool {
		p, ok := b.host.Peers().Get(a.ID())
		return ok && p.Heartbeat != nil && p.Heartbeat.EntryQueue == 2 && p.Heartbeat.EntryWait >= time.Second
	})
	berr := make(chan error, 1)
	go func() {
		res, err := b.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy, QueueTimeout: time.Hour})
		if err == nil && !slices.Equal(res.Tokens, want) {
			err = errMismatch
		}
		berr <- err
	}()
	waitFor(t, 10*time.Second, "B holds its request", func() bool {
		select {
		case err := <-berr:
			t.Fatalf("B's request ran at once while A's older head waited: %v", err)
		default:
		}
		return b.Metrics().EntryQueue == 1 && b.entry.adm.heldN.Load() == 1
	})
	// Three more heartbeats from A, and B still holds it.
	for range 3 {
		p, _ := b.host.Peers().Get(a.ID())
		last := p.HeardAt
		waitFor(t, 10*time.Second, "a heartbeat from A", func() bool {
			p, _ := b.host.Peers().Get(a.ID())
			return p.HeardAt.After(last)
		})
	}
	select {
	case err := <-berr:
		t.Fatalf("B's request left its queue while A's older head waited: %v", err)
	default:
	}
	if mb := b.Metrics(); mb.EntryQueue != 1 {
		t.Fatalf("B's queue %d", mb.EntryQueue)
	}

	acancel() // A's requests leave A's queue
	for range 2 {
		if err := <-aerr; err == nil {
			t.Fatal("A's cancelled request succeeded")
		}
	}
	if err := <-berr; err != nil {
		t.Fatalf("B: %v", err)
	}
	if mb := b.Metrics(); mb.EntryQueue != 0 || mb.EntryQueued != 1 || mb.EntryRefused != 0 {
		t.Fatalf("B: %d queued now, %d queued, %d refused", mb.EntryQueue, mb.EntryQueued, mb.EntryRefused)
	}
}

// TestFairStealsOlderHead: B, with stealing on and its own request held
// for A's older head (A's queue is longer), steals that head (its ask
// carries its own head's wait, so it would not take a younger one) and
// drives it; it runs its own and, with its queue empty, steals A's
// other request too (A's own paths look full).
func TestFairStealsOlderHead(t *testing.T) {
	const prompt, maxTokens = "Once upon a time", 12
	noStall := func(c *config) error { c.fairStall = time.Hour; return nil }
	ns := stealSwarm(t, nil, []Option{noStall, WithStealing(true), WithSwarmOptions(swarm.WithHeartbeatInterval(4 * testHeartbeat))})
	a, b := ns[0], ns[1]
	a.entry.adm.hold.Store(true)
	b.entry.adm.hold.Store(true) // B's own head waits until the test lets it
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := func(n *Node, out chan<- error) {
		res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy, QueueTimeout: time.Hour})
		if err == nil && !slices.Equal(res.Tokens, want) {
			err = errMismatch
		}
		out <- err
	}
	aerr, berr := make(chan error, 2), make(chan error, 1)
	go run(a, aerr)
	go run(a, aerr) // a queue longer than B's will be
	waitFor(t, 10*time.Second, "A's head a second old in B's load table", func() bool {
		p, ok := b.host.Peers().Get(a.ID())
		return ok && p.Heartbeat != nil && p.Heartbeat.EntryQueue == 2 && p.Heartbeat.EntryWait >= time.Second
	})
	go run(b, berr)
	waitFor(t, 10*time.Second, "B's request queued", func() bool { return b.Metrics().EntryQueue == 1 })
	b.entry.adm.hold.Store(false) // B has room now: it holds its head for A's, and steals A's
	b.entry.adm.poke()
	for range 2 {
		if err := <-aerr; err != nil {
			t.Fatalf("A: %v", err)
		}
	}
	if err := <-berr; err != nil {
		t.Fatalf("B: %v", err)
	}
	ma, mb := a.Metrics(), b.Metrics()
	if ma.StolenFrom != 2 || mb.Stolen != 2 || mb.EntryHeld != 1 || mb.EntryQueue != 0 || ma.EntryQueue != 0 {
		t.Fatalf("stolen from A %d, by B %d; B held %d; queues A %d, B %d", ma.StolenFrom, mb.Stolen, mb.EntryHeld, ma.EntryQueue, mb.EntryQueue)
	}
}
