package node

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/weights"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// bareHost is a host connected to the boot nodes, with no node on it.
func bareHost(t *testing.T, boot ...*Node) (*swarm.Host, []peer.AddrInfo) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
		swarm.WithDiscovery(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	var infos []peer.AddrInfo
	for _, b := range boot {
		ai := b.host.AddrInfo()
		if err := h.Connect(ctx, ai); err != nil {
			t.Fatal(err)
		}
		infos = append(infos, ai)
	}
	return h, infos
}

// fetchPeer is a bare host with a fetch of the test model: the fetch
// side of a joining node, driven range by range.
func fetchPeer(t *testing.T, boot ...*Node) *weights.Remote {
	t.Helper()
	h, infos := bareHost(t, boot...)
	data, err := testManifest(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f, err := weights.NewRemote(weights.RemoteConfig{Net: h.Streams(), Fingerprint: testManifest(t).Fingerprint, Dir: t.TempDir(),
		Boot: infos, Stall: 10 * time.Second, RequestRate: DefaultChunkRequestRate, RequestBurst: DefaultChunkRequestBurst,
		Log: testLogger(t)}, data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// A node that fetched a slice serves its chunks: with the founder (the
// only holder of the file) gone, a newcomer fetches the slice holder's
// range from it alone. And a node moved to a new range copies what the
// two ranges share from its old slice and fetches only the difference.
func TestFetchFromSliceHolderAndMove(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4), WithChunkSize(chunks.MinChunkSize))
	founder := c.add(WithDataDir(t.TempDir()))
	holder := c.add(byModelID(t, t.TempDir()))
	c.waitServing(60*time.Second, founder.ID(), holder.ID())
	hr, ok := founder.Committed().Range(holder.ID().String())
	if !ok || hr.Len() < 2 {
		t.Fatalf("the slice holder serves %v", hr)
	}
	man := testManifest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A move: [0, 2) then [1, 4).
	mover := fetchPeer(t, founder, holder)
	r1, r2 := layers.Range{Start: 0, End: 2}, layers.Range{Start: 1, End: 4}
	if _, err := mover.Slice(ctx, r1); err != nil {
		t.Fatal(err)
	}
	before := mover.Progress().Fetched
	if _, err := mover.Slice(ctx, r2); err != nil {
		t.Fatal(err)
	}
	old, _ := man.ChunksFor(r1.Start, r1.End)
	need, _ := man.ChunksFor(r2.Start, r2.End)
	had := map[int]bool{}
	for _, i := range old {
		had[i] = true
	}
	var shared, diff []int
	for _, i := range need {
		if had[i] {
			shared = append(shared, i)
		} else {
			diff = append(diff, i)
		}
	}
	got := mover.Progress().Fetched - before
	t.Logf("move %v → %v: fetched %d bytes, reused %d, the new range's chunks are %d", r1, r2, got, mover.Reused(), man.Bytes(need))
	if got != man.Bytes(diff) || mover.Reused() != man.Bytes(shared) {
		t.Fatalf("move fetched %d bytes (want the difference, %d) and reused %d (want %d)", got, man.Bytes(diff), mover.Reused(), man.Bytes(shared))
	}

	// The founder goes; the slice holder alone serves its range.
	founder.Kill()
	newcomer := fetchPeer(t, holder)
	path, err := newcomer.Slice(ctx, hr)
	if err != nil {
		t.Fatalf("fetch of %v from the slice holder alone: %v", hr, err)
	}
	newcomer.Release(path)
	rb, _ := man.RangeBytes(hr.Start, hr.End)
	if got := newcomer.Progress().Fetched; got != rb {
		t.Fatalf("fetched %d bytes of %v, want %d", got, hr, rb)
	}
	mine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile(holder.model.fetch.SlicePath(hr))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("the slice fetched from the slice holder differs from the holder's")
	}
	if !newcomer.Serving() {
		t.Fatal("the newcomer does not serve its slice in turn")
	}
}

// SwarmModel learns the swarm's model from a bootstrap peer, which a
// joiner by name then joins with; no peer is a config error.
func TestSwarmModel(t *testing.T) {
	c := newTestCluster(t, WithChunkSize(chunks.MinChunkSize))
	founder := c.add(WithDataDir(t.TempDir()))
	c.waitServing(30*time.Second, founder.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fp, err := SwarmModel(ctx, []peer.AddrInfo{founder.host.AddrInfo()})
	if err != nil || fp != founder.Model().Fingerprint || fp == "" {
		t.Fatalf("swarm model %q, %v; the founder serves %q", fp, err, founder.Model().Fingerprint)
	}
	j := c.add(func(c *config) error { c.modelPath, c.modelID, c.dataDir = "", fp, t.TempDir(); return nil })
	c.waitServing(60*time.Second, founder.ID(), j.ID())
	if _, err := SwarmModel(ctx, nil); !isConfig(err) {
		t.Fatalf("no bootstrap peers: %v", err)
	}
}

// A joiner's fetch progress reaches the other nodes in its heartbeats:
// the founder sees it while the joiner fetches (uploads capped so that
// the fetch lasts), and no more once it serves.
func TestFetchProgressInHeartbeats(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4), WithChunkSize(chunks.MinChunkSize))
	founder := c.add(WithDataDir(t.TempDir()), WithUploadRate(100_000))
	j := c.add(byModelID(t, t.TempDir()))
	seen := func() (done, total int64) {
		for _, p := range founder.Swarm().Peers {
			if p.ID == j.ID() && p.Heartbeat != nil {
				return p.Heartbeat.FetchDone, p.Heartbeat.FetchTotal
			}
		}
		return 0, 0
	}
	var done, total int64
	waitFor(t, 60*time.Second, "the founder hears the joiner's fetch progress", func() bool {
		done, total = seen()
		return total > 0
	})
	t.Logf("the founder sees the joiner at %d of %d bytes", done, total)
	if done > total {
		t.Fatalf("progress %d of %d", done, total)
	}
	c.waitServing(60*time.Second, founder.ID(), j.ID())
	waitFor(t, 30*time.Second, "the progress clears once the joiner serves", func() bool {
		_, total := seen()
		return total == 0
	})
}
