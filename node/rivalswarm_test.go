package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// TestPublicRivalFounders: two founders found public swarm "pub-rival"
// for one model (real nodes, real Raft, stand-in DHT servers on
// loopback). A node that joined A's swarm when it was the only one (its
// data dir records A) joins A again beside the rival; joiners pinned to
// A, and to B, each end in their founder's Raft and never the other's;
// an unpinned first-time joiner is refused with both founders named; once
// A's swarm is gone the node that recorded A refuses B's.
func TestPublicRivalFounders(t *testing.T) {
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
	public := func(extra ...swarm.Option) Option {
		return WithSwarmOptions(append([]swarm.Option{swarm.WithSwarmName("pub-rival"), swarm.WithPublicDHT(servers...)}, extra...)...)
	}
	c := newTestCluster(t)
	start := func(limit time.Duration, opts ...Option) (*Node, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		n, err := New(ctx, append(baseOptions(t), opts...)...)
		if err == nil {
			c.mu.Lock()
			c.nodes = append(c.nodes, n)
			c.mu.Unlock()
		}
		return n, err
	}
	mustStart := func(opts ...Option) *Node {
		t.Helper()
		n, err := start(30*time.Second, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// inSwarmOf: n's own replicated state lists it and the founder as
	// members, and not the rival founder.
	inSwarmOf := func(n *Node, founder, rival peer.ID) {
		t.Helper()
		waitFor(t, 30*time.Second, "a member of the founder's swarm", func() bool {
			s := n.cons.Load().State()
			return s.IsMember(n.ID().String()) && s.IsMember(founder.String())
		})
		if s := n.cons.Load().State(); s.IsMember(rival.String()) {
			t.Fatalf("%s's swarm lists the rival founder %s", n.ID(), rival)
		}
		if ch := n.host.Charter(); ch == nil || ch.Founder != founder {
			t.Fatalf("%s holds charter %+v, want founder %s's", n.ID(), ch, founder)
		}
	}
	provided := func(n *Node) {
		t.Helper()
		select {
		case <-n.host.Discovery().PublicProvided():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never provided the rendezvous", n.ID())
		}
	}

	founderA := mustStart(public(), WithFounding(true), WithMaxLayers(4), WithDataDir(t.TempDir()))
	provided(founderA)
	tofuDir := t.TempDir()
	first := mustStart(public(), WithMaxLayers(4), WithDataDir(tofuDir))
	inSwarmOf(first, founderA.ID(), "")
	first.Close()

	founderB := mustStart(public(), WithFounding(true), WithMaxLayers(4), WithDataDir(t.TempDir()))
	provided(founderB)
	var swarmA []*Node
	for range 2 {
		n := mustStart(public(swarm.WithPinnedFounder(founderA.ID())), WithMaxLayers(4))
		inSwarmOf(n, founderA.ID(), founderB.ID())
		swarmA = append(swarmA, n)
	}
	for range 2 {
		n := mustStart(public(swarm.WithPinnedFounder(founderB.ID())), WithMaxLayers(4))
		inSwarmOf(n, founderB.ID(), founderA.ID())
		provided(n)
	}
	for _, n := range swarmA {
		provided(n)
	}

	_, err := start(30*time.Second, public(), WithMaxLayers(4), WithDataDir(t.TempDir()))
	if !isConfig(err) || !errors.Is(err, swarm.ErrRivalFounders) {
		t.Fatalf("unpinned first-time joiner beside two founders: %v, want ErrRivalFounders", err)
	}
	for _, id := range []peer.ID{founderA.ID(), founderB.ID()} {
		if !strings.Contains(err.Error(), id.String()) {
			t.Errorf("the refusal does not name founder %s: %v", id, err)
		}
	}
	t.Logf("unpinned first-time joiner: %v", err)

	again := mustStart(public(), WithMaxLayers(4), WithDataDir(tofuDir))
	inSwarmOf(again, founderA.ID(), founderB.ID())
	for _, n := range append(swarmA, again, founderA) {
		n.Close()
	}
	_, err = start(5*time.Second, public(), WithMaxLayers(4), WithDataDir(tofuDir))
	if !isConfig(err) || !errors.Is(err, swarm.ErrFounderMismatch) || !strings.Contains(err.Error(), founderB.ID().String()) {
		t.Fatalf("the node that recorded A, with only B's swarm up: %v, want ErrFounderMismatch naming B", err)
	}
	t.Logf("TOFU joiner, rival only: %v", err)
}
