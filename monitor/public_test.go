package monitor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm"
)

// TestMonitorPublicDHT: with only the public DHT's bootstrap peers (two
// Amino-protocol stand-ins on loopback), the monitor finds the members
// of public swarms through the index key every member provides, asks
// each, and lists each swarm with its members, signed; two rival swarms
// founded under one name and model are listed apart, each with the
// founder its members' charters are signed by; a member that never
// provided is not found.
func TestMonitorPublicDHT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var servers []peer.AddrInfo
	for range 2 {
		s, err := swarm.NewDHTServer(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithBootstrapPeers(servers...),
			swarm.WithLogger(zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		servers = append(servers, s.AddrInfo())
	}
	member := func(name, fp string, provide bool, extra ...swarm.Option) *swarm.Host {
		h, err := swarm.New(ctx, append([]swarm.Option{swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithLogger(zap.NewNop()), swarm.WithSwarmName(name), swarm.WithModel(fp), swarm.WithModelFingerprint(fp),
			swarm.WithPublicDHT(servers...), swarm.WithHeartbeatInterval(100 * time.Millisecond),
			swarm.WithAdvertiseBackoff(200*time.Millisecond, 2*time.Second)}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if provide {
			h.Discovery().AdvertisePublic()
		}
		return h
	}
	// a founds "pub"; b founds a rival "pub" for the same model, which b2
	// joins (through b's address: it learns the charter from b).
	a := member("pub", "fp-a", true, swarm.WithFounder())
	b := member("pub", "fp-a", true, swarm.WithFounder())
	b2 := member("pub", "fp-a", true, swarm.WithBootstrapPeers(b.AddrInfo()))
	c := member("pub2", "fp-c", true, swarm.WithFounder())
	silent := member("pub3", "fp-s", false, swarm.WithFounder())
	want := map[peer.ID]string{a.ID(): "pub", b.ID(): "pub", b2.ID(): "pub", c.ID(): "pub2"}

	m, err := New(ctx, WithPublicDHT(servers...), WithoutDHT(), WithLimits(64, 5*time.Second, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Providing takes a moment after start: crawl until every provider
	// is found, failing on anything that is not one.
	var sw []Swarm
	waitUntil(t, 30*time.Second, "the monitor finds every member that provided", func() bool {
		obs, err := m.Crawl(ctx)
		if err != nil {
			return false
		}
		seen := 0
		for _, o := range obs {
			if o.Peer == silent.ID() {
				t.Fatalf("found %s, which never provided", o.Peer)
			}
			if name, ok := want[o.Peer]; ok && o.Verified && o.Snapshot.Swarm == name {
				seen++
			}
		}
		sw = Aggregate(obs)
		return seen == len(want)
	})
	founded := map[string][]peer.ID{a.ID().String(): {a.ID()}, b.ID().String(): {b.ID(), b2.ID()}, c.ID().String(): {c.ID()}}
	if len(sw) != 3 {
		t.Fatalf("%d swarms, want pub twice (rivals) and pub2: %+v", len(sw), sw)
	}
	for _, s := range sw {
		members, ok := founded[s.Founder]
		if !ok {
			t.Fatalf("swarm %s listed with founder %q, none of the founders", s.Name, s.Founder)
		}
		delete(founded, s.Founder)
		if s.Verified != len(members) || len(s.Nodes) != len(members) {
			t.Fatalf("swarm %s of founder %s: %d nodes (%d verified), want %d", s.Name, s.Founder, len(s.Nodes), s.Verified, len(members))
		}
		for _, n := range s.Nodes {
			id, err := peer.Decode(n.ID)
			if err != nil || !slices.Contains(members, id) || n.CharterError != "" {
				t.Fatalf("swarm %s of founder %s lists %s (charter error %q), not one of its members", s.Name, s.Founder, n.ID, n.CharterError)
			}
		}
	}
	for _, s := range sw {
		for _, n := range s.Nodes {
			if n.Reachability != ReachDirect {
				t.Errorf("%s in %s: %s", n.ID, s.Name, n.Reachability)
			}
		}
	}
}
