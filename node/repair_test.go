package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestWaitForRepair: the only holder of half the layers dies mid-
// generation. New requests that ask not to queue are refused at once with ErrNoCapacity; the
// running generation waits, and once a new node joins and the leader's
// repair is committed it goes on to exactly the single-process output.
func TestWaitForRepair(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	a, b := c.add(), c.add()
	c.waitServing(20*time.Second, a.ID(), b.ID())
	if !a.cons.Load().IsLeader() {
		t.Fatal("the founder does not lead") // b is then a non-voter: its death leaves a quorum
	}
	const prompt, maxTokens = "It was a dark and stormy night", 64
	sp := greedy
	want := reference(t, prompt, maxTokens, sp)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := a.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
	if err != nil {
		t.Fatal(err)
	}
	var got []int32
	for len(got) < 5 {
		d, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d.Tokens...)
	}
	// The stream is not read meanwhile: once its buffer is full the
	// generation stops at a token boundary until the caller reads
	// again. So b dies with no step in flight, and the entry finds out
	// when it sends the next one: when b is the first hop, by a dial
	// that fails.
	waitFor(t, 10*time.Second, "the stream's buffer fills", func() bool { return len(s.deltas) == cap(s.deltas) })
	killedAt := time.Now()
	b.Kill()
	waitFor(t, 5*time.Second, "no path", func() bool {
		_, err := a.paths.route(routeReq{prompt: 1, max: 1})
		return err != nil
	})
	// Refused at once: even a context that has ended gets the refusal,
	// not a wait.
	ended, end := context.WithCancel(ctx)
	end()
	if _, err := a.Generate(ended, Request{Prompt: prompt, MaxTokens: 4, QueueTimeout: -1}); !errors.Is(err, ErrNoCapacity) || RetryAfter(err) <= 0 {
		t.Fatalf("a new request with no path: %v (retry after %v)", err, RetryAfter(err))
	}
	done := make(chan error, 1)
	go func() {
		for {
			d, err := s.Recv()
			if err != nil {
				done <- err
				return
			}
			got = append(got, d.Tokens...)
		}
	}()
	// The generation noticed the dead hop and waits for a path.
	waitFor(t, 10*time.Second, "the entry notices the dead hop", func() bool { return a.Metrics().HopFailures > 0 })
	joinAt := time.Now()
	n := c.add()
	select {
	case err := <-done:
		if err.Error() != "EOF" {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the generation did not finish")
	}
	res, _ := s.Result()
	if !slices.Equal(got, want) {
		t.Fatalf("after the repair:\n swarm %v\nsingle %v", got, want)
	}
	r, _ := a.Committed().Range(n.ID().String())
	t.Logf("the new node took %v; the generation waited %v after the kill (%v after the join), %d replay(s), paths %v",
		r, res.ReplayLatency, time.Since(joinAt).Round(time.Millisecond), res.Replays, res.Paths)
	if res.Replays == 0 || r.Empty() {
		t.Fatalf("%d replays, new node's range %v", res.Replays, r)
	}
	if lat := res.ReplayLatency; len(lat) == 0 || time.Since(killedAt) < lat[0] {
		t.Fatalf("replay latency %v", lat)
	}
}
