package consensus

import (
	"context"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
)

// Stream is one stream of a protocol, as the swarm hands it out (a
// *swarm.Stream fits; consensus does not import swarm).
type Stream interface {
	io.ReadWriteCloser
	CloseWrite() error
	Reset() error
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
	Peer() peer.ID
}

// Network is what consensus needs of the swarm it runs on: its identity,
// its address book, connection protection, and streams (Raft's
// transport, and the built-in control protocol without WithControl). The
// node adapts its swarm host to it; consensus never holds a libp2p host.
type Network interface {
	ID() peer.ID
	// Key is the identity key (it signs steward sets).
	Key() crypto.PrivKey
	// Addrs are the addresses others can dial, without /p2p.
	Addrs() []ma.Multiaddr
	// AddAddrs remembers p's addresses for good.
	AddAddrs(p peer.ID, addrs []ma.Multiaddr)
	Protect(p peer.ID, tag string)
	Unprotect(p peer.ID, tag string) bool
	Connect(ctx context.Context, ai peer.AddrInfo) error
	Connected(p peer.ID) bool
	// Handle sets protocol p's handler (nil removes it).
	Handle(p protocol.ID, fn func(Stream)) error
	Open(ctx context.Context, p peer.ID, proto protocol.ID) (Stream, error)
}

// BackoffClearer is a Network that can forget go-libp2p's dial backoff
// for a peer. Raft's dials and the built-in liveness probes then dial a
// peer in backoff all the same (Raft backs off from a failing peer
// itself). A dial forced past the backoff instead (WithForceDirectDial)
// crashed the process when it met the host's Close: go-libp2p v0.51's
// swarm filters a forced dial's addresses by a transport lookup that
// returns nil once its transports are gone.
type BackoffClearer interface {
	ClearDialBackoff(p peer.ID)
}

// Notifier is a Network that reports connections as they open and close;
// without it, the built-in liveness (no WithLiveness) dates a peer's loss
// from when it first finds the peer gone.
type Notifier interface {
	Notify(fn func(p peer.ID, connected bool))
}
