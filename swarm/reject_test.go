package swarm

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
)

// rogue is a bare libp2p host with a GossipSub router that validates
// nothing: it can publish whatever a hostile peer would.
type rogue struct {
	h     host.Host
	topic *pubsub.Topic
}

func newRogue(t *testing.T, target *Host) *rogue {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings(loopback), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ps, err := pubsub.NewGossipSub(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(HeartbeatTopic(DefaultSwarmName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topic.Subscribe(); err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, target.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	return &rogue{h: h, topic: topic}
}

// TestRejectsBadInput: forged-sender, oversize, undecodable and
// clock-skewed heartbeats and an oversized activation frame are rejected
// and counted against the peer, while the host keeps serving it and
// others.
func TestRejectsBadInput(t *testing.T) {
	fast := WithHeartbeatInterval(100 * time.Millisecond)
	a := newTestHost(t, fast, WithDiscovery(false), WithMaxFrames(1<<20, DefaultMaxCtlFrame))
	b := newTestHost(t, fast, WithDiscovery(false), bootstrapOf(a))
	frames := make(chan []byte, 8)
	a.streams.HandleActivations(func(from peer.ID, frame []byte) error {
		frames <- bytes.Clone(frame)
		return nil
	})
	r := newRogue(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	waitFor(t, 10*time.Second, "a hears b", func() bool { return livePeers(a)[b.ID()] })

	// A heartbeat that claims to be b's, signed by the rogue.
	forged := &Heartbeat{NodeID: b.ID(), Status: Status{State: StateServing, RangeEnd: 4}}
	// Too far in the future.
	skewed := &Heartbeat{NodeID: r.h.ID(), Status: Status{State: StateServing}}
	huge := make([]byte, MaxHeartbeatSize+1)
	huge[0] = HeartbeatVersion
	publish := func(data []byte) {
		if err := r.topic.Publish(ctx, data); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "rejections of every kind counted", func() bool {
		forged.Timestamp = time.Now()
		skewed.Timestamp = time.Now().Add(time.Hour)
		fd, _ := forged.MarshalBinary()
		sd, _ := skewed.MarshalBinary()
		publish(fd)
		publish(sd)
		publish(huge)
		publish([]byte{HeartbeatVersion, 0xff, 1, 2, 3})
		rj := a.links.Rejections(r.h.ID())
		return rj.Sender > 0 && rj.Clock > 0 && rj.Oversize > 0 && rj.Schema > 0
	})
	if p, ok := a.Peers().Get(r.h.ID()); ok && p.Liveness != Hint {
		t.Fatalf("rogue is %v after only bad heartbeats", p.Liveness)
	}
	if p, _ := a.Peers().Get(b.ID()); p.Heartbeat != nil && p.Heartbeat.RangeEnd == 4 {
		t.Fatal("forged heartbeat reached b's row")
	}

	// An activation frame that declares 1 GiB against a 1 MiB maximum.
	s, err := r.h.NewStream(ctx, a.ID(), ProtocolAct)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [FrameHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<30)
	if _, err := s.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "oversized frame counted", func() bool { return a.links.Rejections(r.h.ID()).Frame == 1 })
	s.Reset()
	t.Logf("rejections of the rogue at a: %+v", a.links.Rejections(r.h.ID()))

	// The host keeps serving: b's heartbeats and activations still arrive,
	// and the rogue can still open a fresh stream.
	if err := b.streams.SendActivation(ctx, a.ID(), []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := <-frames; string(got) != "ok" {
		t.Fatalf("got %q", got)
	}
	s, err = r.h.NewStream(ctx, a.ID(), ProtocolAct)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(s, []byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	if got := <-frames; string(got) != "again" {
		t.Fatalf("got %q", got)
	}
	s.Close()
	before, _ := a.Peers().Get(b.ID())
	waitFor(t, 2*time.Second, "b still heard at a", func() bool {
		p, ok := a.Peers().Get(b.ID())
		return ok && p.Liveness == Alive && p.HeardAt.After(before.HeardAt)
	})
	if a.links.Rejections(b.ID()).Total() != 0 {
		t.Fatalf("honest peer has rejections %+v", a.links.Rejections(b.ID()))
	}
}
