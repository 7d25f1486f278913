package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap/zaptest"

	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// The entry's unit tests: the entry alone, on a fake clock, with fake
// hops that answer its steps in-process. No libp2p, no layers, no
// sleeps: a timeout happens when the test advances the clock.

// entryRig is an entry whose paths are single hops, one per peer, and
// whose hops do what the test says.
type entryRig struct {
	t     *testing.T
	e     *entry
	clock *clockwork.FakeClock
	peers []peer.ID
	vocab int

	mu       sync.Mutex
	hang     map[peer.ID]bool // takes steps and never answers
	busy     map[peer.ID]int  // answers this many opens with CodeBusy
	unreach  map[peer.ID]int  // fails this many sends as a failed dial
	reachFor map[peer.ID]int  // takes this many sends, then fails every later one as a failed dial
	noPath   bool             // routing finds nothing
	dead     map[peer.ID]bool // routing leaves these out
	kvs      map[peer.ID]kvReport
	chg      chan struct{}      // closed by bump: routing's inputs changed
	closed   []peer.ID          // hops told to close a session
	suspect  []peer.ID          // peers reported to routing
	sent     chan peer.ID       // every step's first hop, as it is sent
	closes   chan peer.ID       // every close, as it is posted (an attempt's last act)
	seen     map[peer.ID][]Step // steps each hop took
	heads    []peerHead         // the load table (fair admission), as setHeads left it
}

func newEntryRig(t *testing.T, npeers int) *entryRig {
	t.Helper()
	return newEntryRigWith(t, npeers, nil)
}

// newEntryRigWith is newEntryRig with cfg changed by with (nil: none)
// before the entry starts.
func newEntryRigWith(t *testing.T, npeers int, with func(*entryConfig)) *entryRig {
	t.Helper()
	m, err := openModel(testModel(t), "", testHW, 1)
	if err != nil {
		t.Fatal(err)
	}
	r := &entryRig{t: t, clock: clockwork.NewFakeClock(), vocab: m.info.Vocab, hang: map[peer.ID]bool{}, busy: map[peer.ID]int{}, unreach: map[peer.ID]int{}, reachFor: map[peer.ID]int{},
		sent: make(chan peer.ID, 64), closes: make(chan peer.ID, 64), seen: map[peer.ID][]Step{},
		dead: map[peer.ID]bool{}, kvs: map[peer.ID]kvReport{}, chg: make(chan struct{})}
	for i := range npeers {
		r.peers = append(r.peers, testPeer(t, byte(10+i)))
	}
	cfg := entryConfig{self: testPeer(t, 9), model: m, stepTimeout: 20 * time.Second, repairWait: 30 * time.Second,
		maxReplays: 4, defaultMaxTokens: 8, maxFrame: 1 << 24, clock: r.clock, log: zaptest.NewLogger(t)}
	if with != nil {
		with(&cfg)
	}
	r.e = newEntry(cfg,
		entryDeps{heads: func() []peerHead { r.mu.Lock(); defer r.mu.Unlock(); return slices.Clone(r.heads) }, route: r.route, send: r.send, draining: func([]Hop) []peer.ID { return nil },
			post: func(to peer.ID, m Message) {
				if _, ok := m.(*Close); ok {
					r.mu.Lock()
					r.closed = append(r.closed, to)
					r.mu.Unlock()
					r.closes <- to
				}
			},
			suspect: func(p peer.ID) { r.mu.Lock(); r.suspect = append(r.suspect, p); r.mu.Unlock() },
			kv:      r.kv,
			changed: func() <-chan struct{} { r.mu.Lock(); defer r.mu.Unlock(); return r.chg }},
		&counters{})
	t.Cleanup(func() { r.e.stop(); r.e.wait() })
	return r
}

// route picks the first peer not avoided, as a one-hop path.
func (r *entryRig) route(q routeReq) (routing.Path, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.noPath {
		return routing.Path{}, fmt.Errorf("%w: test", routing.ErrNoPath)
	}
	for _, p := range r.peers {
		if !slices.Contains(q.avoid, p.String()) && !r.dead[p] {
			return routing.Path{Hops: []routing.Hop{{Node: p.String(), From: 0, To: 8}}}, nil
		}
	}
	return routing.Path{}, fmt.Errorf("%w: every peer avoided", routing.ErrNoPath)
}

// kv is the fake hops' KV reports: unknown unless the test set one.
func (r *entryRig) kv(node string) kvReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, rep := range r.kvs {
		if p.String() == node {
			return rep
		}
	}
	return kvReport{free: -1}
}

