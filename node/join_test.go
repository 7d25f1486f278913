package node

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/consensus"
)

func withLoadDelay(d time.Duration) Option {
	return func(c *config) error { c.loadDelay = d; return nil }
}

type loadRecord struct {
	start, end time.Time
	paths      []string
	err        error
}

// TestJoinUnderLoad: a node joins while generations run; the leader
// proposes a map that places it, the node warms up (slowly, so that
// requests run during the warmup), the map is committed, and requests
// before, during and after all succeed, the later ones through the new
// node.
func TestJoinUnderLoad(t *testing.T) {
	c := newTestCluster(t)
	a := c.add(WithMaxLayers(4))
	b := c.add(WithMaxLayers(4))
	c.waitServing(20*time.Second, a.ID(), b.ID())
	const prompt, maxTokens = "Once upon a time", 12
	want := reference(t, prompt, maxTokens, greedy)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	changes, stopWatch := a.cons.Load().Watch(256)
	defer stopWatch()

	var mu sync.Mutex
	var recs []loadRecord
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		entry := []*Node{a, b}[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := loadRecord{start: time.Now()}
				res, err := entry.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
				r.end, r.paths, r.err = time.Now(), res.Paths, err
				if err == nil && !slices.Equal(res.Tokens, want) {
					r.err = errMismatch
				}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
			}
		}()
	}
	// Some requests finish before the join.
	waitFor(t, 20*time.Second, "requests before the join", func() bool { mu.Lock(); defer mu.Unlock(); return len(recs) >= 3 })
	joinAt := time.Now()
	n := c.add(WithMaxLayers(8), withLoadDelay(80*time.Millisecond))
	var proposedAt, commitAt time.Time
	self := n.ID().String()
	for commitAt.IsZero() {
		select {
		case <-ctx.Done():
			t.Fatal("no commit placing the new node")
		case ch := <-changes:
			switch ev := ch.Record.Event.(type) {
			case consensus.MapProposed:
				if _, ok := ev.Map.Range(self); ok && proposedAt.IsZero() {
					proposedAt = time.Now()
					t.Logf("proposed epoch %d (%s): %v", ev.Map.Epoch, ev.Reason, ev.Map.Stages)
				}
			case consensus.MapCommitted:
				if r, ok := ch.State.Committed().Range(self); ok && !proposedAt.IsZero() {
					commitAt = time.Now()
					t.Logf("committed epoch %d; the new node serves %v after a warmup of %v", ev.Epoch, r, commitAt.Sub(proposedAt).Round(time.Millisecond))
				}
			}
		}
	}
	// After the commit: run until a request goes through the new node.
	used := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range recs {
			if r.start.After(commitAt) && r.err == nil {
				for _, p := range r.paths {
					if contains(p, self) {
						return true
					}
				}
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, "a request through the new node", used)
	close(stop)
	wg.Wait()

	var before, during, after int
	for _, r := range recs {
		if r.err != nil {
			t.Fatalf("request %v–%v failed: %v", r.start.Sub(joinAt), r.end.Sub(joinAt), r.err)
		}
		switch {
		case r.end.Before(joinAt):
			before++
		case r.start.After(proposedAt) && r.end.Before(commitAt):
			during++
		case r.start.After(commitAt):
			after++
		}
	}
	t.Logf("%d requests, all exact: %d before the join, %d during the warmup, %d after the commit", len(recs), before, during, after)
	if before == 0 || during == 0 || after == 0 {
		t.Fatalf("requests before/during/after: %d/%d/%d", before, during, after)
	}
}

var greedy = engineGreedy()
