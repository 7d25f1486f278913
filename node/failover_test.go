package node

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
	"github.com/stratanet/strata/layers"
)

type genRun struct {
	prompt string
	sp     engine.SamplingParams
	gram   *grammar.Spec // constrained (nil: free)
	entry  *Node
	stream *Stream
	want   []int32

	mu     sync.Mutex
	got    []int32
	times  []time.Time
	count  atomic.Int32
	err    error
	result Result
}

func (g *genRun) recv() {
	for {
		d, err := g.stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				g.err = err
			}
			g.result, _ = g.stream.Result()
			return
		}
		now := time.Now()
		g.mu.Lock()
		for _, id := range d.Tokens {
			g.got = append(g.got, id)
			g.times = append(g.times, now)
		}
		g.mu.Unlock()
		g.count.Add(int32(len(d.Tokens)))
	}
}

// timeOf is when the token at index i arrived.
func (g *genRun) timeOf(i int) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if i < 0 || i >= len(g.times) {
		return time.Time{}, false
	}
	return g.times[i], true
}

// TestFailoverKillMiddleHop runs 8 generations through 3-hop paths and
// hard-closes a middle hop half-way: every generation completes with
// exactly the tokens of a run without the failure, the constrained ones
// (a grammar whose last hop replays the output into its matcher)
// included.
//
// The step timeout is far beyond the test's deadline, so a generation
// can only recover because the peer table declared the killed hop down
// (its connections closed); no wall-clock bound is needed for that, and
// the kill → next token latency is reported, not bounded (it measures
// the machine's load as much as the failover).
func TestFailoverKillMiddleHop(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(3), WithStepTimeout(10*time.Minute))
	var ids []peer.ID
	for range 6 {
		ids = append(ids, c.add().ID())
	}
	c.waitServing(30*time.Second, ids...)
	entries, middles := roles(t, c)

	const maxTokens = 64
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark and stormy night"}
	var runs []*genRun
	for i := range 8 {
		sp := engine.SamplingParams{}
		if i%2 == 1 {
			sp = engine.SamplingParams{Temperature: 0.8, TopP: 0.9, Seed: uint64(100 + i)}
		}
		r := &genRun{prompt: prompts[i%len(prompts)], sp: sp, entry: entries[i%len(entries)]}
		if i%4 >= 2 {
			r.gram = gramSpec
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		if r.gram != nil {
			r.want = referenceConstrained(t, r.prompt, maxTokens, r.sp, r.gram)
		} else {
			r.want = reference(t, r.prompt, maxTokens, r.sp)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wg := startRuns(ctx, t, runs, maxTokens)

	// Half-way: every generation has a quarter of its tokens, none is done.
	waitFor(t, 30*time.Second, "a quarter of every generation", func() bool {
		for _, r := range runs {
			if int(r.count.Load()) < maxTokens/4 && int(r.count.Load()) < len(r.want) {
				return false
			}
		}
		return true
	})
	// The victim: the middle node the most running attempts go through.
	victim, use := busiest(entries, middles)
	var before []int
	for _, r := range runs {
		before = append(before, int(r.count.Load()))
	}
	killedAt := time.Now()
	victim.Kill()
	t.Logf("killed middle hop %s (on %d running paths) at tokens %v", shortID(victim.ID()), use, before)
	wg.Wait()

	var replays int
	var worst time.Duration
	for i, r := range runs {
		if r.err != nil {
			t.Fatalf("generation %d: %v", i, r.err)
		}
		if !slices.Equal(r.got, r.want) {
			t.Fatalf("generation %d (%q, %+v):\n swarm %v\nsingle %v", i, r.prompt, r.sp, r.got, r.want)
		}
		replays += r.result.Replays
		if r.result.Replays == 0 {
			continue
		}
		at, ok := r.timeOf(r.result.ReplayedAt[0])
		if !ok {
			t.Fatalf("generation %d replayed but got no token after the kill", i)
		}
		lat := at.Sub(killedAt)
		worst = max(worst, lat)
		t.Logf("generation %d: %d replay(s), paths %v; kill → next token %v (failure noticed → next token %v)",
			i, r.result.Replays, r.result.Paths, lat.Round(time.Microsecond), r.result.ReplayLatency)
	}
	var counted uint64
	for _, e := range entries {
		counted += e.Metrics().Replays
	}
	if replays == 0 || counted != uint64(replays) || replays < use {
		t.Fatalf("%d replays in results, %d in the entries' counters, %d paths used the victim", replays, counted, use)
	}
	var batched uint64
	for _, n := range c.all() {
		if n != victim {
			batched += n.Metrics().BatchedSteps
		}
	}
	if batched == 0 {
		t.Fatal("no two sessions' steps ever shared an engine batch")
	}
	t.Logf("%d steps ran in batches of two or more", batched)
	t.Logf("all %d generations match the single-process run; %d replays; worst replay latency (kill → next token) %v",
		len(runs), replays, worst.Round(time.Microsecond))
}

// TestHungHopTimeout: a hop that swallows frames but keeps its heartbeats
// (a hung process, not a dead one) is caught by the step timeout; the
// generation replays elsewhere and ends with the exact output.
//
// The entry's timeouts run on a fake clock that only the test moves, so
// an honest step is never timed out however starved the machine is (on
// the wall clock, a 1 s timeout once saw an honest step take over 1 s and
// 16 replays in a row time out), and the hung step is timed out exactly
// when the clock passes its timeout.
func TestHungHopTimeout(t *testing.T) {
	const timeout = time.Second
	// A static map with a second holder of the hung hop's range, so that
	// the replay has somewhere to go whichever holder the path took.
	dirs, ids := staticIDs(t, 3)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}},
		layers.Stage{Node: ids[2].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	// No spot checks: an audit's receipt request swallowed by the hung hop
	// would wait on the entry's fake clock, and a step timer that fired
	// while the entry audited is reset by the next step (with spot checks
	// at every token, 3 of 3 runs hung until the deadline; at the
	// default 1% one CI run did).
	c := newTestCluster(t, WithStaticMap(m), WithStepTimeout(timeout), WithVerifyRate(0))
	clock := clockwork.NewFakeClockAt(time.Now())
	entry := c.add(WithDataDir(dirs[0]), WithClock(clock))
	c.add(WithDataDir(dirs[1]))
	c.add(WithDataDir(dirs[2]))
	c.waitServing(30*time.Second, ids...)
	const prompt, maxTokens = "The quick brown fox", 32
	sp := engine.SamplingParams{Temperature: 0.9, Seed: 77}
	want := reference(t, prompt, maxTokens, sp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := entry.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for len(got) < 4 {
		d, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Tokens...)
	}
	// Hang the other hop of the running path: frames in, nothing out.
	var hung *Node
	entry.entry.reg.mu.Lock()
	for _, a := range entry.entry.reg.gens {
		for _, h := range a.hops {
			if h.Peer != entry.ID() {
				for _, n := range c.all() {
					if n.ID() == h.Peer {
						hung = n
					}
				}
			}
		}
	}
	entry.entry.reg.mu.Unlock()
	if hung == nil {
		t.Fatal("no other hop on the running path")
	}
	swallowed := make(chan struct{})
	var once sync.Once
	hung.host.Streams().HandleActivations(func(_ peer.ID, frame []byte) error {
		if m, err := Decode(frame); err == nil {
			if _, step := m.(*Step); step {
				once.Do(func() { close(swallowed) })
			}
		}
		return nil
	})
	// The entry sets a step's timer before it sends the step, so once the
	// hung hop has swallowed a step, moving the entry's clock by the
	// timeout times it out.
	select {
	case <-swallowed:
	case <-ctx.Done():
		t.Fatal("the hung hop received no step")
	}
	if r := entry.Metrics().Replays; r != 0 {
		t.Fatalf("%d replays before the clock moved", r)
	}
	hungAt := time.Now()
	clock.Advance(timeout)
	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Tokens...)
	}
	res, _ := s.Result()
	if !slices.Equal(got, want) {
		t.Fatalf("after a hung hop:\n swarm %v\nsingle %v", got, want)
	}
	// Exactly one replay: the hung step's. The clock did not move again,
	// so no honest step could time out.
	if res.Replays != 1 {
		t.Fatalf("%d replays (%v), want 1", res.Replays, res.Paths)
	}
	t.Logf("hung hop %s: replayed after the %v step timeout; hang → finish %v, paths %v", shortID(hung.ID()), timeout,
		time.Since(hungAt).Round(time.Millisecond), res.Paths)
}

