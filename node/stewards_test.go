package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

// TestStewardsFoundedByFlag: a founder started with WithStewards (what
// --stewards gives) signs its three stewards into the swarm; a fourth
// node that names itself a steward in its own flags, and joined before
// the last steward, never votes, though without stewards it would (three
// voters by uptime). Requests through the non-steward and through the
// founder give the single-process tokens. A later change comes from the
// leader, a steward; the non-steward cannot make one.
func TestStewardsFoundedByFlag(t *testing.T) {
	dirs := map[string]string{}
	ids := map[string]peer.ID{}
	for _, name := range []string{"founder", "b", "sybil", "d"} {
		dirs[name] = t.TempDir()
		sk, err := swarm.LoadOrCreateIdentity(dirs[name])
		if err != nil {
			t.Fatal(err)
		}
		if ids[name], err = peer.IDFromPrivateKey(sk); err != nil {
			t.Fatal(err)
		}
	}
	stewards := slices.Sorted(slices.Values([]string{ids["founder"].String(), ids["b"].String(), ids["d"].String()}))
	c := newTestCluster(t)
	founder := c.add(WithDataDir(dirs["founder"]), WithStewards(stewards...))
	b := c.add(WithDataDir(dirs["b"]))
	sybil := c.add(WithDataDir(dirs["sybil"]), WithStewards(ids["sybil"].String()))
	d := c.add(WithDataDir(dirs["d"]))
	all := []*Node{founder, b, sybil, d}
	c.waitServing(90*time.Second, ids["founder"], ids["b"], ids["sybil"], ids["d"])
	waitFor(t, 30*time.Second, "the founder's stewards everywhere, and they the voters", func() bool {
		for _, n := range all {
			s := n.Swarm()
			var voters []string
			for _, v := range s.Voters {
				voters = append(voters, v.String())
			}
			slices.Sort(voters)
			if !slices.Equal(s.Stewards, stewards) || !slices.Equal(voters, stewards) {
				return false
			}
		}
		return true
	})

	const prompt, maxTokens = "The stewards vote", 6
	want := reference(t, prompt, maxTokens, engineGreedy())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, entry := range []*Node{sybil, founder} {
		res, err := entry.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
		if err != nil {
			t.Fatalf("through %s: %v", entry.ID(), err)
		}
		if !slices.Equal(res.Tokens, want) {
			t.Fatalf("through %s: %v, want %v", entry.ID(), res.Tokens, want)
		}
	}

	// The non-steward cannot change the set: it is not the leader, and
	// were it, the fold would refuse its signature.
	if err := sybil.SetSwarmConfig(ctx, SwarmChange{Stewards: []string{ids["sybil"].String()}}); !errors.Is(err, consensus.ErrNotLeader) {
		t.Fatalf("the non-steward's change: %v", err)
	}
	var leader *Node
	for _, n := range all {
		if n.Swarm().IsLeader {
			leader = n
		}
	}
	if leader == nil || !slices.Contains(stewards, leader.ID().String()) {
		t.Fatalf("leader %v is no steward", leader)
	}
	grown := slices.Sorted(slices.Values(append(slices.Clone(stewards), ids["sybil"].String())))
	if err := leader.SetSwarmConfig(ctx, SwarmChange{Stewards: grown}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the grown set everywhere", func() bool {
		for _, n := range all {
			if !slices.Equal(n.Swarm().Stewards, grown) {
				return false
			}
		}
		return true
	})
}

