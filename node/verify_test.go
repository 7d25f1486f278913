package node

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

// verifyCluster starts n nodes of at most 4 layers each (so every range
// of the 8-layer model has 2+ holders) that spot-check every token
// boundary; extra options go to the node at index i.
func verifyCluster(t *testing.T, n int, extra map[int][]Option) (*testCluster, []*Node) {
	t.Helper()
	c := newTestCluster(t, WithMaxLayers(4), WithVerifyRate(1),
		WithConsensusOptions(consensus.WithBanDuration(time.Hour)))
	var nodes []*Node
	var ids []peer.ID
	for i := range n {
		nd := c.add(extra[i]...)
		nodes = append(nodes, nd)
		ids = append(ids, nd.ID())
	}
	c.waitServing(60*time.Second, ids...)
	t.Logf("map: %v", nodes[0].Committed().Stages)
	return c, nodes
}

// generate runs one greedy generation and returns its tokens and error.
func generate(ctx context.Context, t *testing.T, entry *Node, prompt string, maxTokens int) ([]int32, error) {
	t.Helper()
	s, err := entry.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: engineGreedy()})
	if err != nil {
		return nil, err
	}
	var got []int32
	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, d.Tokens...)
	}
}

// TestVerifyHonestSwarm: with no faulty node, every token boundary
// spot-checked, the checks pass, nobody is reported, and the tokens are
// the single-process run's.
func TestVerifyHonestSwarm(t *testing.T) {
	_, nodes := verifyCluster(t, 5, nil)
	const maxTokens = 12
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground"}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i, p := range prompts {
		want := reference(t, p, maxTokens, engineGreedy())
		got, err := generate(ctx, t, nodes[i%len(nodes)], p, maxTokens)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q: %v, want %v: %v", p, got, want, errMismatch)
		}
	}
	var total VerifyStats
	for _, n := range nodes {
		s := n.VerifyStats()
		total.Audits += s.Audits
		total.Verified += s.Verified
		total.Mismatches += s.Mismatches
		total.Reported += s.Reported
		total.Inconclusive += s.Inconclusive
		total.Unresolved += s.Unresolved
	}
	t.Logf("spot checks: %+v", total)
	if total.Verified == 0 {
		t.Fatalf("no spot check passed: %+v", total)
	}
	if total.Mismatches != 0 || total.Reported != 0 || total.Unresolved != 0 {
		t.Fatalf("an honest swarm had mismatches: %+v", total)
	}
	for _, n := range nodes {
		if st := n.Consensus().State(); len(st.Bans()) != 0 || st.Len() != len(nodes) {
			t.Fatalf("honest node evicted: %d members, bans %v", st.Len(), st.Bans())
		}
	}
}
