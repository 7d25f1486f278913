package monitor

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm"
)

// TestMonitorShowsForgery: a peer that answers the monitor protocol for
// its own ID with a snapshot signed by another key (claiming every layer
// served, thousands of tokens) is listed as unverified with the reason,
// and counts in neither coverage nor throughput; the honest member
// beside it is verified.
func TestMonitorShowsForgery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	honest, err := swarm.New(ctx, swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithReachability(swarm.ReachabilityPublic),
		swarm.WithLogger(zap.NewNop()), swarm.WithDiscovery(false), swarm.WithHeartbeatInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	honest.Beats().SetSnapshotSource(func() swarm.SnapshotInfo { return swarm.SnapshotInfo{ModelName: "tiny", Fingerprint: "fp", Layers: 8} })

	forger, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	other, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forger.SetStreamHandler(swarm.ProtocolMonitor, func(s network.Stream) {
		defer s.Close()
		req, err := swarm.ReadFrame(s, 1024)
		if err != nil || len(req) < 1+swarm.SnapshotNonceLen {
			s.Reset()
			return
		}
		snap := &swarm.Snapshot{Node: forger.ID(), Time: time.Now(), Swarm: swarm.DefaultSwarmName, Reachability: "public",
			SnapshotInfo: swarm.SnapshotInfo{ModelName: "tiny", Fingerprint: "fp", Layers: 8},
			Heartbeats: []*swarm.Heartbeat{
				{NodeID: forger.ID(), Status: swarm.Status{RangeStart: 0, RangeEnd: 8, State: swarm.StateServing}, Timestamp: time.Now().Add(-time.Second)},
				{NodeID: forger.ID(), Status: swarm.Status{RangeStart: 0, RangeEnd: 8, State: swarm.StateServing, TokensServed: 5000}, Timestamp: time.Now()},
			}}
		copy(snap.Nonce[:], req[1:1+swarm.SnapshotNonceLen])
		signed, err := swarm.SignSnapshot(snap, other)
		if err != nil {
			s.Reset()
			return
		}
		_ = swarm.WriteFrame(s, append([]byte{0}, signed...), 0)
	})

	m, err := New(ctx, WithBootstrap(honest.AddrInfo(), forger.Peerstore().PeerInfo(forger.ID())), WithoutDHT(), WithLimits(16, 5*time.Second, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sw, err := m.Swarms(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sw) != 1 || len(sw[0].Nodes) != 2 {
		t.Fatalf("swarms %+v", sw)
	}
	s := sw[0]
	if s.Verified != 1 || s.TokensPerSec != 0 || s.Coverage.Covered || s.Coverage.Max != 0 {
		t.Errorf("the forgery counted: %d verified, %v tok/s, coverage %+v", s.Verified, s.TokensPerSec, s.Coverage)
	}
	for _, n := range s.Nodes {
		switch n.ID {
		case forger.ID().String():
			if n.Verified || !strings.Contains(n.Error, "signature") || n.RangeEnd != 8 {
				t.Errorf("forger shown as %+v", n)
			}
		case honest.ID().String():
			if !n.Verified || n.Error != "" {
				t.Errorf("honest member shown as %+v", n)
			}
		}
	}
}
