package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// TestTokenResentToEntry: real nodes on loopback, the entry holding the
// first half of the layers and the last hop the second. The last hop's
// first two sends of a token back to the entry fail as a failed dial
// would (a relay that has not heard a rejoined entry yet, then
// go-libp2p's dial backoff): the token is resent and arrives, so the
// generation gets the single-process tokens with no replay. Before, the
// token was dropped and the entry waited its step timeout, then
// replayed.
func TestTokenResentToEntry(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	a, b := c.add(), c.add()
	c.waitServing(30*time.Second, a.ID(), b.ID())
	entry, last := a, b
	if r, _ := a.Committed().Range(a.ID().String()); r.Start != 0 {
		entry, last = b, a
	}

	var mu sync.Mutex
	failed, sent := 0, 0
	send := last.svc.out.send // before any generation: no sender runs yet
	last.svc.out.send = func(ctx context.Context, to peer.ID, m Message) error {
		if _, ok := m.(*Token); ok && to == entry.ID() {
			mu.Lock()
			fail := failed < 2
			if fail {
				failed++
			} else {
				sent++
			}
			mu.Unlock()
			if fail {
				return fmt.Errorf("open activation stream to %s: %w: failed to dial: dial backoff", to, swarm.ErrUnreachable)
			}
		}
		return send(ctx, to, m)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prompt, maxTokens = "Once upon a time", 8
	want := reference(t, prompt, maxTokens, engineGreedy())
	res, err := entry.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want) {
		t.Fatalf("swarm %v\nsingle %v", res.Tokens, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if failed != 2 || sent != len(want) {
		t.Fatalf("%d token sends failed, %d went through; want 2 and %d", failed, sent, len(want))
	}
	if res.Replays != 0 || len(res.Paths) != 1 {
		t.Fatalf("%d replays on paths %v, want none", res.Replays, res.Paths)
	}
	t.Logf("path %v, TTFT %v", res.Paths, res.TTFT)
}
