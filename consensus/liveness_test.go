package consensus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// TestLivenessProbeIgnoresDialBackoff: a peer in go-libp2p's dial backoff
// (a failed dial holds every later dial to it, 5 s at first and longer
// after each failure) is probed all the same, so the built-in liveness
// finds it alive once it answers, not once the backoff ends.
func TestLivenessProbeIgnoresDialBackoff(t *testing.T) {
	cl := newCluster(t)
	a, b := cl.addHost(false), cl.addHost(false)
	a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
	// As ten failed dials would leave it: about 105 s of backoff.
	sw := a.h.Network().(*lpswarm.Swarm)
	for range 10 {
		for _, addr := range b.h.Addrs() {
			sw.Backoff().AddBackoff(b.h.ID(), addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.h.Connect(ctx, peer.AddrInfo{ID: b.h.ID()}); !errors.Is(err, lpswarm.ErrDialBackoff) {
		t.Fatalf("a plain dial in backoff: %v, want %v", err, lpswarm.ErrDialBackoff)
	}

	sub, err := a.h.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	l := newConnLiveness(hostNet{a.h})
	if _, dead := l.DeadSince(b.h.ID()); dead {
		t.Fatal("dead before any probe failed")
	}
	for { // the probe runs off the call; its connection is the news
		select {
		case <-ctx.Done():
			since, dead := l.DeadSince(b.h.ID())
			t.Fatalf("the probe did not reach the peer in 10 s (dead %v since %v)", dead, since)
		case e := <-sub.Out():
			if ev := e.(event.EvtPeerConnectednessChanged); ev.Peer != b.h.ID() || ev.Connectedness != network.Connected {
				continue
			}
			if since, dead := l.DeadSince(b.h.ID()); dead {
				t.Fatalf("connected, yet dead since %v", since)
			}
			return
		}
	}
}
