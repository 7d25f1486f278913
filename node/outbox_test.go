package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// fakeWire records what the outbox sends; a peer in block waits on its
// channel before each send.
type fakeWire struct {
	mu    sync.Mutex
	got   map[peer.ID][]Message
	block map[peer.ID]chan struct{}
	fail  map[peer.ID]error
	sent  chan peer.ID
	// held receives a blocked peer's ID when its sender starts waiting.
	held chan peer.ID
}

func newFakeWire() *fakeWire {
	return &fakeWire{got: map[peer.ID][]Message{}, block: map[peer.ID]chan struct{}{}, fail: map[peer.ID]error{}, sent: make(chan peer.ID, 4096), held: make(chan peer.ID, 4096)}
}

func (w *fakeWire) send(ctx context.Context, to peer.ID, m Message) error {
	w.mu.Lock()
	gate, err := w.block[to], w.fail[to]
	w.mu.Unlock()
	if gate != nil {
		w.held <- to
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err == nil {
		w.mu.Lock()
		w.got[to] = append(w.got[to], m)
		w.mu.Unlock()
	}
	w.sent <- to
	return err
}

func (w *fakeWire) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		<-w.sent
	}
}

// newTestOutbox is an outbox on w that the test's cleanup closes, ending
// its context first so that blocked senders give up.
func newTestOutbox(t *testing.T, w *fakeWire) *fifoOutbox {
	ctx, cancel := context.WithCancel(context.Background())
	o := newOutbox(ctx, w.send, zap.NewNop())
	t.Cleanup(func() { cancel(); o.close() })
	return o
}

func TestOutboxKeepsOrderPerPeer(t *testing.T) {
	w := newFakeWire()
	w.block["slow"] = make(chan struct{})
	o := newTestOutbox(t, w)
	const n = 200
	for i := range n {
		o.token("a", &Token{Pos: i})
		o.token("slow", &Token{Pos: i})
	}
	// A peer that does not take its messages delays only its own queue.
	w.wait(t, n)
	w.mu.Lock()
	for i, m := range w.got["a"] {
		if m.(*Token).Pos != i {
			t.Fatalf("message %d to a is position %d", i, m.(*Token).Pos)
		}
	}
	if len(w.got["a"]) != n || len(w.got["slow"]) != 0 {
		t.Fatalf("sent %d to a, %d to the blocked peer", len(w.got["a"]), len(w.got["slow"]))
	}
	w.mu.Unlock()
	close(w.block["slow"])
	w.wait(t, n)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, m := range w.got["slow"] {
		if m.(*Token).Pos != i {
			t.Fatalf("message %d to the slow peer is position %d", i, m.(*Token).Pos)
		}
	}
}

// TestOutboxForwardFailureReachesEntry: a step that cannot be forwarded
// turns into an error to the session's entry, naming the next hop.
func TestOutboxForwardFailureReachesEntry(t *testing.T) {
	w := newFakeWire()
	w.fail["next"] = errors.New("connection refused")
	o := newTestOutbox(t, w)
	o.forward("next", &Step{Session: SessionID{7}, Entry: "entry"})
	w.wait(t, 2)
	w.mu.Lock()
	defer w.mu.Unlock()
	got := w.got["entry"]
	if len(got) != 1 {
		t.Fatalf("entry got %d messages", len(got))
	}
	e := got[0].(*ErrorMsg)
	if e.Code != CodeUnreachable || e.Peer != "next" || e.Session != (SessionID{7}) {
		t.Fatalf("entry got %+v", e)
	}
}

