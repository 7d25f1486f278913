package swarm

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/stratanet/strata/internal/proto"
)

// TestHeartbeatFlood: a peer that publishes valid, signed heartbeats as
// fast as it can is held to the per-origin rate (its heartbeats past it
// are ignored and counted), while an honest peer's heartbeats are all
// taken; both stay alive.
func TestHeartbeatFlood(t *testing.T) {
	const iv = 100 * time.Millisecond
	fast := WithHeartbeatInterval(iv)
	a := newTestHost(t, fast, WithDiscovery(false))
	b := newTestHost(t, fast, WithDiscovery(false), bootstrapOf(a))
	r := newRogue(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitFor(t, 10*time.Second, "a hears b", func() bool { return livePeers(a)[b.ID()] })
	// The rogue's first heartbeat reaches a once its mesh forms.
	hb := &Heartbeat{NodeID: r.h.ID(), Status: Status{State: StateServing}}
	publish := func() {
		hb.Timestamp = time.Now()
		data, err := hb.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.topic.Publish(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "a hears the rogue", func() bool {
		publish()
		return livePeers(a)[r.h.ID()]
	})
	heardB, _ := a.Peers().Get(b.ID())
	before, _ := a.Peers().Get(r.h.ID())
	start := time.Now()
	sent := 0
	waitFor(t, 10*time.Second, "the flood held back", func() bool {
		for range 50 {
			publish()
			sent++
		}
		return a.links.Rejections(r.h.ID()).Rate >= 100
	})
	p, _ := a.Peers().Get(r.h.ID())
	elapsed := time.Since(start)
	// What the rogue got through since start fits its bucket: at most a
	// full burst then, and the rate over the time since.
	got := p.Heard - before.Heard
	bound := float64(heartbeatBurst) + heartbeatRate/iv.Seconds()*elapsed.Seconds()
	rj := a.links.Rejections(r.h.ID())
	t.Logf("rogue: %d sent in %v, %d accepted (bound %.1f), %d ignored over the rate", sent, elapsed, got, bound, rj.Rate)
	if float64(got) > bound {
		t.Fatalf("rogue's heartbeats accepted: %d, bound %.1f", got, bound)
	}
	// b is untouched: none of its heartbeats ignored, and it is still heard.
	waitFor(t, 2*time.Second, "b still heard at a", func() bool {
		q, ok := a.Peers().Get(b.ID())
		return ok && q.Liveness == Alive && q.Heard > heardB.Heard
	})
	if n := a.links.Rejections(b.ID()).Total(); n != 0 {
		t.Fatalf("honest peer has %d rejections: %+v", n, a.links.Rejections(b.ID()))
	}
}

// inbound counts the streams of protocol p that from holds open at h.
func inbound(h *Host, from peer.ID, p protocol.ID) int {
	n := 0
	for _, c := range h.h.Network().ConnsToPeer(from) {
		for _, s := range c.GetStreams() {
			if s.Protocol() == p && s.Stat().Direction == network.DirInbound {
				n++
			}
		}
	}
	return n
}

// TestPeerStreamLimits: a peer that opens many streams of one protocol
// and holds them (control calls it never finishes, chunk streams it never
// asks on) gets its per-peer bound of each and no more, its memory at the
// host stays within the limits, and another peer is still served.
func TestPeerStreamLimits(t *testing.T) {
	a, flood := connectPair(t)
	calm := newTestHost(t, WithDiscovery(false))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := calm.Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	a.streams.HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	hold := make(chan struct{})
	defer close(hold)
	a.h.SetStreamHandler(proto.Chunk, func(s network.Stream) { <-hold; s.Reset() })

	const ctlBound = 32 // newResourceManager's control limit per peer
	chunkBound := PeerStreamLimits[0].Inbound
	var streams []network.Stream
	defer func() {
		for _, s := range streams {
			s.Reset()
		}
	}()
	open := func(p protocol.ID, n int) {
		for range n {
			s, err := flood.h.NewStream(ctx, a.ID(), p)
			if err != nil {
				continue // refused: what the limit is for
			}
			// Half a frame header: the control server waits for the rest.
			s.Write([]byte{0, 0})
			streams = append(streams, s)
		}
	}
	open(ProtocolCtl, 3*ctlBound)
	open(proto.Chunk, 3*chunkBound)
	waitFor(t, 10*time.Second, "the flood's streams reach a", func() bool {
		return inbound(a, flood.ID(), ProtocolCtl) >= ctlBound && inbound(a, flood.ID(), proto.Chunk) >= chunkBound
	})
	// A second round changes nothing: every stream past the bound is
	// refused, however many are tried.
	open(ProtocolCtl, ctlBound)
	open(proto.Chunk, chunkBound)
	if n := inbound(a, flood.ID(), ProtocolCtl); n > ctlBound {
		t.Fatalf("%d control streams open from one peer, bound %d", n, ctlBound)
	}
	if n := inbound(a, flood.ID(), proto.Chunk); n > chunkBound {
		t.Fatalf("%d chunk streams open from one peer, bound %d", n, chunkBound)
	}
	// A stream refused at its protocol's bound is counted in the peer's
	// scope until its protocol is negotiated and the refusal resets it,
	// which a loaded machine can leave pending for a while: the bound
	// holds once those resets are through.
	var st network.ScopeStat
	view := func() bool {
		if err := a.h.Network().ResourceManager().ViewPeer(flood.ID(), func(s network.PeerScope) error {
			st = s.Stat()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return st.NumStreamsInbound <= ctlBound+chunkBound+8
	}
	waitFor(t, 10*time.Second, "the refused streams reset", view)
	t.Logf("flooding peer at a: %d inbound streams, %d bytes reserved", st.NumStreamsInbound, st.Memory)
	if st.Memory > 4*DefaultMaxCtlFrame+PeerStreamLimits[0].Memory {
		t.Errorf("flooding peer holds %+v", st)
	}
	// The other peer's calls go through while the flood holds its streams.
	for i := range 5 {
		out, err := calm.streams.Call(ctx, a.ID(), []byte{byte(i)})
		if err != nil || len(out) != 1 || out[0] != byte(i) {
			t.Fatalf("calm peer's call %d: %v %v", i, out, err)
		}
	}
}
