package node

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// realChain is a path of schedulers on the real engine, hop i holding
// layers [cuts[i], cuts[i+1]) of the test model, driven by hand through
// their fake outboxes: the forward pass is real, the transport is not.
type realChain struct {
	t    *testing.T
	rigs []*schedRig
	hops []Hop
}

func newRealChain(t *testing.T, cuts []int, cache bool) *realChain {
	t.Helper()
	m, err := openModel(testModel(t), "", layers.Hardware{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := &realChain{t: t}
	for i := 0; i+1 < len(cuts); i++ {
		c.hops = append(c.hops, Hop{Peer: peer.ID(fmt.Sprintf("hop%d", i)), From: cuts[i], To: cuts[i+1]})
	}
	for _, h := range c.hops {
		stages := map[int]engine.Stage{}
		for l := h.From; l < h.To; l++ {
			if stages[l], err = m.openLayer(l); err != nil {
				t.Fatal(err)
			}
		}
		out := &fakeOutbox{}
		s := newScheduler(schedConfig{self: h.Peer, model: m.info, hash: m.hash, memBudget: 1 << 30, maxBatch: 8, maxQueue: 4,
			idleTimeout: time.Minute, queueTimeout: 10 * time.Second, prefixCache: cache, log: zap.NewNop()}, out)
		r := &schedRig{s: s, out: out, info: m.info, t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		r.deliver(loadIn{spans: layerSpans(stages), done: make(chan struct{})})
		t.Cleanup(s.shutdown)
		c.rigs = append(c.rigs, r)
	}
	return c
}

// step runs m along the path: the token, or the error a hop answered,
// and the steps each later hop received.
func (c *realChain) step(m *Step) (*Token, *ErrorMsg, []*Step) {
	c.t.Helper()
	var fwd []*Step
	from := schedEntry
	for i, r := range c.rigs {
		r.deliver(&stepIn{from: from, at: r.t0, m: m})
		got := r.out.take(c.t)
		switch got.kind {
		case "token":
			if i != len(c.rigs)-1 {
				c.t.Fatalf("hop %d sampled a token", i)
			}
			return got.m.(*Token), nil, fwd
		case "fail":
			return nil, got.m.(*ErrorMsg), fwd
		}
		if got.to != c.hops[i+1].Peer {
			c.t.Fatalf("hop %d forwarded to %s", i, got.to)
		}
		m, from = got.m.(*Step), c.hops[i].Peer
		fwd = append(fwd, m)
	}
	c.t.Fatal("no hop answered")
	return nil, nil, nil
}

func (c *realChain) close(sid SessionID) {
	for _, r := range c.rigs {
		r.deliver(closeIn{from: schedEntry, sid: sid})
	}
}

// prefixSampling exercises the last hop's token history: the repeat
// penalty reads the tokens of the resumed positions too.
var prefixSampling = engine.SamplingParams{Temperature: 0.8, Seed: 3, RepeatPenalty: 1.3, RepeatLastN: 64}

// generate runs a session of prompt and n sampled tokens, then closes it.
// It returns the tokens and the open step as each later hop got it, or
// the error of a hop that refused the open step.
func (c *realChain) generate(sid SessionID, prompt []int32, n int, cold bool) ([]int32, []*Step, *ErrorMsg) {
	c.t.Helper()
	defer c.close(sid)
	return c.run(sid, prompt, n, cold)
}

// run is generate without the close: the session stays open.
func (c *realChain) run(sid SessionID, prompt []int32, n int, cold bool) ([]int32, []*Step, *ErrorMsg) {
	c.t.Helper()
	tok, em, first := c.step(&Step{Session: sid, Entry: schedEntry, Hops: c.hops, Tokens: prompt,
		Open: &Open{MaxTokens: len(prompt) + n, Model: c.rigs[0].s.cfg.hash, Sampling: prefixSampling, Cold: cold}})
	if em != nil {
		return nil, first, em
	}
	out := []int32{tok.Token}
	for len(out) < n {
		tok, em, _ = c.step(&Step{Session: sid, Entry: schedEntry, Hops: c.hops, Pos: len(prompt) + len(out) - 1,
			Tokens: []int32{out[len(out)-1]}})
		if em != nil {
			c.t.Fatalf("decode step: %s: %s", em.Code, em.Text)
		}
		out = append(out, tok.Token)
	}
	return out, first, nil
}

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab-4) + 4)
	}
	return out
}

