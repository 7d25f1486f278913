package swarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// newDHTServers starts n Amino-protocol DHT servers on loopback, each
// bootstrapped from those before it: the public DHT's stand-in.
func newDHTServers(t testing.TB, n int) []peer.AddrInfo {
	t.Helper()
	var out []peer.AddrInfo
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := NewDHTServer(ctx, WithListenAddrs(loopback), WithBootstrapPeers(out...),
			WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		out = append(out, s.AddrInfo())
	}
	return out
}

// TestJoinByName: three stand-in DHT servers, a founder of the public
// swarm "pub" that provides its rendezvous, decoys (another swarm name,
// the same name with another model, a member that never advertised), and
// a joiner with no bootstrap address that finds the founder by name
// alone, within a deadline, and hears its heartbeats; the DHT servers stay
// out of the peer tables; the index key lists every advertised member of
// every public swarm.
func TestJoinByName(t *testing.T) {
	servers := newDHTServers(t, 3)
	public := func(name, fp string) []Option {
		return []Option{WithSwarmName(name), WithModel(fp[len(fp)-4:]), WithModelFingerprint(fp), WithPublicDHT(servers...)}
	}
	founder := newTestHost(t, append(public("pub", "fp-model-aaaa"), WithFounder())...)
	otherName := newTestHost(t, append(public("pub2", "fp-model-aaaa"), WithFounder())...)
	otherModel := newTestHost(t, append(public("pub", "fp-model-bbbb"), WithFounder())...)
	silent := newTestHost(t, public("pub", "fp-model-aaaa")...)
	for _, h := range []*Host{founder, otherName, otherModel} {
		h.disco.AdvertisePublic()
	}
	if !founder.disco.PublicDiscovery() || !founder.disco.PublicRendezvousKey().Equals(PublicRendezvous("pub", "fp-model-aaaa")) {
		t.Fatalf("founder's key %v", founder.disco.PublicRendezvousKey())
	}

	start := time.Now()
	joiner := newTestHost(t, public("pub", "fp-model-aaaa")...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	found, err := joiner.disco.FindSwarm(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	for _, ai := range found {
		if ai.ID != founder.ID() {
			t.Errorf("joiner found %s, which is not a member that advertised swarm pub for this model (founder %s, other name %s, other model %s, silent %s)",
				ai.ID, founder.ID(), otherName.ID(), otherModel.ID(), silent.ID())
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d members, want the founder alone", len(found))
	}
	waitFor(t, 10*time.Second, "founder's heartbeats at the joiner", func() bool { return livePeers(joiner)[founder.ID()] })
	t.Logf("joined by name in %v (found the founder in %v)", time.Since(start), took)

	// The DHT servers speak no Strata: connected, yet no row in the peer
	// tables (nothing pings them or asks them for relay slots).
	waitFor(t, 10*time.Second, "DHT servers connected but out of the peer tables", func() bool {
		for _, h := range []*Host{founder, joiner} {
			conns := 0
			for _, s := range servers {
				if _, ok := h.Peers().Get(s.ID); ok {
					return false
				}
				conns += len(h.h.Network().ConnsToPeer(s.ID))
			}
			if conns == 0 {
				return false
			}
		}
		return true
	})

	// The index: every advertised member of every public swarm, and no one else.
	want := map[peer.ID]bool{founder.ID(): true, otherName.ID(): true, otherModel.ID(): true}
	waitFor(t, 20*time.Second, "the index lists every advertised member", func() bool {
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		defer icancel()
		got := map[peer.ID]bool{}
		for ai := range joiner.pub.dht.FindProvidersAsync(ictx, SwarmIndexKey(), 0) {
			if !want[ai.ID] {
				t.Fatalf("index lists %s, which never advertised", ai.ID)
			}
			got[ai.ID] = true
		}
		return len(got) == len(want)
	})
}

// TestPublicDHTRefused: a private swarm, the default name and an empty
// bootstrap list are refused with ErrConfig; FindSwarm on a host without
// the public DHT says why.
func TestPublicDHTRefused(t *testing.T) {
	boot := peer.AddrInfo{ID: "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"}
	key := make([]byte, 32)
	for name, opts := range map[string][]Option{
		"swarm key":    {WithSwarmName("x"), WithSwarmKey(key), WithPublicDHT(boot)},
		"default name": {WithPublicDHT(boot)},
		"no peers":     {WithSwarmName("x"), WithPublicDHT()},
	} {
		if _, err := New(context.Background(), append([]Option{WithListenAddrs(loopback)}, opts...)...); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	h := newTestHost(t)
	if _, err := h.disco.FindSwarm(context.Background()); !errors.Is(err, ErrConfig) {
		t.Errorf("FindSwarm without a public DHT: %v", err)
	}
}
