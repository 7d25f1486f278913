package consensus

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/internal/proto"
)

// streamLayer is a raft.StreamLayer over libp2p streams. A Raft server's
// address is its peer ID in text form: libp2p finds the peer's multiaddrs
// in the peerstore, and the stream is authenticated and encrypted by the
// host's security transport.
type streamLayer struct {
	h      host.Host
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newStreamLayer(h host.Host) *streamLayer {
	sl := &streamLayer{h: h, conns: make(chan net.Conn), closed: make(chan struct{})}
	h.SetStreamHandler(proto.Raft, sl.handle)
	return sl
}

func (sl *streamLayer) handle(s network.Stream) {
	select {
	case sl.conns <- &streamConn{Stream: s}:
	case <-sl.closed:
		_ = s.Reset()
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
// already open are closed by raft's transport.
func (sl *streamLayer) Close() error {
	sl.once.Do(func() {
		sl.h.RemoveStreamHandler(proto.Raft)
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
	s, err := sl.h.NewStream(ctx, id, proto.Raft)
	if err != nil {
		return nil, fmt.Errorf("raft dial %s: %w", id, err)
	}
	return &streamConn{Stream: s}, nil
}

// streamConn is a libp2p stream as a net.Conn.
type streamConn struct {
	network.Stream
}

func (c *streamConn) LocalAddr() net.Addr  { return peerAddr(c.Conn().LocalPeer()) }
func (c *streamConn) RemoteAddr() net.Addr { return peerAddr(c.Conn().RemotePeer()) }

// peerAddr is a peer ID as a net.Addr.
type peerAddr peer.ID

func (a peerAddr) Network() string { return "libp2p" }
func (a peerAddr) String() string  { return peer.ID(a).String() }