// TestPrefixCacheResumesBitIdentical: on the real forward pass, over one,
// two and three hops, a chat's second turn resumes every hop from the
// first turn's cached whole blocks (the partial block after them is
// recomputed) and gives exactly the tokens, and the hidden states, of a
// cold run on the same path.
func TestPrefixCacheResumesBitIdentical(t *testing.T) {
	for _, cuts := range [][]int{{0, 8}, {0, 3, 8}, {0, 2, 5, 8}} {
		t.Run(fmt.Sprint(cuts), func(t *testing.T) {
			warm, cold := newRealChain(t, cuts, true), newRealChain(t, cuts, false)
			vocab := warm.rigs[0].info.Vocab
			rng := rand.New(rand.NewPCG(1, 2))
			turn1 := randomTokens(rng, 37, vocab)
			out1, _, em := warm.generate(SessionID{1}, turn1, 6, false)
			if em != nil {
				t.Fatal(em.Text)
			}
			want1, _, _ := cold.generate(SessionID{1}, turn1, 6, false)
			if !slices.Equal(out1, want1) {
				t.Fatalf("turn 1: %v, cold %v", out1, want1)
			}
			// 37 + 5 positions were fed: two whole blocks are cached.
			for i, r := range warm.rigs {
				if st := r.s.status.Load(); st.PrefixEntries != 1 || st.Prefixes == nil || st.PrefixBytes <= 0 {
					t.Fatalf("hop %d after turn 1: %d entries, %d bytes", i, st.PrefixEntries, st.PrefixBytes)
				}
			}
			turn2 := slices.Concat(turn1, out1, randomTokens(rng, 9, vocab))
			check := func(turn int, prompt []int32, hits uint64, reused int) {
				t.Helper()
				sid := SessionID{byte(turn)}
				got, gotFwd, em := warm.run(sid, prompt, 8, false)
				if em != nil {
					t.Fatalf("turn %d: %s: %s", turn, em.Code, em.Text)
				}
				want, wantFwd, _ := cold.run(sid, prompt, 8, false)
				// Every hop's receipt chains are a cold run's: a spot check
				// compares them (verify.go).
				for i := range warm.rigs {
					w := warm.rigs[i].s.sessions[hopKey{sid, warm.hops[i].From}]
					c := cold.rigs[i].s.sessions[hopKey{sid, cold.hops[i].From}]
					if w.chain.Pos() != c.chain.Pos() || w.chain.InChain() != c.chain.InChain() ||
						w.chain.OutChain() != c.chain.OutChain() || w.chain.OutLast() != c.chain.OutLast() {
						t.Fatalf("turn %d hop %d: receipt chains differ from a cold run's", turn, i)
					}
				}
				warm.close(sid)
				cold.close(sid)
				if !slices.Equal(got, want) {
					t.Fatalf("turn %d: %v, cold %v", turn, got, want)
				}
				for i, r := range warm.rigs {
					if st := r.s.status.Load(); st.PrefixHits != hits {
						t.Fatalf("turn %d hop %d: %d prefix hits, want %d", turn, i, st.PrefixHits, hits)
					}
				}
				for i := range gotFwd {
					g, w := gotFwd[i], wantFwd[i]
					if g.Skip != reused || w.Skip != 0 {
						t.Fatalf("turn %d hop %d got skip %d (cold %d), want %d", turn, i+1, g.Skip, w.Skip, reused)
					}
					cols := g.Cols
					if len(g.Hidden) != (len(prompt)-reused)*cols {
						t.Fatalf("turn %d hop %d: %d hidden values", turn, i+1, len(g.Hidden))
					}
					for j, v := range g.Hidden {
						if math.Float32bits(v) != math.Float32bits(w.Hidden[reused*cols+j]) {
							t.Fatalf("turn %d hop %d: hidden value %d differs from the cold run", turn, i+1, j)
						}
					}
				}
			}
			check(2, turn2, 1, 32)
			// A prompt sharing only the first block resumes from it.
			turn3 := slices.Concat(turn1[:20], randomTokens(rng, 5, vocab))
			check(3, turn3, 2, 16)
			if len(warm.rigs) < 2 {
				return
			}
			// A later hop that lost the prefix refuses; the entry's cold
			// retry computes everything everywhere.
			warm.rigs[len(warm.rigs)-1].s.cache.close()
			_, _, em = warm.generate(SessionID{9}, turn2, 4, false)
			if em == nil || em.Code != CodePrefixMiss {
				t.Fatalf("resumed on a hop that lost the prefix: %+v", em)
			}
			got, fwd, em := warm.generate(SessionID{10}, turn2, 4, true)
			if em != nil || fwd[0].Skip != 0 {
				t.Fatalf("cold retry: %+v, skip %d", em, fwd[0].Skip)
			}
			want, _, _ := cold.generate(SessionID{10}, turn2, 4, false)
			if !slices.Equal(got, want) {
				t.Fatalf("cold retry %v, want %v", got, want)
			}
			for i, r := range warm.rigs {
				if st := r.s.status.Load(); st.Sessions != 0 || r.s.adm.Used() != 0 {
					t.Fatalf("hop %d holds %d sessions, %d bytes after all closed", i, st.Sessions, r.s.adm.Used())
				}
			}
		})
	}
}

