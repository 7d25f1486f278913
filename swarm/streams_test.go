package swarm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

func connectPair(t *testing.T, opts ...Option) (a, b *Host) {
	t.Helper()
	opts = append(opts, WithDiscovery(false))
	a = newTestHost(t, opts...)
	b = newTestHost(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestActivationStreamLimit: the resource manager's default of ~75
// streams per peer per protocol is raised for activations (one stream
// per session path may share a neighbour), while control streams stay
// bounded.
func TestActivationStreamLimit(t *testing.T) {
	a, b := connectPair(t)
	a.streams.HandleActivations(func(peer.ID, []byte) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const want = 200
	var streams []network.Stream
	defer func() {
		for _, s := range streams {
			s.Reset()
		}
	}()
	for i := range want {
		s, err := b.h.NewStream(ctx, a.ID(), ProtocolAct)
		if err != nil {
			t.Fatalf("activation stream %d: %v", i, err)
		}
		// Make the receiver accept it under the protocol's scope.
		if err := WriteFrame(s, []byte("x"), 0); err != nil {
			t.Fatalf("activation stream %d: %v", i, err)
		}
		streams = append(streams, s)
	}
	waitFor(t, 10*time.Second, "all streams open at the receiver", func() bool {
		n := 0
		for _, c := range a.h.Network().ConnsToPeer(b.ID()) {
			for _, s := range c.GetStreams() {
				if s.Protocol() == ProtocolAct {
					n++
				}
			}
		}
		return n >= want
	})
}

func TestMapNotices(t *testing.T) {
	a, b := connectPair(t, WithHeartbeatInterval(100*time.Millisecond))
	got := make(chan []byte, 16)
	a.beat.OnMapNotice(func(from peer.ID, data []byte) {
		if from == b.ID() {
			got <- data
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notice := []byte("epoch 5 committed")
	// The first message on a fresh mesh may reach nobody: repeat.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		if err := b.beat.PublishMapNotice(ctx, notice); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if !bytes.Equal(d, notice) {
				t.Fatalf("got %q", d)
			}
			done = true
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("map notice not delivered")
		}
	}
	if err := b.beat.PublishMapNotice(ctx, make([]byte, DefaultMaxMapNotice+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized notice: %v", err)
	}
}

func TestProtect(t *testing.T) {
	a, b := connectPair(t)
	a.links.Protect(b.ID(), TagNeighbour)
	a.links.Protect(b.ID(), TagVoter)
	cm := a.h.ConnManager()
	if !cm.IsProtected(b.ID(), TagNeighbour) || !cm.IsProtected(b.ID(), TagVoter) {
		t.Fatal("not protected")
	}
	if !a.links.Unprotect(b.ID(), TagNeighbour) {
		t.Fatal("still protected as voter, Unprotect should report true")
	}
	if a.links.Unprotect(b.ID(), TagVoter) {
		t.Fatal("no tag left, Unprotect should report false")
	}
	// An open activation stream protects its neighbour on its own.
	a.streams.HandleActivations(func(peer.ID, []byte) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.streams.SendActivation(ctx, a.ID(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if !b.h.ConnManager().IsProtected(a.ID(), "") {
		t.Fatal("neighbour with an open activation stream not protected")
	}
	b.streams.CloseActivation(a.ID())
	if b.h.ConnManager().IsProtected(a.ID(), "") {
		t.Fatal("still protected after the stream closed")
	}
}
