package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The entry's admission queue, on the entry rig's fake clock: requests
// that find no hop with KV room wait, first in first out, and run once
// room frees; they are refused only past their deadline or the queue's
// bound.

// queuedGen is a generation started on a goroutine of its own, since its
// Generate waits in the queue.
type queuedGen struct {
	s   *Stream
	err error
	tag int
}

func (r *entryRig) generateAsync(req Request, tag int, out chan<- queuedGen) {
	go func() {
		s, err := r.e.generate(context.Background(), req)
		out <- queuedGen{s: s, err: err, tag: tag}
	}()
}

// waitQueued waits until n requests wait in the queue.
func (r *entryRig) waitQueued(n int) {
	r.t.Helper()
	waitFor(r.t, 30*time.Second, "requests queued", func() bool {
		got, _ := r.e.adm.queued(r.clock.Now())
		return got == n
	})
}

func (r *entryRig) opens() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, steps := range r.seen {
		for _, s := range steps {
			if s.Open != nil {
				n++
			}
		}
	}
	return n
}

func noGen(t *testing.T, out <-chan queuedGen) {
	t.Helper()
	select {
	case g := <-out:
		t.Fatalf("request %d left the queue (err %v) with no room", g.tag, g.err)
	default:
	}
}

func recvGen(t *testing.T, out <-chan queuedGen) queuedGen {
	t.Helper()
	select {
	case g := <-out:
		return g
	case <-time.After(30 * time.Second):
		t.Fatal("no request left the queue")
		return queuedGen{}
	}
}

// TestQueueAdmitsWhenCapacityFrees: with the only hop's KV cache full, a
// request waits instead of being refused, and runs to the same tokens
// once the hop reports room.
func TestQueueAdmitsWhenCapacityFrees(t *testing.T) {
	r := newEntryRig(t, 1)
	a := r.peers[0]
	r.report(a, 0, 3)
	out := make(chan queuedGen, 1)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 6}, 0, out)
	r.waitQueued(1)
	r.report(a, 10, 3) // room, but not for 3 + 6 tokens in blocks of 16
	r.waitQueued(1)
	noGen(t, out)
	r.report(a, 2*kvBlock, 3)
	g := recvGen(t, out)
	if g.err != nil {
		t.Fatal(g.err)
	}
	res, err := g.s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 6)
	if m := r.e.adm.queuedN.Load(); m != 1 || r.e.adm.waits.snapshot().Count != 1 {
		t.Fatalf("%d queued, %d waits counted", m, r.e.adm.waits.snapshot().Count)
	}
}

// TestQueueDeadline: a request that finds no room within its deadline is
// refused then, not before, with ErrNoCapacity, ErrQueueTimeout and a
// Retry-After; the queue is empty afterwards.
func TestQueueDeadline(t *testing.T) {
	r := newEntryRig(t, 1)
	r.report(r.peers[0], 0, 1)
	out := make(chan queuedGen, 1)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4, QueueTimeout: 5 * time.Second}, 0, out)
	r.waitQueued(1)
	if err := r.clock.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(5*time.Second - time.Millisecond)
	noGen(t, out)
	r.clock.Advance(time.Millisecond)
	g := recvGen(t, out)
	if !errors.Is(g.err, ErrNoCapacity) || !errors.Is(g.err, ErrQueueTimeout) || RetryAfter(g.err) < time.Second ||
		!strings.Contains(g.err.Error(), "queued 5s: no path has KV room now (the swarm is busy)") {
		t.Fatalf("err %v, retry after %v", g.err, RetryAfter(g.err))
	}
	r.waitQueued(0)
	if r.opens() != 0 || r.e.adm.refusedN.Load() != 1 {
		t.Fatalf("%d sessions opened, %d refused", r.opens(), r.e.adm.refusedN.Load())
	}
	// Not queueing at all, on request: refused at once.
	_, err := r.e.generate(context.Background(), Request{Tokens: []int32{5}, MaxTokens: 4, QueueTimeout: -1})
	if !errors.Is(err, ErrNoCapacity) || RetryAfter(err) <= 0 {
		t.Fatalf("no-queue request: %v", err)
	}
}

// TestQueueFull: past the queue's bound a request is refused at once
// with ErrQueueFull (and ErrNoCapacity, 503); the queued ones stay.
func TestQueueFull(t *testing.T) {
	r := newEntryRig(t, 1)
	r.e.cfg.queueMax = 2
	r.report(r.peers[0], 0, 1)
	out := make(chan queuedGen, 2)
	for i := range 2 {
		r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, i, out)
		r.waitQueued(i + 1)
	}
	_, err := r.e.generate(context.Background(), Request{Tokens: []int32{5}, MaxTokens: 4})
	if !errors.Is(err, ErrNoCapacity) || !errors.Is(err, ErrQueueFull) || RetryAfter(err) < time.Second {
		t.Fatalf("third request: %v (retry after %v)", err, RetryAfter(err))
	}
	r.waitQueued(2)
	r.report(r.peers[0], 1<<20, 1)
	for range 2 {
		g := recvGen(t, out)
		if g.err != nil {
			t.Fatal(g.err)
		}
		if _, err := g.s.Result(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueueFIFO: with room for one session at a time, queued requests are
// admitted in arrival order, one per report with room for one more (the
// reservations of those admitted hold their room). The hop takes the
// steps and never answers, so that no session ends.
func TestQueueFIFO(t *testing.T) {
	r := newEntryRig(t, 1)
	a := r.peers[0]
	r.hang[a] = true
	r.report(a, 0, 1)
	out := make(chan queuedGen, 3)
	for i := range 3 {
		r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 4}, i, out)
		r.waitQueued(i + 1)
	}
	room := kvBlocks(3, 4) * kvBlock
	for i := range 3 {
		// Room for one more each time: the sessions admitted before hold
		// their reservations (they never open: the hop does not answer).
		r.report(a, room*(i+1), 1)
		g := recvGen(t, out)
		if g.err != nil || g.tag != i {
			t.Fatalf("admitted request %d (err %v), want %d", g.tag, g.err, i)
		}
		r.waitQueued(2 - i)
		noGen(t, out)
	}
}

// TestQueueAcrossNodeDeath: a request waits while both hops are full; the
// one it would have gone to dies meanwhile; once the other reports room
// the request runs there, once: it was neither lost nor run twice.
func TestQueueAcrossNodeDeath(t *testing.T) {
	r := newEntryRig(t, 2)
	a, b := r.peers[0], r.peers[1]
	r.report(a, 0, 2)
	r.report(b, 0, 2)
	out := make(chan queuedGen, 1)
	r.generateAsync(Request{Tokens: []int32{5, 6, 7}, MaxTokens: 5}, 0, out)
	r.waitQueued(1)
	r.mu.Lock()
	r.dead[a] = true
	r.mu.Unlock()
	r.bump()
	r.waitQueued(1)
	noGen(t, out)
	r.report(b, 1<<20, 2)
	g := recvGen(t, out)
	if g.err != nil {
		t.Fatal(g.err)
	}
	res, err := g.s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 5)
	r.mu.Lock()
	onA := len(r.seen[a])
	r.mu.Unlock()
	if n := r.opens(); n != 1 || onA != 0 || len(res.Paths) != 1 {
		t.Fatalf("%d sessions opened (%d steps on the dead hop), paths %v: want one run", n, onA, res.Paths)
	}
	if r.e.adm.refusedN.Load() != 0 {
		t.Fatal("refused")
	}
}