// TestPrefixWiderRangeNotResumed: a node that cached (or still holds) a
// session over a wide range and is then a hop over part of it computes
// the part cold: a resume would carry the wide range's receipt chains,
// which hash other outputs than a cold run of the part, and a spot check
// of the honest hop would then find a mismatch (it did, in the testnet's
// honest-verify scenario, before lookup asked for the same range).
func TestPrefixWiderRangeNotResumed(t *testing.T) {
	wide, cold := newRealChain(t, []int{0, 8}, true), newRealChain(t, []int{0, 3, 8}, false)
	rng := rand.New(rand.NewPCG(21, 22))
	prompt := randomTokens(rng, 2*prefixBlock+5, wide.rigs[0].info.Vocab)
	if _, _, em := wide.run(SessionID{1}, prompt, 3, false); em != nil {
		t.Fatal(em.Text)
	}
	if _, _, em := wide.generate(SessionID{2}, prompt, 3, false); em != nil {
		t.Fatal(em.Text) // cached on close; session 1 stays live
	}
	// The wide node as the first hop of [0, 3): it forwards, so the
	// part's outputs are what its chains hash.
	r := wide.rigs[0]
	part := []Hop{{Peer: wide.hops[0].Peer, From: 0, To: 3}, cold.hops[1]}
	sid := SessionID{3}
	r.deliver(&stepIn{from: schedEntry, at: r.t0, m: &Step{Session: sid, Entry: schedEntry, Hops: part, Tokens: prompt,
		Open: &Open{MaxTokens: len(prompt) + 1, Model: r.s.cfg.hash, Sampling: prefixSampling}}})
	got := r.out.take(t)
	fwd, ok := got.m.(*Step)
	if !ok {
		t.Fatalf("the wide node did not forward: %s %+v", got.kind, got.m)
	}
	if fwd.Skip != 0 {
		t.Fatalf("resumed %d positions from a wider range", fwd.Skip)
	}
	c := cold.rigs[0]
	c.deliver(&stepIn{from: schedEntry, at: c.t0, m: &Step{Session: sid, Entry: schedEntry, Hops: cold.hops, Tokens: prompt,
		Open: &Open{MaxTokens: len(prompt) + 1, Model: c.s.cfg.hash, Sampling: prefixSampling, Cold: true}}})
	c.out.take(t)
	w, k := r.s.sessions[hopKey{sid, 0}], c.s.sessions[hopKey{sid, 0}]
	if w == nil || k == nil {
		t.Fatal("no hop session")
	}
	if w.chain.Pos() != k.chain.Pos() || w.chain.InChain() != k.chain.InChain() ||
		w.chain.OutChain() != k.chain.OutChain() || w.chain.OutLast() != k.chain.OutLast() {
		t.Fatal("the part's receipt chains differ from a cold run's")
	}
}

