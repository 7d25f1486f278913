package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// storiesModel is the shipped trained model: 5 layers.
const storiesModel = "../testdata/models/stories260K.gguf"

// promptly bounds a refusal that must come at once rather than after the
// entry queue's deadline (DefaultQueueTimeout, 30 s): generous, since
// the test machine may be loaded; the refusal itself takes milliseconds.
const promptly = 10 * time.Second

// TestUncoveredRefusedAtOnce, on real nodes and the real engine: a
// one-node swarm whose node offers 3 of stories260K's 5 layers has no map
// and can get none. A request is refused at once, not after the queue's
// 30 s, with ErrUncovered and ErrNoCapacity, naming the layers no node
// holds and the node's cap; Ready says the same. A second node that
// offers the other two makes the swarm serve. Once that node is gone for
// good, a request is refused at once again, naming the layers whose
// holder left.
func TestUncoveredRefusedAtOnce(t *testing.T) {
	c := newTestCluster(t, WithModelFile(storiesModel))
	a := c.add(WithMaxLayers(3))
	ctx := context.Background()
	req := Request{Prompt: "Once upon a time", MaxTokens: 4}

	// Sent at once, while the node may still be joining its own swarm:
	// it waits for that, then is refused.
	start := time.Now()
	_, err := a.Generate(ctx, req)
	took := time.Since(start)
	const want = "no path: layers [3,5) are served by no node; the swarm waits for more nodes (1 node, max 3 layers each; the model has 5): start another node with --bootstrap"
	if !errors.Is(err, ErrUncovered) || !errors.Is(err, ErrNoCapacity) || errors.Is(err, ErrQueueTimeout) ||
		!strings.Contains(err.Error(), want) || RetryAfter(err) != uncoveredRetry {
		t.Fatalf("refusal %v (retry after %v), want one saying %q", err, RetryAfter(err), want)
	}
	if took > promptly {
		t.Fatalf("refused after %v: the 30 s queue deadline is no place to wait for nodes", took)
	}
	t.Logf("refused in %v: %v", took.Round(time.Millisecond), err)
	if err := a.Swarm().RouteErr; !errors.Is(err, ErrUncovered) || !strings.Contains(err.Error(), "layers [3,5) are served by no node") {
		t.Fatalf("ready: %v", err)
	}
	// Refused at once again, now that the node is surely a member.
	start = time.Now()
	if _, err := a.Generate(ctx, req); !errors.Is(err, ErrUncovered) || time.Since(start) > promptly {
		t.Fatalf("second refusal %v after %v", err, time.Since(start))
	}
	if m := a.Metrics(); m.EntryQueue != 0 {
		t.Fatalf("%d request(s) left in the queue", m.EntryQueue)
	}

	b := c.add(WithMaxLayers(2))
	c.waitServing(30*time.Second, a.ID(), b.ID())
	res, err := a.Complete(ctx, req)
	if err != nil || len(res.Tokens) != 4 {
		t.Fatalf("with the layers covered: %+v, %v", res, err)
	}

	b.Kill()
	waitFor(t, 30*time.Second, "the swarm refusing for want of nodes once b is gone", func() bool {
		return errors.Is(a.Swarm().RouteErr, ErrUncovered)
	})
	start = time.Now()
	_, err = a.Generate(ctx, req)
	if !errors.Is(err, ErrUncovered) || !strings.Contains(err.Error(), "since their holders left the swarm") ||
		!strings.Contains(err.Error(), "1 node, max 3 layers each") || time.Since(start) > promptly {
		t.Fatalf("after b left: %v after %v", err, time.Since(start))
	}
}

// TestShortfallText: what a refusal says for each kind of shortfall.
func TestShortfallText(t *testing.T) {
	for _, c := range []struct {
		sf   layers.Shortfall
		want string
	}{
		{layers.Shortfall{Layers: 5, Caps: []int{3}, Gap: layers.Range{Start: 3, End: 5}},
			"layers [3,5) are served by no node; the swarm waits for more nodes (1 node, max 3 layers each; the model has 5)"},
		{layers.Shortfall{Layers: 8, Caps: []int{2, 2, 2}, Gap: layers.Range{Start: 6, End: 8}}, "(3 nodes, max 2 layers each; the model has 8)"},
		{layers.Shortfall{Layers: 8, Caps: []int{1, 4, 2}, Gap: layers.Range{Start: 7, End: 8}}, "layers [7,8) are served by no node; the swarm waits for more nodes (3 nodes, max 4+2+1 layers;"},
		{layers.Shortfall{Layers: 5, Caps: []int{0}, Gap: layers.Range{Start: 0, End: 5}, LayerBytes: 3 << 20, MaxMemory: 1 << 20},
			"layers [0,5) are served by no node, since no node can hold even one layer of the model (a layer takes 3.0 MiB with one session's KV cache; the largest node offers 1.0 MiB); the swarm waits for a node with more memory"},
		{layers.Shortfall{Layers: 5, Gap: layers.Range{Start: 0, End: 5}}, "(no node may hold layers now: each is draining, dead or left out after missing a warmup; the model has 5)"},
	} {
		if got := shortfallText(c.sf); !strings.Contains(got, c.want) {
			t.Errorf("%+v:\n%s\nlacks %q", c.sf, got, c.want)
		}
	}
}