// roles splits the cluster by its committed map: entries hold layer 0,
// middles hold neither end. It fails the test unless there are entries
// and at least two middles.
func roles(t *testing.T, c *testCluster) (entries, middles []*Node) {
	t.Helper()
	m := c.all()[0].Committed()
	t.Logf("committed map epoch %d: %v", m.Epoch, m.Stages)
	for _, n := range c.all() {
		r, _ := m.Range(n.ID().String())
		switch {
		case r.Start == 0:
			entries = append(entries, n)
		case r.End < m.Layers:
			middles = append(middles, n)
		}
	}
	if len(entries) == 0 || len(middles) < 2 {
		t.Fatalf("map %v has no entries or fewer than two middle nodes", m.Stages)
	}
	return entries, middles
}

// busiest returns the candidate the most running attempts of the entries
// go through, and how many do.
func busiest(entries, candidates []*Node) (*Node, int) {
	use := map[peer.ID]int{}
	for _, e := range entries {
		e.entry.reg.mu.Lock()
		for _, a := range e.entry.reg.gens {
			for _, h := range a.hops {
				use[h.Peer]++
			}
		}
		e.entry.reg.mu.Unlock()
	}
	best := candidates[0]
	for _, n := range candidates {
		if use[n.ID()] > use[best.ID()] {
			best = n
		}
	}
	return best, use[best.ID()]
}

// startRuns starts every run's generation on its entry and receives its
// tokens in the background; the WaitGroup is done when all have ended.
func startRuns(ctx context.Context, t *testing.T, runs []*genRun, maxTokens int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for _, r := range runs {
		s, err := r.entry.Generate(ctx, Request{Prompt: r.prompt, MaxTokens: maxTokens, Sampling: r.sp, Grammar: r.gram})
		if err != nil {
			t.Fatal(err)
		}
		r.stream = s
		wg.Add(1)
		go func() { defer wg.Done(); r.recv() }()
	}
	return &wg
}
