package node

import (
	"context"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/swarm"
)

// consNet adapts the swarm host to what consensus needs of it
// (consensus.Network): consensus and swarm never import each other, and
// only swarm holds the libp2p host.
type consNet struct{ h *swarm.Host }

var _ consensus.Network = consNet{}

func (c consNet) ID() peer.ID                                         { return c.h.ID() }
func (c consNet) Key() crypto.PrivKey                                 { return c.h.Key() }
func (c consNet) Addrs() []ma.Multiaddr                               { return c.h.AddrInfo().Addrs }
func (c consNet) AddAddrs(p peer.ID, addrs []ma.Multiaddr)            { c.h.Discovery().AddAddrs(p, addrs) }
func (c consNet) Protect(p peer.ID, tag string)                       { c.h.Links().Protect(p, tag) }
func (c consNet) Unprotect(p peer.ID, tag string) bool                { return c.h.Links().Unprotect(p, tag) }
func (c consNet) Connected(p peer.ID) bool                            { return c.h.Links().Connected(p) }
func (c consNet) Connect(ctx context.Context, ai peer.AddrInfo) error { return c.h.Connect(ctx, ai) }
func (c consNet) ClearDialBackoff(p peer.ID)                          { c.h.ClearDialBackoff(p) }

func (c consNet) Handle(p protocol.ID, fn func(consensus.Stream)) error {
	if fn == nil {
		return c.h.Streams().Handle(p, nil)
	}
	return c.h.Streams().Handle(p, func(s *swarm.Stream) { fn(s) })
}

func (c consNet) Open(ctx context.Context, p peer.ID, proto protocol.ID) (consensus.Stream, error) {
	s, err := c.h.Streams().Open(ctx, p, proto)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return s, nil
}
