package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// TestVerifiedWorkPlacement: two stewards found a swarm and two fresh
// non-stewards join, every node able to hold half of the 8-layer model.
// Every map the swarm commits keeps a steward on every layer (the fresh
// nodes hold layers beside them, never alone); requests through every
// node give the single-process tokens, none fails; and every spot check a
// steward saw a fresh node pass reaches the leader, through the steward's
// signed heartbeats, as that node's verified work.
func TestVerifiedWorkPlacement(t *testing.T) {
	const k = 2
	dirs := make([]string, 2)
	var stewards []string
	for i := range dirs {
		dirs[i] = t.TempDir()
		sk, err := swarm.LoadOrCreateIdentity(dirs[i])
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			t.Fatal(err)
		}
		stewards = append(stewards, id.String())
	}
	slices.Sort(stewards)
	// Round-robin over the map's disjoint pipelines: some pipeline holds a
	// fresh node whatever the map, so the stewards' requests cross one
	// within a turn. With the latency-and-load router a steward entry may
	// keep to the steward-only path (itself first, no network) for every
	// request: seen once beside make test's other packages, 56 requests
	// without a check of a fresh node.
	rr, err := routing.ParseSchedulerConfig([]byte("default: rr\nprofiles:\n  - name: rr\n    picker: round-robin\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithMaxLayers(4), WithTrustChecks(k), WithVerifyRate(1), WithSchedulerConfig(rr))
	s1 := c.add(WithDataDir(dirs[0]), WithStewards(stewards...))
	s2 := c.add(WithDataDir(dirs[1]))
	c.waitServing(90*time.Second, s1.ID(), s2.ID())
	f1, f2 := c.add(), c.add()
	all := []*Node{s1, s2, f1, f2}
	c.waitServing(90*time.Second, s1.ID(), s2.ID(), f1.ID(), f2.ID())
	if got := s1.Swarm().Stewards; !slices.Equal(got, stewards) {
		t.Fatalf("stewards %v, want %v", got, stewards)
	}
	waitEngines(t, all, func(*Node) bool { return true })

	// The stewards alone: what must cover every layer while the fresh
	// nodes are unverified (no map is planned after they are: rebalancing
	// is off in the test cluster).
	byStewards := layers.Trust{Full: k, Trusted: map[string]bool{stewards[0]: true, stewards[1]: true}}
	seen := map[string]bool{}
	checkMaps := func() {
		t.Helper()
		for _, n := range all {
			m := n.Committed()
			if key := fmt.Sprint(m.Epoch, m.Stages); !seen[key] {
				seen[key] = true
				if u := byStewards.Unvouched(m); len(u) != 0 {
					t.Fatalf("map %d %v leaves %v to fresh nodes alone", m.Epoch, m.Stages, u)
				}
			}
		}
	}
	checkMaps()

	const maxTokens = 6
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "The stewards vote"}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	failed := 0
	for i := range 16 {
		p := prompts[i%len(prompts)]
		entry := all[i%len(all)]
		got, err := generate(ctx, t, entry, p, maxTokens)
		if want := reference(t, p, maxTokens, engineGreedy()); err != nil || !slices.Equal(got, want) {
			failed++
			t.Errorf("request %d through %s: %v (err %v), want %v", i, entry.ID(), got, err, want)
		}
		checkMaps()
	}
	if failed != 0 {
		t.Fatalf("%d of 16 requests failed", failed)
	}

	// What the stewards' entries saw the fresh nodes pass reaches every
	// node's trust through heartbeats, the leader's included; what fresh
	// nodes say of each other counts at most k/2. A steward checks a
	// fresh node only on a path through it: with the round-robin turns
	// the requests above crossed one; a few more through the stewards
	// are allowed, no more.
	fresh := func() map[string]int {
		out := map[string]int{}
		for _, s := range []*Node{s1, s2} {
			for p, n := range s.entry.work.ByPeer() {
				if p == f1.ID() || p == f2.ID() {
					out[p.String()] += int(n)
				}
			}
		}
		return out
	}
	extra := 0
	for ; len(fresh()) == 0 && extra < 8; extra++ {
		p := prompts[extra%len(prompts)]
		entry := []*Node{s1, s2}[extra%2]
		got, err := generate(ctx, t, entry, p, maxTokens)
		if want := reference(t, p, maxTokens, engineGreedy()); err != nil || !slices.Equal(got, want) {
			t.Fatalf("request %d through %s: %v (err %v), want %v", 16+extra, entry.ID(), got, err, want)
		}
		checkMaps()
	}
	want := fresh()
	t.Logf("maps committed: %v; %d more requests through the stewards; their checks of fresh nodes: %v",
		slices.Sorted(maps.Keys(seen)), extra, want)
	if len(want) == 0 {
		t.Fatalf("after %d requests through the stewards, none had checked a fresh node", 8+extra)
	}
	var leader *Node
	for _, n := range all {
		if n.Swarm().IsLeader {
			leader = n
		}
	}
	if leader == nil {
		t.Fatal("no leader")
	}
	waitFor(t, 30*time.Second, "the stewards' checks in the leader's trust", func() bool {
		tr := leader.cons.Load().Trust()
		for id, n := range want {
			if tr.Checks[id] < n || tr.Checks[id] > n+k/2 {
				return false
			}
		}
		return true
	})
	tr := leader.cons.Load().Trust()
	for id, n := range want {
		if v := tr.Verified(id); v != (tr.Checks[id] >= k) || (n >= k && !v) {
			t.Fatalf("%s: %d checks, verified %v", id, tr.Checks[id], v)
		}
	}
	t.Logf("leader's trust: %v", tr.Checks)
}