// TestPrefixFromLiveSession: a turn whose previous turn's session is
// still open on the hops (its close not arrived yet) resumes from that
// session's positions, bit-identical to a cold run, on every hop.
func TestPrefixFromLiveSession(t *testing.T) {
	cuts := []int{0, 3, 8}
	warm, cold := newRealChain(t, cuts, true), newRealChain(t, cuts, false)
	vocab := warm.rigs[0].info.Vocab
	rng := rand.New(rand.NewPCG(11, 12))
	turn1 := randomTokens(rng, 2*prefixBlock+3, vocab)
	out1, _, em := warm.run(SessionID{1}, turn1, 4, false)
	if em != nil {
		t.Fatal(em.Text)
	}
	turn2 := slices.Concat(turn1, out1, randomTokens(rng, 5, vocab))
	got, fwd, em := warm.generate(SessionID{2}, turn2, 6, false)
	if em != nil {
		t.Fatalf("%s: %s", em.Code, em.Text)
	}
	want, _, _ := cold.generate(SessionID{2}, turn2, 6, false)
	if !slices.Equal(got, want) {
		t.Fatalf("resumed from a live session: %v, cold %v", got, want)
	}
	if fwd[0].Skip != 2*prefixBlock {
		t.Fatalf("skip %d, want %d", fwd[0].Skip, 2*prefixBlock)
	}
	for i, r := range warm.rigs {
		if st := r.s.status.Load(); st.PrefixHits != 1 {
			t.Fatalf("hop %d: %d hits", i, st.PrefixHits)
		}
	}
	warm.close(SessionID{1})
}

