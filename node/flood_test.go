package node

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/swarm"
)

// TestPeerFloods (issue 35's resource exhaustion, peer side): a rogue
// peer sends every Strata protocol an oversized length, a truncated
// frame, and thousands of streams it holds open, while a generation runs
// through the node it attacks. Each bad stream is dropped without a
// hang, the streams beyond the resource manager's limits are refused,
// the generation gets the single-process tokens, and the node's
// goroutines come back down once the rogue lets go.
func TestPeerFloods(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	a, b := c.add(), c.add()
	c.waitServing(20*time.Second, a.ID(), b.ID())
	r := newRogue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.h.Connect(ctx, b.host.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	const prompt, maxTokens = "Once upon a time", 64
	sp := engine.SamplingParams{Temperature: 0.7, Seed: 5}
	want := reference(t, prompt, maxTokens, sp)
	before := runtime.NumGoroutine()
	s, err := a.Generate(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp})
	if err != nil {
		t.Fatal(err)
	}

	protos := []protocol.ID{proto.Act, proto.Ctl, proto.Raft, proto.Chunk, proto.BW, proto.Steal}
	dropped := func(st *swarm.Stream, what string) {
		t.Helper()
		// The node answers (an error frame, at most) and closes or resets
		// the stream; it must not wait for the rest.
		_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, st)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s %s: the node held the stream for 10 s", st.Protocol(), what)
		}
		st.Reset()
	}
	for _, p := range protos {
		// A length far over any limit, then a little of the body.
		st, err := r.h.Streams().Open(ctx, b.ID(), p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		_, _ = st.Write(append([]byte{0xff, 0xff, 0xff, 0xff}, make([]byte, 1024)...))
		dropped(st, "oversized")
		// A frame that announces 100 bytes and sends 10, then closes.
		st, err = r.h.Streams().Open(ctx, b.ID(), p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		_, _ = st.Write([]byte{0, 0, 0, 100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
		_ = st.CloseWrite()
		dropped(st, "truncated")
	}

	// Streams held open: 2,000 per protocol, each with a byte written so
	// that the node's side accepts it under the protocol's scope.
	const flood = 2000
	var held []*swarm.Stream
	opened := map[protocol.ID]int{}
	for _, p := range protos {
		for range flood {
			st, err := r.h.Streams().Open(ctx, b.ID(), p)
			if err != nil {
				break
			}
			if _, err := st.Write([]byte{0}); err != nil {
				st.Reset()
				break
			}
			held = append(held, st)
			opened[p]++
		}
	}
	// What the node accepted and kept: streams it refused are reset on
	// the rogue's side.
	var peak int
	waitFor(t, 20*time.Second, "the node settled its side of the flood", func() bool {
		n := b.host.Links().OpenStreams(r.h.ID())
		settled := n == peak
		peak = n
		return settled
	})
	during := runtime.NumGoroutine()

	got, err := recvAll(s)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := s.Result()
	if !slices.Equal(got, want) {
		t.Fatalf("generation beside the flood: %d replays\n swarm %v\nsingle %v", res.Replays, got, want)
	}
	// A new generation through the attacked node is served too.
	if _, err := b.Complete(ctx, Request{Prompt: prompt, MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	for _, st := range held {
		st.Reset()
	}
	var after int
	waitFor(t, 20*time.Second, "goroutines back down", func() bool {
		after = runtime.NumGoroutine()
		return after <= before+64
	})
	t.Logf("rogue opened %v streams (of %d tried each); the node held %d at once; goroutines %d → %d → %d; generation beside it: %d replays",
		opened, flood, peak, before, during, after, res.Replays)
	// Every protocol is bounded for one peer well below the flood.
	for _, p := range protos {
		if opened[p] >= flood {
			t.Errorf("%s: the rogue held all %d streams it opened", p, flood)
		}
	}
}
