package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/stratanet/strata/internal/proto"
)

// streamLayer is a raft.StreamLayer over libp2p streams. A Raft server's
// address is its peer ID in text form: libp2p finds the peer's multiaddrs
// in the peerstore, and the stream is authenticated and encrypted by the
// host's security transport.
//
// It also tracks the streams it accepted: raft's transport serves each in
// a goroutine of its own that its Close does not wait for, and that logs
// once its stream fails. drain ends them and waits, so that nothing of a
// closed member still runs (or logs).
type streamLayer struct {
	h      Network
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	accepted map[*streamConn]struct{} // open, not yet closed by raft
	draining bool
	idle     chan struct{} // closed when draining and none is open
}

func newStreamLayer(h Network) *streamLayer {
	sl := &streamLayer{h: h, conns: make(chan net.Conn), closed: make(chan struct{}),
		accepted: map[*streamConn]struct{}{}, idle: make(chan struct{})}
	_ = h.Handle(proto.Raft, sl.handle) // a protocol of ours: never refused
	return sl
}

func (sl *streamLayer) handle(s Stream) {
	c := &streamConn{Stream: s, sl: sl, local: sl.h.ID()}
	sl.mu.Lock()
	if sl.draining {
		sl.mu.Unlock()
		_ = s.Reset()
		return
	}
	sl.accepted[c] = struct{}{}
	sl.mu.Unlock()
	select {
	case sl.conns <- c:
	case <-sl.closed:
		_ = c.Stream.Reset()
		sl.forget(c)
	}
}

// forget drops an accepted stream that is closed.
func (sl *streamLayer) forget(c *streamConn) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if _, ok := sl.accepted[c]; !ok {
		return
	}
	delete(sl.accepted, c)
	if sl.draining && len(sl.accepted) == 0 {
		close(sl.idle)
	}
}

// drain resets the accepted streams still open and waits, at most
// timeout, until raft's handlers have closed them. Call it after the
// transport's Close.
func (sl *streamLayer) drain(timeout time.Duration) {
	sl.mu.Lock()
	if !sl.draining {
		sl.draining = true
		if len(sl.accepted) == 0 {
			close(sl.idle)
		}
		for c := range sl.accepted {
			_ = c.Stream.Reset()
		}
	}
	sl.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-sl.idle:
	case <-t.C:
	}
}

// Accept implements net.Listener.
func (sl *streamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-sl.conns:
		return c, nil
	case <-sl.closed:
		return nil, fmt.Errorf("raft stream layer: %w", ErrClosed)
	}
}

// Close implements net.Listener: it stops accepting streams. Streams
// already open are closed by raft's transport (and drain).
func (sl *streamLayer) Close() error {
	sl.once.Do(func() {
		_ = sl.h.Handle(proto.Raft, nil)
		close(sl.closed)
	})
	return nil
}

// Addr implements net.Listener.
func (sl *streamLayer) Addr() net.Addr { return peerAddr(sl.h.ID()) }

// Dial implements raft.StreamLayer.
func (sl *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id, err := peer.Decode(string(address))
	if err != nil {
		return nil, fmt.Errorf("raft dial %q: %w", address, err)
	}
	select {
	case <-sl.closed:
		return nil, fmt.Errorf("raft dial %s: %w", id, ErrClosed)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := sl.h.Open(ctx, id, proto.Raft)
	if bc, ok := sl.h.(BackoffClearer); ok && errors.Is(err, lpswarm.ErrDialBackoff) {
		// Raft backs off from a failing peer itself; go-libp2p's backoff
		// also follows a dial that failed only because the two members
		// dialled each other at once (over TCP with port reuse the two
		// dials meet in one connection, and both handshakes fail:
		// go-libp2p#2925). It kept two live voters apart for 5 s, and
		// with a third voter dead the swarm had no leader.
		bc.ClearDialBackoff(id)
		s, err = sl.h.Open(ctx, id, proto.Raft)
	}
	if err != nil {
		return nil, fmt.Errorf("raft dial %s: %w", id, err)
	}
	return &streamConn{Stream: s, local: sl.h.ID()}, nil
}

// streamConn is a libp2p stream as a net.Conn. An accepted one (sl set)
// tells its layer when raft closes it, and reads as ended once the layer
// drains, so that raft's handler returns without logging a failure.
type streamConn struct {
	Stream
	sl    *streamLayer
	local peer.ID
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.Stream.Read(b)
	if err != nil && c.sl != nil && c.sl.isDraining() {
		err = io.EOF
	}
	return n, err
}

func (c *streamConn) Close() error {
	err := c.Stream.Close()
	if c.sl != nil {
		c.sl.forget(c)
	}
	return err
}

func (sl *streamLayer) isDraining() bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.draining
}

func (c *streamConn) LocalAddr() net.Addr  { return peerAddr(c.local) }
func (c *streamConn) RemoteAddr() net.Addr { return peerAddr(c.Peer()) }

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (a peerAddr) Network() string { return "libp2p" }
func (a peerAddr) String() string  { return peer.ID(a).String() }
