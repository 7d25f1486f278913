package swarm

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// TestRelayServesOnlyMembers: a relay grants a slot to a member of its
// swarm once it has heard the member's heartbeats, and refuses a host of
// another swarm that is connected to it all the same. The diagnosis
// reports each side as it is.
func TestRelayServesOnlyMembers(t *testing.T) {
	fast := WithHeartbeatInterval(100 * time.Millisecond)
	relay := newTestHost(t, fast)
	member := newTestHost(t, fast, WithNoListen(), WithDiscovery(false), bootstrapOf(relay))
	stranger := newTestHost(t, fast, WithNoListen(), WithDiscovery(false), WithSwarmName("other"), WithRelayService(false))

	if st := stranger.links.NAT(); !st.Unreachable || st.Reachability != "private" || !strings.Contains(st.Advice, "UNREACHABLE") {
		t.Errorf("a host that listens nowhere and holds no relay slot: %+v", st)
	}
	waitFor(t, 15*time.Second, "member's relay reservation", func() bool {
		return slices.Equal(member.links.NAT().Relays, []peer.ID{relay.ID()})
	})
	if st := member.links.NAT(); st.Unreachable || st.Reachability != "private" || !st.Forced || !strings.Contains(st.Advice, "relay") {
		t.Errorf("member with a relay slot: %+v", st)
	}
	if st := relay.links.NAT(); st.Reachability != "public" || !st.RelayService || st.Unreachable {
		t.Errorf("relay: %+v", st)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stranger.Connect(ctx, relay.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Reserve(ctx, stranger.h, relay.AddrInfo()); err == nil {
		t.Fatal("the relay gave a slot to a host of another swarm")
	} else {
		t.Logf("stranger refused: %v", err)
	}
	// The stranger cannot open a circuit to the member either.
	circuit := relay.AddrInfo()
	for i, a := range circuit.Addrs {
		circuit.Addrs[i] = a.Encapsulate(mustAddr(t, "/p2p/"+relay.ID().String()+"/p2p-circuit"))
	}
	circuit.ID = member.ID()
	stranger.h.Peerstore().AddAddrs(member.ID(), circuit.Addrs, time.Minute)
	if err := stranger.h.Connect(ctx, peer.AddrInfo{ID: member.ID(), Addrs: circuit.Addrs}); err == nil {
		t.Error("a host of another swarm reached a member through the relay")
	}
}

func TestAdviceNamesTheFix(t *testing.T) {
	st := NATStatus{Reachability: "private", Unreachable: true}
	a := advice(st, "TCP port 4001 and UDP port 4001")
	for _, want := range []string{"UNREACHABLE", "forward TCP port 4001 and UDP port 4001", "UPnP", "--nat-portmap", "public member"} {
		if !strings.Contains(a, want) {
			t.Errorf("advice %q lacks %q", a, want)
		}
	}
	if a := advice(NATStatus{Reachability: "private", HolePunching: true, TCPOnly: true}, "TCP port 4001"); !strings.Contains(a, "TCP only") || !strings.Contains(a, "QUIC") {
		t.Errorf("advice under a swarm key does not say hole punching is TCP only: %q", a)
	}
	if a := advice(NATStatus{Reachability: "private", HolePunching: true}, "TCP port 4001"); strings.Contains(a, "TCP only") {
		t.Errorf("advice without a swarm key says TCP only: %q", a)
	}
	if a := advice(NATStatus{Reachability: "public", RelayService: true}, ""); strings.Contains(a, "forward") {
		t.Errorf("public host told to forward ports: %q", a)
	}
}

func mustAddr(t *testing.T, s string) ma.Multiaddr {
	t.Helper()
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