// BenchmarkSybilSwarm is issue 36's Sybil acceptance at the node level:
// three stewards found a swarm (the founder signs them in), twenty more
// nodes join naming themselves stewards in their own flags, and requests
// go through entries in turn, Sybils included. None of the twenty ever
// votes, no request fails, and every committed map keeps a steward on
// every layer (placement weighted by verified work: the Sybils are never
// verified, so they never hold layers alone). It runs 23 real
// nodes, so it lives behind make bench, not make test; it reports the
// failed requests, the voters that are no stewards and the most layers
// any committed map left to non-stewards alone (all 0 when it passes).
func BenchmarkSybilSwarm(b *testing.B) {
	const sybils = 20
	// Quiet: a benchmark's log is cut after a few lines, which would hide
	// the failure.
	c := newTestCluster(b, WithLogger(zap.NewNop()))
	var stewardIDs []string
	var dirs []string
	for range 3 {
		dir := b.TempDir()
		sk, err := swarm.LoadOrCreateIdentity(dir)
		if err != nil {
			b.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			b.Fatal(err)
		}
		dirs, stewardIDs = append(dirs, dir), append(stewardIDs, id.String())
	}
	slices.Sort(stewardIDs)
	var nodes []*Node
	for i, dir := range dirs {
		o := []Option{WithDataDir(dir)}
		if i == 0 {
			o = append(o, WithStewards(stewardIDs...))
		}
		nodes = append(nodes, c.add(o...))
	}
	// Sybils start at once, racing the founding (see
	// consensus.TestStewardsFoundingRace), and bootstrap through the
	// stewards alone, as strangers would,
	// rather than dialling every node (c.add's way): 23 nodes dialling
	// each other on two loaded cores timed out in the harness, not in
	// what is measured.
	var boot []peer.AddrInfo
	for _, n := range nodes {
		boot = append(boot, n.host.AddrInfo())
	}
	for range sybils {
		dir := b.TempDir()
		sk, err := swarm.LoadOrCreateIdentity(dir)
		if err != nil {
			b.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(sk)
		nodes = append(nodes, c.addVia(boot, WithDataDir(dir), WithStewards(id.String())))
	}
	var ids []peer.ID
	for _, n := range nodes {
		ids = append(ids, n.ID())
	}
	c.waitServing(5*time.Minute, ids...)
	nonStewardVoters := func() int {
		bad := 0
		for _, n := range nodes {
			for _, v := range n.Swarm().Voters {
				if !slices.Contains(stewardIDs, v.String()) {
					bad++
				}
			}
		}
		return bad
	}
	stewardsEverywhere := func() bool {
		for _, n := range nodes {
			if !slices.Equal(n.Swarm().Stewards, stewardIDs) {
				return false
			}
		}
		return true
	}
	waitFor(b, time.Minute, "the stewards everywhere", stewardsEverywhere)
	const prompt, maxTokens = "Sybils serve but never vote", 4
	want := reference(b, prompt, maxTokens, engineGreedy())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	byStewards := layers.Trust{Full: 1, Trusted: map[string]bool{}}
	for _, id := range stewardIDs {
		byStewards.Trusted[id] = true
	}
	unvouched := func(m layers.LayerMap) int {
		n := 0
		for _, r := range byStewards.Unvouched(m) {
			n += r.Len()
		}
		return n
	}
	i, failed, bad, alone := 0, 0, 0, 0
	for b.Loop() {
		entry := nodes[i%len(nodes)]
		i++
		res, err := entry.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
		if err == nil && !slices.Equal(res.Tokens, want) {
			err = errMismatch
		}
		if err != nil {
			failed++
			b.Logf("request %d through %s: %v", i, entry.ID(), err)
		}
		bad = max(bad, nonStewardVoters())
		alone = max(alone, unvouched(entry.Committed()))
	}
	b.ReportMetric(float64(failed), "failed")
	b.ReportMetric(float64(bad), "nonsteward-voters")
	b.ReportMetric(float64(i), "requests")
	b.ReportMetric(float64(alone), "layers-without-steward")
	if failed > 0 || bad > 0 || alone > 0 {
		b.Fatalf("%d of %d requests failed; %d voters are no stewards; a map left %d layers to non-stewards alone", failed, i, bad, alone)
	}
}

// addVia starts a node that bootstraps through boot only.
func (c *testCluster) addVia(boot []peer.AddrInfo, opts ...Option) *Node {
	t := c.t
	t.Helper()
	o := append(append(baseOptions(t), c.base...), WithBootstrap(boot...))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := New(ctx, append(o, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n
}
