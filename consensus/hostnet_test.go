package consensus

import (
	"context"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
)

// hostNet runs consensus's tests on a bare libp2p host (consensus does
// not import swarm, whose host the node adapts instead).
type hostNet struct{ h host.Host }

func (n hostNet) ID() peer.ID         { return n.h.ID() }
func (n hostNet) Key() crypto.PrivKey { return n.h.Peerstore().PrivKey(n.h.ID()) }
func (n hostNet) Addrs() []ma.Multiaddr {
	return n.h.Addrs()
}
func (n hostNet) AddAddrs(p peer.ID, addrs []ma.Multiaddr) {
	n.h.Peerstore().AddAddrs(p, addrs, peerstore.PermanentAddrTTL)
}
func (n hostNet) Protect(p peer.ID, tag string)        { n.h.ConnManager().Protect(p, tag) }
func (n hostNet) Unprotect(p peer.ID, tag string) bool { return n.h.ConnManager().Unprotect(p, tag) }
func (n hostNet) Connect(ctx context.Context, ai peer.AddrInfo) error {
	return n.h.Connect(ctx, ai)
}
func (n hostNet) ClearDialBackoff(p peer.ID) {
	if sw, ok := n.h.Network().(*lpswarm.Swarm); ok {
		sw.Backoff().Clear(p)
	}
}

func (n hostNet) Connected(p peer.ID) bool {
	return n.h.Network().Connectedness(p) == network.Connected
}

func (n hostNet) Handle(p protocol.ID, fn func(Stream)) error {
	if fn == nil {
		n.h.RemoveStreamHandler(p)
		return nil
	}
	n.h.SetStreamHandler(p, func(s network.Stream) { fn(rawStream{s}) })
	return nil
}

func (n hostNet) Open(ctx context.Context, p peer.ID, proto protocol.ID) (Stream, error) {
	s, err := n.h.NewStream(ctx, p, proto)
	if err != nil {
		return nil, err
	}
	return rawStream{s}, nil
}

func (n hostNet) Notify(fn func(p peer.ID, connected bool)) {
	n.h.Network().Notify(&network.NotifyBundle{
		ConnectedF:    func(_ network.Network, c network.Conn) { fn(c.RemotePeer(), true) },
		DisconnectedF: func(_ network.Network, c network.Conn) { fn(c.RemotePeer(), false) },
	})
}

type rawStream struct{ network.Stream }

func (s rawStream) Peer() peer.ID { return s.Conn().RemotePeer() }