// TestPrefixCacheYieldsToAdmission: the cache lives in the memory sessions
// leave: a session that needs it is admitted at once and the cache
// evicted, never queued or refused because of it; released layers take
// their cached prefixes with them.
func TestPrefixCacheYieldsToAdmission(t *testing.T) {
	r := newSchedRig(t, 0, 32, 0)
	r.s.cache = &prefixCache{}
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	per, _ := r.s.stages.need(hops[0], 1)
	r.s.cfg.memBudget = r.s.stages.weightBytes() + per*1024 + per/2
	prompt := randomTokens(rand.New(rand.NewPCG(3, 4)), 3*prefixBlock+5, 1000)
	r.deliver(r.open(SessionID{1}, hops, prompt, 1024))
	if got := r.out.take(t); got.kind != "token" {
		t.Fatalf("first session: %s", got.kind)
	}
	r.deliver(closeIn{from: schedEntry, sid: SessionID{1}})
	st := r.s.status.Load()
	if st.PrefixEntries != 1 || st.PrefixBytes != per*3*prefixBlock || r.s.adm.Used() != 0 {
		t.Fatalf("after close: %d entries of %d bytes (want %d), %d KV bytes used", st.PrefixEntries, st.PrefixBytes, per*3*prefixBlock, r.s.adm.Used())
	}
	if st.FreeKV != 1024 {
		t.Fatalf("free KV %d tokens with the cache, want 1024: the cache is not counted", st.FreeKV)
	}
	// Another prompt needing all the memory: admitted now, cache evicted.
	r.deliver(r.open(SessionID{2}, hops, []int32{7, 8, 9}, 1024))
	if got := r.out.take(t); got.kind != "token" {
		t.Fatalf("second session: %s %+v", got.kind, got.m)
	}
	if st := r.s.status.Load(); st.PrefixEntries != 0 || st.PrefixBytes != 0 || st.PrefixEvictions != 1 || st.Queue != 0 {
		t.Fatalf("after admission: %d entries, %d bytes, %d evictions, %d queued", st.PrefixEntries, st.PrefixBytes, st.PrefixEvictions, st.Queue)
	}
	r.deliver(closeIn{from: schedEntry, sid: SessionID{2}}) // 3 positions: no whole block
	if st := r.s.status.Load(); st.PrefixEntries != 0 {
		t.Fatalf("a session shorter than a block was cached")
	}
	// A resumed session: hits counted, and releasing the layers drops it.
	r.s.cfg.memBudget = r.s.stages.weightBytes() + per*4096
	r.deliver(r.open(SessionID{3}, hops, prompt, 1024))
	r.out.take(t)
	r.deliver(closeIn{from: schedEntry, sid: SessionID{3}})
	r.deliver(r.open(SessionID{4}, hops, slices.Concat(prompt, []int32{1, 2}), 1024))
	r.out.take(t)
	if st := r.s.status.Load(); st.PrefixHits != 1 || st.PrefixTokens != 3*prefixBlock {
		t.Fatalf("%d hits, %d tokens reused; want 1, %d", st.PrefixHits, st.PrefixTokens, 3*prefixBlock)
	}
	r.deliver(closeIn{from: schedEntry, sid: SessionID{4}})
	done := make(chan struct{})
	r.deliver(releaseIn{keep: layers.Range{Start: 0, End: 16}, done: done})
	if st := r.s.status.Load(); st.PrefixEntries != 0 || st.Prefixes != nil || st.Loaded != 16 {
		t.Fatalf("after release: %d entries, %d layers loaded", st.PrefixEntries, st.Loaded)
	}
}

