package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
)

// fourNodes starts four consensus nodes that offer at most four of the
// model's eight layers each, so that every path has at least two hops,
// and waits until the committed map places them all.
func fourNodes(t *testing.T) *testCluster {
	c := newTestCluster(t, WithMaxLayers(4))
	var ids []peer.ID
	for range 4 {
		ids = append(ids, c.add().ID())
	}
	c.waitServing(30*time.Second, ids...)
	m := c.all()[0].Committed()
	t.Logf("committed map epoch %d: %v", m.Epoch, m.Stages)
	return c
}

func TestGenerateMatchesSingleProcess(t *testing.T) {
	c := fourNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prompt, maxTokens = "Once upon a time", 24
	for _, sp := range []engine.SamplingParams{
		{},
		{Temperature: 0.9, TopP: 0.95, Seed: 9},
		{Temperature: 1.3, TopK: 50, Seed: 12345, RepeatPenalty: 1.2},
	} {
		want := reference(t, prompt, maxTokens, sp)
		for i, n := range c.all() {
			res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
			if err != nil {
				t.Fatalf("node %d, %+v: %v", i, sp, err)
			}
			if !slices.Equal(res.Tokens, want) {
				t.Fatalf("node %d, %+v:\n swarm %v\nsingle %v", i, sp, res.Tokens, want)
			}
			for _, p := range res.Paths {
				if strings.Count(p, "→") < 1 {
					t.Fatalf("path %s has fewer than two hops", p)
				}
			}
			if res.Usage.CompletionTokens != len(want) || res.Usage.PromptTokens == 0 {
				t.Fatalf("usage %+v", res.Usage)
			}
			t.Logf("node %d %+v: %d tokens via %v, %q", i, sp, len(res.Tokens), res.Paths, res.Text)
		}
	}
}
