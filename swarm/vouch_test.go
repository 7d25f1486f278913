package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestVouchesGossiped: a host vouching for more peers than a heartbeat
// carries rotates through them, and a peer hearing it merges every one
// into its table, the largest count each; a vouch for oneself is never
// sent.
func TestVouchesGossiped(t *testing.T) {
	fast := WithHeartbeatInterval(50 * time.Millisecond)
	a := newTestHost(t, fast, WithDiscovery(false))
	b := newTestHost(t, fast, WithDiscovery(false), bootstrapOf(a))
	want := map[peer.ID]uint32{b.ID(): 7}
	vs := []Vouch{{Peer: b.ID(), Checks: 3}, {Peer: b.ID(), Checks: 7}, {Peer: a.ID(), Checks: 99}}
	for i := range 3*MaxVouches + 1 {
		p := testPeerID(t)
		want[p] = uint32(i + 1)
		vs = append(vs, Vouch{Peer: p, Checks: uint32(i + 1)})
	}
	a.beat.SetVouches(vs)
	got := func() map[peer.ID]uint32 {
		out := map[peer.ID]uint32{}
		for _, at := range b.Peers().Attestations() {
			if at.Checker != a.ID() {
				t.Fatalf("attestation by %s", at.Checker)
			}
			out[at.Subject] = at.Checks
		}
		return out
	}
	waitFor(t, 20*time.Second, "b holds every vouch of a's", func() bool { return len(got()) >= len(want) })
	g := got()
	if len(g) != len(want) {
		t.Fatalf("%d vouches heard, want %d", len(g), len(want))
	}
	for p, n := range want {
		if g[p] != n {
			t.Fatalf("vouch for %s: %d checks, want %d", p, g[p], n)
		}
	}
}
