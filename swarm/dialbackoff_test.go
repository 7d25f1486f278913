package swarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// TestHeartbeatClearsDialBackoff: a peer whose dial failed is in
// go-libp2p's dial backoff (5 s at first), during which every dial to it
// fails at once; a send then fails with ErrUnreachable. In the
// public-swarm scenario a rejoining node's circuit dials were refused by
// the relay that had not heard it yet, and the backoff outlived the
// refusal. A heartbeat of the peer is news that it is alive: once c
// accepts one of a's, c dials a at once.
func TestHeartbeatClearsDialBackoff(t *testing.T) {
	hub := newTestHost(t, WithHeartbeatInterval(100*time.Millisecond), WithDiscovery(false))
	a := newTestHost(t, WithHeartbeatInterval(300*time.Millisecond), WithDiscovery(false), bootstrapOf(hub))
	c := newTestHost(t, WithHeartbeatInterval(100*time.Millisecond), WithDiscovery(false), bootstrapOf(hub))
	heard := func() int {
		row, ok := c.Peers().Get(a.ID())
		if !ok {
			return 0
		}
		return int(row.Heard)
	}
	waitFor(t, 15*time.Second, "a's heartbeat at c through the hub", func() bool { return heard() > 0 })
	sw := c.h.Network().(*lpswarm.Swarm)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, a.AddrInfo()); err != nil { // c learns a's addresses
		t.Fatal(err)
	}

	// Put a in c's dial backoff as a failed dial would, and see that it
	// holds; a heartbeat landing in between clears it, so try again.
	var h0 int
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("a's heartbeats kept landing between the backoff and its check")
		}
		_ = c.h.Network().ClosePeer(a.ID())
		waitFor(t, 5*time.Second, "c disconnected from a", func() bool { return len(c.h.Network().ConnsToPeer(a.ID())) == 0 })
		h0 = heard()
		for _, ad := range c.h.Peerstore().Addrs(a.ID()) {
			sw.Backoff().AddBackoff(a.ID(), ad)
		}
		err := c.streams.SendActivation(ctx, a.ID(), []byte("x"))
		if heard() != h0 {
			continue
		}
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, lpswarm.ErrDialBackoff) {
			t.Fatalf("send to a peer in dial backoff: %v, want ErrUnreachable and ErrDialBackoff", err)
		}
		break
	}
	waitFor(t, 10*time.Second, "a's next heartbeat at c", func() bool { return heard() > h0 })
	if err := c.Connect(ctx, peer.AddrInfo{ID: a.ID()}); err != nil {
		t.Fatalf("dial a right after its heartbeat: %v", err)
	}
}