// report sets p's KV report (a new one: a fresh mark) and tells the
// entry's queue, as a heartbeat would.
func (r *entryRig) report(p peer.ID, free, sessions int) {
	r.mu.Lock()
	r.kvs[p] = kvReport{free: free, sessions: sessions, mark: new(int)}
	r.mu.Unlock()
	r.bump()
}

// bump closes the changed channel, as the peer table does on a change.
func (r *entryRig) bump() {
	r.mu.Lock()
	close(r.chg)
	r.chg = make(chan struct{})
	r.mu.Unlock()
}

// send is the fake hop: it answers a step with the token that follows
// the step's last position (a function of the position, so that replays
// must give the same tokens), a busy error, or nothing.
func (r *entryRig) send(_ context.Context, to peer.ID, m Message) error {
	s, ok := m.(*Step)
	if !ok {
		return fmt.Errorf("fake hop: unexpected %T", m)
	}
	r.mu.Lock()
	if n, ok := r.reachFor[to]; ok {
		if n == 0 {
			r.unreach[to] = 1
		} else {
			r.reachFor[to] = n - 1
		}
	}
	if r.unreach[to] > 0 {
		r.unreach[to]--
		r.mu.Unlock()
		r.sent <- to
		return fmt.Errorf("open activation stream to %s: %w: failed to dial: dial backoff", to, swarm.ErrUnreachable)
	}
	r.seen[to] = append(r.seen[to], *s)
	hang := r.hang[to]
	busy := s.Open != nil && r.busy[to] > 0
	if busy {
		r.busy[to]--
	}
	r.mu.Unlock()
	switch {
	case busy:
		r.e.onError(to, &ErrorMsg{Session: s.Session, Code: CodeBusy, Text: "test: busy"})
	case !hang:
		pos := s.Pos + len(s.Tokens)
		r.e.onToken(to, &Token{Session: s.Session, Pos: pos, Token: r.tokenAt(pos)})
	}
	r.sent <- to
	return nil
}

// tokenAt avoids the end tokens at the bottom of the vocabulary.
func (r *entryRig) tokenAt(pos int) int32 { return int32(100 + pos%50) }

