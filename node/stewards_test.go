package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
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
	if err := sybil.SetSwarmStewards(ctx, []string{ids["sybil"].String()}); !errors.Is(err, consensus.ErrNotLeader) {
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
	if err := leader.SetSwarmStewards(ctx, grown); err != nil {
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
