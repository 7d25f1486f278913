package swarm

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"go.uber.org/zap"
)

// Protocols that live outside swarm (steal, chunks) register here, in the
// manner of go-libp2p's host.SetStreamHandler and host.NewStream: swarm
// owns the libp2p host, the protocol table and the framing, and a caller
// gets a *Stream that speaks swarm's frames. Nothing outside swarm holds
// the libp2p host.

// StreamHandler serves one incoming stream of a protocol set with Handle.
// It owns the stream: it must Close or Reset it.
type StreamHandler func(s *Stream)

// ErrReserved: Handle was asked for a protocol that swarm serves itself.
var ErrReserved = fmt.Errorf("%w: protocol served by swarm", ErrConfig)

// reserved are the protocols swarm's own handlers answer.
var reserved = map[protocol.ID]bool{ProtocolAct: true, ProtocolCtl: true, ProtocolBW: true, ProtocolMonitor: true}

// Handle sets the handler of protocol p (nil: remove it, so that opening
// p here fails). A handler that panics resets its stream: no peer input
// may take the node down.
func (st *Streams) Handle(p protocol.ID, fn StreamHandler) error {
	h := st.h
	if reserved[p] {
		return fmt.Errorf("handle %s: %w", p, ErrReserved)
	}
	if p == "" {
		return fmt.Errorf("handle: empty protocol: %w", ErrConfig)
	}
	if fn == nil {
		h.h.RemoveStreamHandler(p)
		return nil
	}
	h.h.SetStreamHandler(p, func(ns network.Stream) {
		s := &Stream{s: ns}
		defer func() {
			if r := recover(); r != nil {
				ns.Reset()
				h.log.Error("stream handler panic", zap.String("protocol", string(p)),
					zap.Stringer("peer", s.Peer()), zap.Any("panic", r))
			}
		}()
		fn(s)
	})
	return nil
}

// Open opens a stream of protocol proto to peer p, over a relayed
// connection too. The context bounds the opening only.
func (st *Streams) Open(ctx context.Context, p peer.ID, proto protocol.ID) (*Stream, error) {
	h := st.h
	ns, err := h.h.NewStream(network.WithAllowLimitedConn(ctx, string(proto)), p, proto)
	if err != nil {
		return nil, fmt.Errorf("open %s to %s: %w", proto, p, err)
	}
	return &Stream{s: ns}, nil
}

// Stream is one stream of a protocol: frames (WriteFrame, ReadFrame) or,
// for a protocol that interleaves raw bytes with frames (the chunk
// protocol's status byte), plain reads and writes.
type Stream struct {
	s network.Stream
}

// Peer is the remote peer.
func (s *Stream) Peer() peer.ID { return s.s.Conn().RemotePeer() }

// Protocol is the stream's protocol.
func (s *Stream) Protocol() protocol.ID { return s.s.Protocol() }

// WriteFrame writes p as one frame; it fails without writing when p is
// larger than max.
func (s *Stream) WriteFrame(p []byte, max int) error { return WriteFrame(s.s, p, max) }

// ReadFrame reads one frame of at most max bytes into a new slice; io.EOF
// is a clean end between frames.
func (s *Stream) ReadFrame(max int) ([]byte, error) { return ReadFrame(s.s, max) }

// Read reads raw bytes.
func (s *Stream) Read(p []byte) (int, error) { return s.s.Read(p) }

// Write writes raw bytes.
func (s *Stream) Write(p []byte) (int, error) { return s.s.Write(p) }

// SetDeadline bounds reads and writes (zero: no bound).
func (s *Stream) SetDeadline(t time.Time) error { return s.s.SetDeadline(t) }

// SetReadDeadline bounds reads.
func (s *Stream) SetReadDeadline(t time.Time) error { return s.s.SetReadDeadline(t) }

// SetWriteDeadline bounds writes.
func (s *Stream) SetWriteDeadline(t time.Time) error { return s.s.SetWriteDeadline(t) }

// Close closes both directions gracefully.
func (s *Stream) Close() error { return s.s.Close() }

// CloseWrite ends our side: the peer reads io.EOF.
func (s *Stream) CloseWrite() error { return s.s.CloseWrite() }

// Reset aborts the stream in both directions.
func (s *Stream) Reset() error { return s.s.Reset() }

// Reserve reserves n bytes of memory in the stream's resource scope, so
// that a flood of requests is refused instead of buffered; Release gives
// them back.
func (s *Stream) Reserve(n int) error {
	return s.s.Scope().ReserveMemory(n, network.ReservationPriorityMedium)
}

// Release gives back n bytes that Reserve took.
func (s *Stream) Release(n int) { s.s.Scope().ReleaseMemory(n) }

// SetService accounts the stream to a resource manager service (its
// stream limits apply).
func (s *Stream) SetService(name string) error { return s.s.Scope().SetService(name) }