func (r *entryRig) generate(maxTokens int) *Stream {
	r.t.Helper()
	s, err := r.e.generate(context.Background(), Request{Tokens: []int32{5, 6, 7}, MaxTokens: maxTokens})
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// attemptEnded waits for the close of an attempt on p: the attempt's
// timer is stopped by then, so that the clock's next waiter is the
// generation's.
func (r *entryRig) attemptEnded(p peer.ID) {
	r.t.Helper()
	select {
	case got := <-r.closes:
		if got != p {
			r.t.Fatalf("close to %s, want %s", got, p)
		}
	case <-time.After(30 * time.Second):
		r.t.Fatal("the attempt did not end")
	}
}

// nextSend waits for the next step the fake hops take and returns its
// first hop.
func (r *entryRig) nextSend() peer.ID {
	r.t.Helper()
	select {
	case p := <-r.sent:
		return p
	case <-time.After(30 * time.Second):
		r.t.Fatal("no step sent")
		return ""
	}
}

func running(s *Stream) bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// wantTokens checks a finished generation's tokens against the fake
// hops' function of the position.
func (r *entryRig) wantTokens(res Result, prompt, n int) {
	r.t.Helper()
	if len(res.Tokens) != n {
		r.t.Fatalf("%d tokens, want %d", len(res.Tokens), n)
	}
	for i, tok := range res.Tokens {
		if tok != r.tokenAt(prompt+i) {
			r.t.Fatalf("token %d is %d, want %d", i, tok, r.tokenAt(prompt+i))
		}
	}
}

// TestEntryStepTimeoutReplays: a hop that takes the step and never
// answers fails it only when the step timeout passes on the clock; the
// generation then replays on another hop and ends with the tokens of a
// run without the failure.
func TestEntryStepTimeoutReplays(t *testing.T) {
	r := newEntryRig(t, 2)
	a, b := r.peers[0], r.peers[1]
	r.hang[a] = true
	s := r.generate(4)
	if got := r.nextSend(); got != a {
		t.Fatalf("first step to %s, want %s", got, a)
	}
	r.clock.Advance(r.e.cfg.stepTimeout - time.Millisecond)
	if !running(s) || len(r.sent) != 0 {
		t.Fatal("the step failed before its timeout")
	}
	r.clock.Advance(time.Millisecond)
	if got := r.nextSend(); got != b {
		t.Fatalf("replay to %s, want %s", got, b)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 4)
	if res.Replays != 1 || len(res.Paths) != 2 {
		t.Fatalf("%d replays on paths %v, want 1 on 2", res.Replays, res.Paths)
	}
	// The replay opened a session of the whole prefix on b.
	if first := r.seen[b][0]; first.Open == nil || first.Pos != 0 || !slices.Equal(first.Tokens, []int32{5, 6, 7}) {
		t.Fatalf("replay's first step: open %v pos %d tokens %v", first.Open, first.Pos, first.Tokens)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.closed, a) || !slices.Contains(r.closed, b) {
		t.Fatalf("closes sent to %v, want both hops", r.closed)
	}
	if m := r.e.counters; m.replays.Load() != 1 || m.hopFailures.Load() != 1 || m.tokens.Load() != 4 {
		t.Fatalf("counters: %d replays, %d failures, %d tokens", m.replays.Load(), m.hopFailures.Load(), m.tokens.Load())
	}
}

// TestEntryPeerDownReplays: a peer the peer table reports down fails the
// step at once, with no time passing, and routing hears of it.
func TestEntryPeerDownReplays(t *testing.T) {
	r := newEntryRig(t, 2)
	a, b := r.peers[0], r.peers[1]
	r.hang[a] = true
	s := r.generate(3)
	if got := r.nextSend(); got != a {
		t.Fatalf("first step to %s, want %s", got, a)
	}
	r.e.peerDown(b, "dead") // not on the path: nothing happens
	if !running(s) || len(r.sent) != 0 {
		t.Fatal("a peer off the path failed the step")
	}
	r.e.peerDown(a, "dead")
	if got := r.nextSend(); got != b {
		t.Fatalf("replay to %s, want %s", got, b)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 3)
	if res.Replays != 1 {
		t.Fatalf("%d replays", res.Replays)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(r.suspect, []peer.ID{b, a}) {
		t.Fatalf("suspects reported %v", r.suspect)
	}
}

// retriesAfterBackoff sees n attempts on p end, and each next one sent
// only once its backoff has passed on the clock.
func (r *entryRig) retriesAfterBackoff(p peer.ID, n int) {
	r.t.Helper()
	for retry := 1; retry <= n; retry++ {
		if got := r.nextSend(); got != p {
			r.t.Fatalf("step to %s", got)
		}
		r.attemptEnded(p)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
			r.t.Fatalf("retry %d: no backoff wait: %v", retry, err)
		}
		cancel()
		r.clock.Advance(busyBackoff(retry) - time.Millisecond)
		if len(r.sent) != 0 {
			r.t.Fatalf("retry %d before its backoff", retry)
		}
		r.clock.Advance(time.Millisecond)
	}
}

// TestEntryBusyBacksOff: a hop that refuses admission as busy is retried
// after the backoff on the clock, not at once, and the retry is not a
// replay.
func TestEntryBusyBacksOff(t *testing.T) {
	r := newEntryRig(t, 1)
	a := r.peers[0]
	r.busy[a] = 2
	s := r.generate(2)
	r.retriesAfterBackoff(a, 2)
	if got := r.nextSend(); got != a {
		t.Fatalf("step to %s", got)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 2)
	if res.Replays != 0 || len(res.Paths) != 3 {
		t.Fatalf("%d replays on %d paths, want 0 on 3", res.Replays, len(res.Paths))
	}
}

// TestEntryUnreachableBacksOff: a first hop that cannot be dialled (as
// after a relay refused a rejoined entry's circuits and go-libp2p's dial
// backoff failed every later dial at once) is tried again after a
// backoff on the clock, more times than the replay cap, and those tries
// are no replays: the generation succeeds once the dial does.
func TestEntryUnreachableBacksOff(t *testing.T) {
	r := newEntryRig(t, 1)
	a := r.peers[0]
	fails := r.e.cfg.maxReplays + 2
	r.unreach[a] = fails
	s := r.generate(2)
	r.retriesAfterBackoff(a, fails)
	if got := r.nextSend(); got != a {
		t.Fatalf("step to %s", got)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 2)
	if res.Replays != 0 || len(res.Paths) != fails+1 {
		t.Fatalf("%d replays on %d paths, want 0 on %d", res.Replays, len(res.Paths), fails+1)
	}
}

// TestEntryUnreachableMidSession: a first hop that cannot be dialled
// after it served a token of the attempt held the session, which is lost
// with it: the entry backs off as for any failed dial, but counts a hop
// failure, and the attempt on the next path is a replay.
func TestEntryUnreachableMidSession(t *testing.T) {
	r := newEntryRig(t, 2)
	a, b := r.peers[0], r.peers[1]
	r.reachFor[a] = 1 // the prefill
	s := r.generate(3)
	for range 2 {
		if got := r.nextSend(); got != a {
			t.Fatalf("step to %s, want %s", got, a)
		}
	}
	r.attemptEnded(a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("no backoff wait: %v", err)
	}
	r.clock.Advance(busyBackoff(1))
	if got := r.nextSend(); got != b {
		t.Fatalf("replay to %s, want %s", got, b)
	}
	if n := r.e.counters.hopFailures.Load(); n != 1 {
		t.Fatalf("%d hop failures counted, want 1", n)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 3)
	if res.Replays != 1 || len(res.Paths) != 2 {
		t.Fatalf("%d replays on %d paths, want 1 on 2", res.Replays, len(res.Paths))
	}
}

// TestEntryRepairWaitEnds: with no path after a failure, the generation
// waits for a repair until the repair wait passes on the clock, then
// fails with ErrSessionLost wrapping ErrNoCapacity.
func TestEntryRepairWaitEnds(t *testing.T) {
	r := newEntryRig(t, 1)
	r.e.cfg.repairWait = time.Second
	a := r.peers[0]
	r.hang[a] = true
	s := r.generate(2)
	r.nextSend()
	r.mu.Lock()
	r.noPath = true
	r.mu.Unlock()
	r.e.peerDown(a, "dead")
	r.attemptEnded(a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { <-s.done; cancel() }()
	waited := time.Duration(0)
	for running(s) {
		if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
			break // the generation ended
		}
		r.clock.Advance(repairPoll)
		waited += repairPoll
	}
	_, err := s.Result()
	if !errors.Is(err, ErrSessionLost) || !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("err %v, want ErrSessionLost and ErrNoCapacity", err)
	}
	if waited < r.e.cfg.repairWait {
		t.Fatalf("gave up after %v of the clock, before the repair wait of %v", waited, r.e.cfg.repairWait)
	}
}

