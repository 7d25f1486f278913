package node

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks"
)

// A node serving generations limits its uploads (the adaptive limit is
// the default), yet a peer fetching every chunk of the model from it
// completes, while generations go on and keep their exact output. Once
// the node serves nothing, uploads are unlimited again.
func TestUploadAdaptiveWhileServing(t *testing.T) {
	c := newTestCluster(t, WithChunkSize(chunks.MinChunkSize))
	n := c.add()
	c.waitServing(60*time.Second, n.ID())
	if n.upload == nil {
		t.Fatal("no adaptive upload limit on a node with the file")
	}
	if m := n.Metrics(); m.UploadLimit != 0 {
		t.Fatalf("upload limit %d before serving anything", m.UploadLimit)
	}
	const prompt, maxTokens = "The quick brown fox", 12
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Generations in a loop until stop closes.
	stop := make(chan struct{})
	var gens atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
			if err == nil && !slices.Equal(res.Tokens, want) {
				t.Errorf("tokens %v, want %v", res.Tokens, want)
			}
			if err != nil {
				errs <- err
				return
			}
			gens.Add(1)
		}
	})
	stopGens := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopGens()
	waitFor(t, 60*time.Second, "an upload limit while the node serves", func() bool {
		return n.Metrics().UploadLimit > 0
	})

	// A peer fetches every chunk meanwhile.
	h, _ := bareHost(t, n)
	man := testManifest(t)
	all := make([]int, man.NumChunks())
	for i := range all {
		all[i] = i
	}
	before := gens.Load()
	var fetched atomic.Int64 // the sink runs on the fetcher's goroutines
	if _, err := chunks.NewFetcher(h.Streams(), man, chunks.WithStallTimeout(10*time.Second)).Fetch(ctx, all, []peer.ID{n.ID()}, func(_ int, data []byte) error {
		fetched.Add(int64(len(data)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := fetched.Load()
	if got != man.FileSize {
		t.Fatalf("fetched %d bytes of %d", got, man.FileSize)
	}
	waitFor(t, 60*time.Second, "a generation completed after the fetch began", func() bool { return gens.Load() > before })
	m := n.Metrics()
	t.Logf("fetched %d bytes while %d generations ran; the node sent %d, limit now %d B/s, %d probes",
		got, gens.Load(), m.Uploaded, m.UploadLimit, m.UploadProbes)
	if m.Uploaded < got {
		t.Fatalf("the node counts %d bytes sent, the peer got %d", m.Uploaded, got)
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	stopGens()
	waitFor(t, 60*time.Second, "no upload limit once the node serves nothing", func() bool {
		return n.Metrics().UploadLimit == 0
	})
}
