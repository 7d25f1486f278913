package node

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

func oneNode(t testing.TB, opts ...Option) *Node {
	dirs, ids := staticIDs(t, 1)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	n := c.add(append([]Option{WithDataDir(dirs[0])}, opts...)...)
	c.waitServing(10*time.Second, n.ID())
	return n
}

// TestGenerateErrors: every bad request is refused at once with the
// sentinel the HTTP layer maps to its status.
func TestGenerateErrors(t *testing.T) {
	n := oneNode(t)
	// A refusal waits for nothing: it comes even with a context that has
	// ended. (Its latency is BenchmarkRefusal's.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	nan := float32(math.NaN())
	for _, c := range []struct {
		name string
		req  Request
		want error
	}{
		{"nothing", Request{}, ErrBadRequest},
		{"prompt and tokens", Request{Prompt: "a", Tokens: []int32{1}}, ErrBadRequest},
		{"negative max", Request{Prompt: "a", MaxTokens: -1}, ErrBadRequest},
		{"NaN temperature", Request{Prompt: "a", Sampling: engine.SamplingParams{Temperature: nan}}, ErrBadRequest},
		{"negative temperature", Request{Prompt: "a", Sampling: engine.SamplingParams{Temperature: -1}}, ErrBadRequest},
		{"top-p above 1", Request{Prompt: "a", Sampling: engine.SamplingParams{TopP: 2}}, ErrBadRequest},
		{"negative top-k", Request{Prompt: "a", Sampling: engine.SamplingParams{TopK: -3}}, ErrBadRequest},
		{"token outside the vocabulary", Request{Tokens: []int32{1, 100000}}, ErrBadRequest},
		{"unknown model", Request{Model: "gpt-5", Prompt: "a"}, ErrUnknownModel},
		{"beyond the context", Request{Prompt: "a", MaxTokens: 5000}, ErrPromptTooLong},
		{"long prompt", Request{Prompt: strings.Repeat("once upon a time ", 1000), MaxTokens: 10}, ErrPromptTooLong},
	} {
		_, err := n.Generate(ctx, c.req)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	res, err := n.Complete(context.Background(), Request{Model: n.Model().Name, Messages: []engine.Message{{Role: "user", Content: "Hi"}}, MaxTokens: 4})
	if err != nil || res.Usage.PromptTokens == 0 || res.FinishReason == "" {
		t.Fatalf("chat request: %v %+v", err, res)
	}
}

// TestNoCapacityAndClose: a node with no full path refuses a request that
// asks not to queue at once, with ErrNoCapacity and a retry hint; a
// request that queues waits and runs once the missing holder joins;
// closing a node whose caller stopped
// reading a stream does not hang, and the stream ends with an error.
func TestNoCapacityAndClose(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	a := c.add(WithDataDir(dirs[0]))
	if err := a.Swarm().RouteErr; !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("ready with half the layers: %v", err)
	}
	_, err = a.Generate(context.Background(), Request{Prompt: "a", QueueTimeout: -1})
	if !errors.Is(err, ErrNoCapacity) || RetryAfter(err) <= 0 {
		t.Fatalf("%v (retry after %v)", err, RetryAfter(err))
	}
	queued := make(chan error, 1)
	go func() {
		res, err := a.Complete(context.Background(), Request{Prompt: "a", MaxTokens: 3, QueueTimeout: time.Minute})
		if err == nil && len(res.Tokens) == 0 {
			err = errors.New("no tokens")
		}
		queued <- err
	}()
	waitFor(t, 10*time.Second, "the request queued", func() bool { return a.Metrics().EntryQueue == 1 })
	b := c.add(WithDataDir(dirs[1]))
	c.waitServing(10*time.Second, a.ID(), b.ID())
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("the queued request: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued request did not run once the swarm could route")
	}
	s, err := a.Generate(context.Background(), Request{Prompt: "a", MaxTokens: 500})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the generation fills the stream's buffer and waits", func() bool { return len(s.deltas) == cap(s.deltas) })
	done := make(chan struct{})
	go func() { a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs on an unread stream")
	}
	var last error
	for last == nil {
		_, last = s.Recv()
	}
	if !errors.Is(last, ErrClosed) {
		t.Fatalf("the stream ended with %v", last)
	}
	if _, err := a.Generate(context.Background(), Request{Prompt: "a"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("generate on a closed node: %v", err)
	}
}