// chatConfig routes by estimated time and prefix affinity ("chat"), or
// round-robin ("baseline"). It leaves out locality, and weighs the
// affinity heavily: the affinity scales a node's estimated compute, which
// for a tiny model is microseconds, so that loopback round trips and the
// noise of measured layer latencies on a loaded machine would otherwise
// decide (the example config's "chat" is for real models).
func chatConfig(t testing.TB) routing.SchedulerConfig {
	t.Helper()
	cfg, err := routing.ParseSchedulerConfig([]byte(`
default: chat
profiles:
  - name: chat
    scorers:
      - {name: latency, weight: 1}
      - {name: load, weight: 1}
      - {name: prefix-affinity, weight: 1000}
  - name: baseline
    picker: round-robin
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// referenceTokens generates from prompt tokens with the single-process
// pipeline.
func referenceTokens(t testing.TB, prompt []int32, maxTokens int, sp engine.SamplingParams) []int32 {
	t.Helper()
	p, err := engine.OpenPipeline(testModel(t), nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := p.NewSession(len(prompt) + maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Generate(context.Background(), prompt, maxTokens, sp, tok.IsEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPrefixAffinityRoutesTurnTwo: on four real nodes (two copies of each
// half of the model, so two equal paths and more), heartbeats carry each
// node's prefix summary, and the "chat" profile sends a chat's second
// turn to the hops that hold the first, which resume from their caches;
// the tokens are those of a single-process run.
func TestPrefixAffinityRoutesTurnTwo(t *testing.T) {
	// A static map of two copies of each half, so two equal paths and two
	// more, and an entry that holds no layers (so that no hop is local).
	// The declared device is slow enough that compute, which the affinity
	// scales, outweighs loopback round trips (the test model is tiny).
	dirs, ids := staticIDs(t, 5)
	var stages []layers.Stage
	for i, r := range []layers.Range{{Start: 0, End: 4}, {Start: 0, End: 4}, {Start: 4, End: 8}, {Start: 4, End: 8}} {
		stages = append(stages, layers.Stage{Node: ids[i+1].String(), Range: r})
	}
	m, err := layers.NewLayerMap(8, 1, stages...)
	if err != nil {
		t.Fatal(err)
	}
	slow := layers.Hardware{Name: "slow-cpu", MemoryBytes: 1 << 30, MemBandwidth: 2e7, TFLOPS: 2e-4}
	c := newTestCluster(t, WithStaticMap(m), WithSchedulerConfig(chatConfig(t)), WithHardware(slow),
		WithStepTimeout(30*time.Second)) // a loaded machine must not turn a slow step into a replay
	for i := range 5 {
		c.add(WithDataDir(dirs[i]))
	}
	c.waitServing(30*time.Second, ids[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := c.all()
	rng := rand.New(rand.NewPCG(5, 6))
	sp := engine.SamplingParams{Temperature: 0.9, Seed: 21}
	// Turn 1 goes round-robin ("baseline"), so that the rounds' first
	// turns take different paths; turn 2 must follow each.
	entry := nodes[0]
	waitFor(t, 20*time.Second, "every node serving in the entry's view", func() bool {
		v := entry.paths.view(entry.Committed(), time.Now())
		for _, n := range nodes[1:] {
			if ns, ok := v.Node(n.ID().String()); !ok || ns.Phase != routing.Serving || ns.Health != routing.Alive {
				return false
			}
		}
		return true
	})
	var firsts []string
	for round := range 2 {
		turn1 := randomTokens(rng, 3*prefixBlock+7, entry.model.info.Vocab)
		res1, err := entry.Complete(ctx, Request{Tokens: turn1, MaxTokens: 6, Sampling: sp, Profile: "baseline"})
		if err != nil {
			t.Fatal(err)
		}
		// 55 + 5 positions fed: three whole blocks cached, which are all of
		// turn 2's whole blocks.
		turn2 := slices.Concat(turn1, res1.Tokens, randomTokens(rng, 2, entry.model.info.Vocab))
		hashes := routing.BlockHashes(turn2, prefixBlock)
		path1 := res1.Paths[0]
		if slices.Contains(firsts, path1) {
			t.Fatalf("round-robin sent both first turns via %s", path1)
		}
		firsts = append(firsts, path1)
		// Wait until the entry's view shows the first turn's hops holding
		// its blocks: their heartbeats carry the summaries.
		waitFor(t, 20*time.Second, "prefix summaries in the entry's view", func() bool {
			v := entry.paths.view(entry.Committed(), time.Now())
			held := 0
			for _, n := range nodes {
				if ns, ok := v.Node(n.ID().String()); ok && strings.Contains(path1, n.ID().String()) &&
					ns.Prefixes.Match(hashes) >= 3 {
					held++
				}
			}
			return held == strings.Count(path1, "→")+1
		})
		before := map[peer.ID]uint64{}
		for _, n := range nodes {
			before[n.ID()] = n.Metrics().PrefixHits
		}
		res2, err := entry.Complete(ctx, Request{Tokens: turn2, MaxTokens: 6, Sampling: sp, Profile: "chat"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res2.Paths) != 1 || res2.Paths[0] != path1 {
			// What the router sees now, to tell a routing fault from noise.
			now := time.Now()
			v := entry.paths.view(entry.Committed(), now)
			for _, n := range nodes[1:] {
				ns, _ := v.Node(n.ID().String())
				t.Logf("node %s: health %v phase %v queue %d sessions %d latency %.2e match %d/%d updated %v ago",
					shortID(n.ID()), ns.Health, ns.Phase, ns.QueueDepth, ns.ActiveSessions, ns.LayerLatency,
					ns.Prefixes.Match(hashes), len(hashes), now.Sub(ns.Updated))
			}
			pr, _ := entry.paths.profiles.Profile("chat")
			paths, _ := pr.Router().Paths(entry.Committed(), v, routing.Request{Entry: entry.ID().String(),
				PromptTokens: len(turn2), MaxTokens: 6, Prefix: hashes}, now, 4)
			for _, p := range paths {
				t.Logf("candidate %s: cost %.3e %+v", p, p.Cost, p.Terms)
			}
			t.Fatalf("round %d: turn 2 went %v, turn 1 %s", round, res2.Paths, path1)
		}
		for _, n := range nodes {
			hit := n.Metrics().PrefixHits > before[n.ID()]
			if on := strings.Contains(path1, n.ID().String()); hit != on {
				t.Fatalf("round %d: node %s on the path %v, resumed %v", round, shortID(n.ID()), on, hit)
			}
		}
		if want := referenceTokens(t, turn2, 6, sp); !slices.Equal(res2.Tokens, want) {
			t.Fatalf("round %d: turn 2 %v, single process %v", round, res2.Tokens, want)
		}
		t.Logf("round %d: both turns via %s", round, path1)
	}
}

// TestSchedulerStaleDeferredStep: two steps of one session at the same
// position in one batch (a duplicate frame): the first runs, the second,
// now behind the session, is refused rather than run at an offset.
func TestSchedulerStaleDeferredStep(t *testing.T) {
	r := newSchedRig(t, 0, 32, 40<<30)
	hops := []Hop{{Peer: schedSelf, From: 0, To: 32}}
	r.deliver(r.open(SessionID{1}, hops, []int32{1, 2, 3}, 64))
	r.out.take(t)
	a := &stepIn{from: schedEntry, at: r.t0, m: &Step{Session: SessionID{1}, Entry: schedEntry, Hops: hops, Pos: 3, Tokens: []int32{4, 5, 6, 7}}}
	b := &stepIn{from: schedEntry, at: r.t0, m: &Step{Session: SessionID{1}, Entry: schedEntry, Hops: hops, Pos: 3, Tokens: []int32{4}}}
	r.deliver(a, b)
	if got := r.out.take(t); got.kind != "token" || got.m.(*Token).Pos != 7 {
		t.Fatalf("first step: %s %+v", got.kind, got.m)
	}
	ready := r.s.deferred
	r.s.deferred = nil
	r.s.execute(context.Background(), ready)
	if got := r.out.take(t); got.kind != "fail" || got.m.(*ErrorMsg).Code != CodeBadFrame {
		t.Fatalf("stale deferred step: %s %+v", got.kind, got.m)
	}
}

// TestPrefixSummarySize: the summary grows with the blocks cached, up to
// what a heartbeat carries, and holds every cached block.
func TestPrefixSummarySize(t *testing.T) {
	c := &prefixCache{}
	rng := rand.New(rand.NewPCG(9, 9))
	var all [][]uint64
	for range 40 {
		toks := randomTokens(rng, 20*prefixBlock, 1000)
		e := &prefixEntry{from: 0, to: 1, tokens: toks, hashes: routing.BlockHashes(toks, prefixBlock)}
		c.put(e)
		all = append(all, e.hashes)
	}
	b, err := c.summary.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if c.summary.Bits() != maxSummaryBits || len(b) > swarm.MaxPrefixLen {
		t.Fatalf("800 blocks: a summary of %d bits, %d bytes encoded", c.summary.Bits(), len(b))
	}
	for _, h := range all {
		if c.summary.Match(h) != len(h) {
			t.Fatal("a cached block is missing from the summary")
		}
	}
	c.close()
	c.put(&prefixEntry{from: 0, to: 1, hashes: all[0]})
	if c.summary.Bits() != routing.DefaultSummaryBits {
		t.Fatalf("20 blocks: %d bits", c.summary.Bits())
	}
}
