package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// prefixCounters is each node's stage prefix counters once its scheduler
// has handled everything sent to it so far.
func prefixCounters(t *testing.T, ctx context.Context, nodes []*Node) (hits, tokens []uint64) {
	t.Helper()
	for _, n := range nodes {
		st, err := n.svc.sched.sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hits, tokens = append(hits, st.PrefixHits), append(tokens, st.PrefixTokens)
	}
	return hits, tokens
}

// TestPrefixHitRightAfter (issue 32): on three real nodes, two of which
// hold the same first half of the model (two equal paths through the
// third), a request sent right after the one that filled the prefix
// caches takes the same path and resumes from them on every hop, in
// every round: the same prompt again, or a chat's next turn. The entry
// knows what it just routed before any heartbeat says so, and the router
// counts a held prefix as prefill it need not do. Before, the seeded pick
// among equal paths sent about half of them to the cold copy. The tokens
// are a single-process run's.
func TestPrefixHitRightAfter(t *testing.T) {
	dirs, ids := staticIDs(t, 3)
	m, err := layers.NewLayerMap(8, 1,
		layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[2].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	// A loaded machine must not turn a slow step or a late heartbeat into
	// a replay: the check is of routing, not of failure handling.
	c := newTestCluster(t, WithStaticMap(m), WithStepTimeout(30*time.Second),
		WithSwarmOptions(swarm.WithLiveness(10*time.Second, 30*time.Second, 30*time.Second)))
	for i := range 3 {
		c.add(WithDataDir(dirs[i]))
	}
	c.waitServing(30*time.Second, ids...)
	nodes := c.all()
	entry := nodes[2] // on both paths: locality favours neither first hop
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	vocab := entry.model.info.Vocab
	// The oracle: a single-process run of the same model, opened once.
	pipe, err := engine.OpenPipeline(testModel(t), nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	reference := func(prompt []int32, n int) []int32 {
		s, err := pipe.NewSession(len(prompt) + n)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out, err := s.Generate(ctx, prompt, n, engine.SamplingParams{}, tok.IsEnd, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	rng := rand.New(rand.NewPCG(32, 1))
	const rounds, answer = 20, 4
	var firsts []string
	for round := range rounds {
		prompt := randomTokens(rng, 16*prefixBlock+5, vocab)
		a, err := entry.Complete(ctx, Request{Tokens: prompt, MaxTokens: answer})
		if err != nil {
			t.Fatal(err)
		}
		hits0, tok0 := prefixCounters(t, ctx, nodes)
		// Even rounds send the same prompt again, odd ones a chat's next
		// turn over it. The first hop resumes every whole block fed (the
		// prompt and all but the last token), leaving one to compute.
		next := prompt
		if round%2 == 1 {
			next = slices.Concat(prompt, a.Tokens, randomTokens(rng, 7, vocab))
		}
		fed := len(prompt) + len(a.Tokens) - 1
		resumed := min(fed/prefixBlock*prefixBlock, (len(next)-1)/prefixBlock*prefixBlock)
		// What the router saw, to tell a routing fault from noise.
		var seen []string
		{
			now := time.Now()
			v := entry.paths.view(entry.Committed(), now)
			hashes := routing.BlockHashes(next, prefixBlock)
			for _, n := range nodes {
				ns, _ := v.Node(n.ID().String())
				seen = append(seen, fmt.Sprintf("node %s: queue %d sessions %d latency %.2e match %d/%d updated %v ago",
					shortID(n.ID()), ns.QueueDepth, ns.ActiveSessions, ns.LayerLatency, ns.Prefixes.Match(hashes), len(hashes), now.Sub(ns.Updated)))
			}
			pr, _ := entry.paths.profiles.Profile("")
			paths, _ := pr.Router().Paths(entry.Committed(), v, routing.Request{Entry: entry.ID().String(),
				PromptTokens: len(next), MaxTokens: answer, Prefix: hashes}, now, 4)
			for _, p := range paths {
				seen = append(seen, fmt.Sprintf("router's candidate %s: cost %.3e", p, p.Cost))
			}
		}
		b, err := entry.Complete(ctx, Request{Tokens: next, MaxTokens: answer})
		if err != nil {
			t.Fatal(err)
		}
		hits1, tok1 := prefixCounters(t, ctx, nodes)
		if len(a.Paths) != 1 || len(b.Paths) != 1 || a.Paths[0] != b.Paths[0] {
			t.Log(strings.Join(seen, "\n"))
			t.Fatalf("round %d: the first request went %v, the next %v", round, a.Paths, b.Paths)
		}
		// Every hop resumes, the later ones exactly the positions the
		// first did. A node may serve two hops of one path: the router
		// can send layers of one node's range through the other holder
		// and back, where its measured costs make that cheaper.
		for i, n := range nodes {
			hops := strings.Count(a.Paths[0], n.ID().String())
			want, wantTok := uint64(hops), uint64(hops*resumed)
			if hits1[i]-hits0[i] != want || tok1[i]-tok0[i] != wantTok {
				t.Fatalf("round %d: node %d (%d hops of %s) resumed %d sessions, %d positions; want %d, %d",
					round, i, hops, a.Paths[0], hits1[i]-hits0[i], tok1[i]-tok0[i], want, wantTok)
			}
		}
		if ref := reference(next, answer); !slices.Equal(b.Tokens, ref) {
			t.Fatalf("round %d: resumed %v, single process %v", round, b.Tokens, ref)
		}
		first := a.Paths[0][:strings.Index(a.Paths[0], "[")]
		if !slices.Contains(firsts, first) {
			firsts = append(firsts, first)
		}
	}
	// Both copies served some round: the check ran over both paths, not
	// one the router favours anyway.
	t.Logf("first requests' first hops: %d distinct", len(firsts))
}

// TestRoutedPrefixes: the entry's records of what it routed where pick
// the path sharing the most leading blocks with a request, the newest
// among equals, among those the caller may use; a record outlives its
// ttl only while its hops' summaries hold it.
func TestRoutedPrefixes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newRoutedPrefixes(5 * time.Second)
	rng := rand.New(rand.NewPCG(3, 3))
	toks := randomTokens(rng, 10*prefixBlock, 512)
	p := routing.BlockHashes(toks, prefixBlock)
	q := routing.BlockHashes(randomTokens(rng, 4*prefixBlock, 512), prefixBlock)
	path := func(nodes ...string) routing.Path {
		var hs []routing.Hop
		for i, n := range nodes {
			hs = append(hs, routing.Hop{Node: n, From: i, To: i + 1})
		}
		return routing.Path{Hops: hs}
	}
	ab, cd, ad := path("a", "b"), path("c", "d"), path("a", "d")
	v := routing.NewView()
	for _, n := range []string{"a", "b", "c", "d"} {
		v.Set(routing.NodeState{ID: n})
	}
	any := func(routing.Path) bool { return true }
	pick := func(prefix []uint64, now time.Time, ok func(routing.Path) bool) (string, int) {
		got, n, found := r.pick(prefix, v, now, ok)
		if !found {
			return "", 0
		}
		return got.String(), n
	}
	if got, _ := pick(p, t0, any); got != "" {
		t.Fatalf("nothing routed: picked %s", got)
	}
	r.note(ab, p[:4], t0)
	r.note(ab, p, t0.Add(time.Second)) // extends the first: replaces it
	r.note(cd, p[:6], t0.Add(2*time.Second))
	r.note(ad, q, t0.Add(2*time.Second))
	if n := len(r.recs); n != 3 {
		t.Fatalf("%d records, want 3 (the extended one replaced)", n)
	}
	// A chat's next turn: the longest match wins, even if older.
	next := routing.BlockHashes(slices.Concat(toks, randomTokens(rng, 2*prefixBlock, 512)), prefixBlock)
	if got, n := pick(next, t0.Add(3*time.Second), any); got != ab.String() || n != len(p) {
		t.Fatalf("next turn: %s sharing %d blocks, want %s sharing %d", got, n, ab, len(p))
	}
	// Six blocks: both a→b and c→d hold them; the newer wins.
	if got, n := pick(p[:6], t0.Add(3*time.Second), any); got != cd.String() || n != 6 {
		t.Fatalf("six blocks: %s sharing %d, want %s", got, n, cd)
	}
	// A path the caller may not use is passed over for the next best.
	notCD := func(p routing.Path) bool { return p.String() != cd.String() }
	if got, n := pick(p[:6], t0.Add(3*time.Second), notCD); got != ab.String() || n != 6 {
		t.Fatalf("c→d unusable: %s sharing %d, want %s", got, n, ab)
	}
	if got, _ := pick(routing.BlockHashes(randomTokens(rng, 3*prefixBlock, 512), prefixBlock), t0, any); got != "" {
		t.Fatalf("an unrelated prompt picked %s", got)
	}
	// Past the ttl a record stays only while its hops' summaries hold it:
	// a and b's do; c's does not, and a→d's d holds nothing.
	holds := routing.NewPrefixSummary(routing.DefaultSummaryBits)
	holds.Add(p...)
	holds.Add(q...)
	for _, n := range []string{"a", "b", "c"} {
		v.Update(n, func(s *routing.NodeState) { s.Prefixes = holds })
	}
	if got, _ := pick(p[:6], t0.Add(time.Minute), any); got != ab.String() || len(r.recs) != 1 {
		t.Fatalf("a minute on: %s from %d records, want %s, the only one left", got, len(r.recs), ab)
	}
	v.Update("b", func(s *routing.NodeState) { s.Prefixes = nil }) // evicted
	if got, _ := pick(p, t0.Add(time.Minute), any); got != "" || len(r.recs) != 0 {
		t.Fatalf("after b evicted it: picked %q, %d records left", got, len(r.recs))
	}
	for i := range maxRouted + 3 {
		r.note(path("x", "y"), routing.BlockHashes(randomTokens(rng, prefixBlock, 512), prefixBlock), t0.Add(time.Duration(i)))
	}
	if len(r.recs) != maxRouted {
		t.Fatalf("%d records, want at most %d", len(r.recs), maxRouted)
	}
}

func TestSharedBlocksOfChains(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	a := randomTokens(rng, 9*prefixBlock, 512)
	for _, k := range []int{0, 1, 4, 8, 9} {
		b := slices.Clone(a)
		if k < 9 {
			b[k*prefixBlock+3]++
		}
		ha, hb := routing.BlockHashes(a, prefixBlock), routing.BlockHashes(b, prefixBlock)
		if got := shared(ha, hb); got != k {
			t.Errorf("differing in block %d: %d shared", k, got)
		}
		if got := shared(ha[:k/2], hb); got != k/2 {
			t.Errorf("a shorter chain of %d: %d shared", k/2, got)
		}
	}
}

// TestStickUsable: a path holding the request's prefix takes it only
// while it serves, none of its hops carries another of this entry's
// generations, and none has sessions waiting for KV memory or too little
// free for this one.
func TestStickUsable(t *testing.T) {
	m, err := layers.NewLayerMap(8, 1,
		layers.Stage{Node: "a", Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: "b", Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	p := routing.Path{Hops: []routing.Hop{{Node: "a", From: 0, To: 4}, {Node: "b", From: 4, To: 8}}}
	view := func(change func(*routing.NodeState)) *routing.View {
		v := routing.NewView()
		for _, n := range []string{"a", "b"} {
			ns := routing.NodeState{ID: n, Health: routing.Alive, Phase: routing.Serving, FreeKV: 1000}
			if n == "b" && change != nil {
				change(&ns)
			}
			v.Set(ns)
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		change func(*routing.NodeState)
		busy   map[string]bool
		avoid  []string
		want   bool
	}{
		{name: "idle", want: true},
		{name: "free KV unknown", change: func(n *routing.NodeState) { n.FreeKV = -1 }, want: true},
		{name: "another generation in flight through b", busy: map[string]bool{"b": true}},
		{name: "another generation in flight elsewhere", busy: map[string]bool{"c": true}, want: true},
		{name: "a session waiting for memory on b", change: func(n *routing.NodeState) { n.QueueDepth = 1 }},
		{name: "too little free KV on b", change: func(n *routing.NodeState) { n.FreeKV = 99 }},
		{name: "b suspect", change: func(n *routing.NodeState) { n.Health = routing.Suspect }},
		{name: "b draining", change: func(n *routing.NodeState) { n.Phase = routing.Draining }},
		{name: "b avoided", avoid: []string{"b"}},
	} {
		if got := stickUsable(m, view(tc.change), p, tc.avoid, tc.busy, 100); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