// TestEntryStopEndsGenerations: stop fails a running generation with
// ErrClosed and refuses new ones.
func TestEntryStopEndsGenerations(t *testing.T) {
	r := newEntryRig(t, 1)
	r.hang[r.peers[0]] = true
	s := r.generate(2)
	r.nextSend()
	r.e.stop()
	r.e.wait()
	if _, err := s.Result(); !errors.Is(err, ErrClosed) {
		t.Fatalf("running generation: %v, want ErrClosed", err)
	}
	if _, err := r.e.generate(context.Background(), Request{Tokens: []int32{1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("new generation: %v, want ErrClosed", err)
	}
}

// TestEntryBusyCountsPerRun: the busy wait bounds one run of refusals, not
// the session: a hop failure between two busy answers starts it again, so
// a session refused once early is not lost to a second refusal later than
// the repair wait.
func TestEntryBusyCountsPerRun(t *testing.T) {
	r := newEntryRig(t, 2)
	r.e.cfg.repairWait = 5 * time.Second // shorter than the step timeout
	a, b := r.peers[0], r.peers[1]
	r.busy[a], r.hang[b] = 2, true
	s := r.generate(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	refused := func(p peer.ID) {
		t.Helper()
		if got := r.nextSend(); got != p {
			t.Fatalf("step to %s, want %s", got, p)
		}
		r.attemptEnded(p)
		if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("no backoff wait: %v", err)
		}
		r.clock.Advance(busyBackoff(1))
	}
	refused(a) // the retry goes elsewhere: b takes the step and hangs
	if got := r.nextSend(); got != b {
		t.Fatalf("retry to %s, want %s", got, b)
	}
	if err := r.clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatalf("no step timer: %v", err)
	}
	r.clock.Advance(r.e.cfg.stepTimeout)
	r.attemptEnded(b)
	refused(a) // the replay is refused again, 20 s after the first refusal
	if got := r.nextSend(); got != a {
		t.Fatalf("retry to %s, want %s", got, a)
	}
	res, err := s.Result()
	if err != nil {
		t.Fatal(err)
	}
	r.wantTokens(res, 3, 2)
	if res.Replays != 1 {
		t.Fatalf("%d replays, want 1", res.Replays)
	}
}