// TestOutboxBoundsQueue: past maxPeerQueue a message fails at once, and
// a forwarded step's entry hears CodeBusy.
func TestOutboxBoundsQueue(t *testing.T) {
	w := newFakeWire()
	w.block["stuck"] = make(chan struct{})
	o := newTestOutbox(t, w)
	o.max = 4
	var failed []error
	post := func() { o.post("stuck", &Close{}, func(err error) { failed = append(failed, err) }) }
	post()
	<-w.held // the sender holds the first; four more fit, the fifth fails
	for range 5 {
		post()
	}
	if len(failed) != 1 || !errors.Is(failed[0], errQueueFull) {
		t.Fatalf("overflow: %v", failed)
	}
	o.forward("stuck", &Step{Session: SessionID{3}, Entry: "entry"})
	w.wait(t, 1)
	w.mu.Lock()
	e := w.got["entry"][0].(*ErrorMsg)
	w.mu.Unlock()
	if e.Code != CodeBusy {
		t.Fatalf("entry of an overflowing step got %s", e.Code)
	}
}

// TestOutboxCloseJoinsSenders: close returns only once every sender has
// finished, dropping what is queued once the context ends, and later
// posts are dropped.
func TestOutboxCloseJoinsSenders(t *testing.T) {
	w := newFakeWire()
	w.block["stuck"] = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	o := newOutbox(ctx, w.send, zap.NewNop())
	for i := range 10 {
		o.token("stuck", &Token{Pos: i})
	}
	cancel()
	o.close()
	o.token("stuck", &Token{Pos: 99})
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queues) != 0 {
		t.Fatalf("%d queues left after close", len(o.queues))
	}
	if len(w.got["stuck"]) != 0 {
		t.Fatalf("sent %d messages after cancel", len(w.got["stuck"]))
	}
}

// TestOutboxResendsTokenToEntry: a token the last hop cannot send to the
// entry (a dial refused or in backoff just after the entry rejoined) is
// sent again until it goes through, instead of being dropped with the
// entry waiting out its step timeout; and the resends are bounded.
func TestOutboxResendsTokenToEntry(t *testing.T) {
	w := newFakeWire()
	w.fail["entry"] = errors.New("dial backoff")
	ctx, cancel := context.WithCancel(context.Background())
	core, logs := observer.New(zap.InfoLevel)
	o := newOutbox(ctx, w.send, zap.New(core))
	o.resend = []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	t.Cleanup(func() { cancel(); o.close() })

	o.token("entry", &Token{Session: SessionID{3}, Pos: 9, Token: 42})
	w.wait(t, 2) // the send and its first resend failed
	w.mu.Lock()
	delete(w.fail, "entry")
	w.mu.Unlock()
	for {
		if to := <-w.sent; to != "entry" {
			t.Fatalf("send to %s", to)
		}
		w.mu.Lock()
		got := w.got["entry"]
		w.mu.Unlock()
		if len(got) == 0 {
			continue // a resend that failed before the wire healed
		}
		if tok, ok := got[0].(*Token); len(got) != 1 || !ok || tok.Token != 42 || tok.Pos != 9 {
			t.Fatalf("entry got %v", got)
		}
		break
	}
	if n := logs.FilterMessage("cannot reach the entry; message dropped").Len(); n != 0 {
		t.Fatalf("%d messages dropped", n)
	}
	waitFor(t, 5*time.Second, "the resend's success logged", func() bool {
		return logs.FilterMessage("reached the entry after resending").Len() == 1
	})

	// An entry that stays unreachable gets the first send and one resend
	// per wait, and then the message is dropped, saying so.
	w.mu.Lock()
	w.fail["gone"] = errors.New("connection refused")
	w.mu.Unlock()
	o.fail("gone", &ErrorMsg{Session: SessionID{4}, Code: CodeInternal})
	for range len(o.resend) + 1 {
		if to := <-w.sent; to != "gone" {
			t.Fatalf("send to %s", to)
		}
	}
	waitFor(t, 5*time.Second, "the drop logged", func() bool { return logs.FilterMessage("cannot reach the entry; message dropped").Len() == 1 })
	// Dropped: nothing was left scheduled, so the next send there is
	// the next message posted.
	o.post("gone", &Close{Session: SessionID{4}}, func(error) {})
	if to := <-w.sent; to != "gone" {
		t.Fatalf("send to %s", to)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.sent) != 0 {
		t.Fatalf("%d more sends", len(w.sent))
	}
}
