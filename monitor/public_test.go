package monitor

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm"
)

// TestMonitorPublicDHT: with only the public DHT's bootstrap peers (two
// Amino-protocol stand-ins on loopback), the monitor finds the members
// of two public swarms through the index key every member provides, asks
// each, and lists each swarm with its members, signed; a member that
// never provided is not found.
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
	member := func(name, fp string, provide bool) *swarm.Host {
		h, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
			swarm.WithLogger(zap.NewNop()), swarm.WithSwarmName(name), swarm.WithModel(fp), swarm.WithModelFingerprint(fp),
			swarm.WithPublicDHT(servers...), swarm.WithHeartbeatInterval(100*time.Millisecond),
			swarm.WithAdvertiseBackoff(200*time.Millisecond, 2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if provide {
			h.Discovery().AdvertisePublic()
		}
		return h
	}
	a, b := member("pub", "fp-a", true), member("pub", "fp-a", true)
	c := member("pub2", "fp-c", true)
	silent := member("pub3", "fp-s", false)
	want := map[peer.ID]string{a.ID(): "pub", b.ID(): "pub", c.ID(): "pub2"}

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
	if len(sw) != 2 || sw[0].Name != "pub" || sw[1].Name != "pub2" || len(sw[0].Nodes) != 2 || len(sw[1].Nodes) != 1 ||
		sw[0].Verified != 2 || sw[1].Verified != 1 {
		t.Fatalf("swarms %+v", sw)
	}
	for _, s := range sw {
		for _, n := range s.Nodes {
			if n.Reachability != ReachDirect {
				t.Errorf("%s in %s: %s", n.ID, s.Name, n.Reachability)
			}
		}
	}
}
