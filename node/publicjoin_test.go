package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// TestJoinPublicSwarmByName: three stand-in public DHT servers; a founder
// of the public swarm "pub-node" (WithFounding), then two nodes with no
// bootstrap peer and a third without even the model file (its
// fingerprint only) that find it by name, join through consensus, get
// (or fetch) layers and serve a request whose tokens match a
// single-process run.
// A node looking for a swarm nobody founded gives up at its ctx and says
// how to found it.
func TestJoinPublicSwarmByName(t *testing.T) {
	var servers []peer.AddrInfo
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		s, err := swarm.NewDHTServer(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithBootstrapPeers(servers...))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s.AddrInfo())
	}
	public := func(name string) Option {
		return WithSwarmOptions(swarm.WithSwarmName(name), swarm.WithPublicDHT(servers...))
	}
	c := newTestCluster(t)
	start := func(opts ...Option) *Node {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := New(ctx, append(baseOptions(t), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
		return n
	}
	founder := start(public("pub-node"), WithFounding(true), WithMaxLayers(4), WithDataDir(t.TempDir()))
	began := time.Now()
	a := start(public("pub-node"), WithMaxLayers(4))
	b := start(public("pub-node"), WithMaxLayers(4))
	// No file, only the fingerprint: the key is found by it, and the
	// layers are fetched from the members found.
	f := start(public("pub-node"), byModelID(t, t.TempDir()), WithMaxLayers(2))
	t.Logf("three nodes found the swarm by name in %v", time.Since(began))
	c.waitServing(60*time.Second, founder.ID(), a.ID(), b.ID(), f.ID())
	if p := f.Swarm().Fetch; p.Fetched == 0 {
		t.Fatalf("the node without the file serves having fetched nothing: %+v", p)
	}
	for _, n := range []*Node{a, b, f} {
		if !n.cons.Load().State().IsMember(n.ID().String()) {
			t.Fatalf("%s serves but is no member", n.ID())
		}
	}
	const prompt, maxTokens = "Once upon a time", 8
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := b.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens})
	if err != nil || !slices.Equal(res.Tokens, want) {
		t.Fatalf("request through a joiner by name: %v %v, want %v", res.Tokens, err, want)
	}

	nctx, ncancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ncancel()
	_, err = New(nctx, append(baseOptions(t), public("nobody-founded-this"))...)
	if !isConfig(err) || !strings.Contains(err.Error(), "--found") {
		t.Fatalf("joining a swarm nobody founded: %v", err)
	}
}
