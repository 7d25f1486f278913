package consensus

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
	a, b := hostsInBackoff(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

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

// hostsInBackoff returns two hosts, b in a's dial backoff as ten failed
// dials would leave it (about 105 s), and checks that a plain dial is
// refused.
func hostsInBackoff(t *testing.T) (a, b *testNode) {
	t.Helper()
	cl := newCluster(t)
	a, b = cl.addHost(false), cl.addHost(false)
	a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
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
	return a, b
}

// TestRaftDialIgnoresDialBackoff: Raft dials a peer in go-libp2p's dial
// backoff all the same. Two members that dial each other at once over TCP
// both fail (go-libp2p#2925) and each holds the other in backoff; the two
// live voters that were left of three once a third died could not elect
// a leader for the 5 s of that backoff (TestDeadVoterLeavesThroughShortTerms,
// 9 of 40 runs before).
func TestRaftDialIgnoresDialBackoff(t *testing.T) {
	a, b := hostsInBackoff(t)
	bl := newStreamLayer(hostNet{b.h})
	defer bl.Close()
	go func() { // b's side: accept one stream and answer
		c, err := bl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte{1})
	}()
	al := newStreamLayer(hostNet{a.h})
	defer al.Close()
	c, err := al.Dial(raft.ServerAddress(b.h.ID().String()), 10*time.Second)
	if err != nil {
		t.Fatalf("raft dial to a peer in backoff: %v", err)
	}
	defer c.Close()
	var buf [1]byte
	if _, err := io.ReadFull(c, buf[:]); err != nil {
		t.Fatalf("read over the raft stream: %v", err)
	}
}
