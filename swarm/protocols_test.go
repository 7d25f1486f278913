package swarm

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

const testProto = protocol.ID("/strata/test-echo/1")

// A protocol registered with Handle answers frames opened with Open, on
// real hosts over loopback; removing the handler makes Open fail.
func TestHandleOpenFrames(t *testing.T) {
	a, b := connectPair(t)
	got := make(chan []byte, 1)
	if err := a.Streams().Handle(testProto, func(s *Stream) {
		defer s.Close()
		if s.Peer() != b.ID() || s.Protocol() != testProto {
			t.Errorf("stream from %s on %s", s.Peer(), s.Protocol())
		}
		for {
			p, err := s.ReadFrame(16)
			if err != nil {
				if err != io.EOF {
					t.Errorf("read: %v", err)
				}
				return
			}
			got <- p
			if err := s.WriteFrame(append([]byte("re:"), p...), 16); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.Streams().Open(ctx, a.ID(), testProto)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	if err := s.WriteFrame([]byte("ping"), 16); err != nil {
		t.Fatal(err)
	}
	if p := <-got; string(p) != "ping" {
		t.Fatalf("server read %q", p)
	}
	if p, err := s.ReadFrame(16); err != nil || string(p) != "re:ping" {
		t.Fatalf("client read %q, %v", p, err)
	}
	// Frames out of bounds fail with the framing's sentinel.
	if err := s.WriteFrame(make([]byte, 17), 16); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	_ = s.CloseWrite()
	if _, err := s.ReadFrame(16); err != io.EOF {
		t.Fatalf("after the server closed: %v", err)
	}

	if err := a.Streams().Handle(testProto, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := b.Streams().Open(ctx, a.ID(), testProto); err == nil {
		// Negotiation is lazy: the refusal shows on first use.
		_ = s.WriteFrame([]byte("x"), 16)
		if _, err := s.ReadFrame(16); err == nil {
			t.Fatal("a removed protocol still answers")
		}
	}
}

// swarm's own protocols cannot be taken over, and a panicking handler
// resets its stream without taking the host down.
func TestHandleReservedAndPanic(t *testing.T) {
	a, b := connectPair(t)
	for _, p := range []protocol.ID{ProtocolAct, ProtocolCtl, ProtocolBW, ProtocolMonitor, ""} {
		if err := a.Streams().Handle(p, func(s *Stream) { s.Reset() }); !errors.Is(err, ErrConfig) {
			t.Errorf("Handle(%q): %v", p, err)
		}
	}
	if err := a.Streams().Handle(testProto, func(s *Stream) { panic("handler bug") }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The reset shows in Open (negotiation may finish after the handler
	// ran) or on the first read.
	if s, err := b.Streams().Open(ctx, a.ID(), testProto); err == nil {
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		_ = s.WriteFrame([]byte("boom"), 16)
		if _, err := s.ReadFrame(16); err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("a panicking handler's stream: %v, want a reset", err)
		}
	}
	// The host still serves control calls.
	a.Streams().HandleControl(func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) { return req, nil })
	if resp, err := b.Streams().Call(ctx, a.ID(), []byte("alive")); err != nil || string(resp) != "alive" {
		t.Fatalf("after the panic: %q, %v", resp, err)
	}
}
