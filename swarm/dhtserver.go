package swarm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"
)

// DHTServer runs only a server of the Amino DHT protocol (/ipfs/kad/1.0.0,
// go-libp2p-kad-dht's defaults) on a plain libp2p host: a stand-in for the
// public network's bootstrap nodes in tests and netns scenarios, where the
// real ones are out of reach, and a bootstrap node a community may run for
// its public swarms. It knows nothing of Strata.
type DHTServer struct {
	h    host.Host
	d    *dht.IpfsDHT
	once sync.Once
	err  error
}

// NewDHTServer starts a DHT server. It reads the options WithListenAddrs
// (default DefaultListenAddrs), WithDataDir (its identity),
// WithBootstrap/WithBootstrapPeers (other servers to join) and
// WithLogger; the others are no concern of a DHT server and are ignored.
// ctx bounds the first dials to the bootstrap peers, whose failure is not
// fatal (the DHT keeps trying them).
func NewDHTServer(ctx context.Context, opts ...Option) (*DHTServer, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.psk != nil {
		return nil, fmt.Errorf("a DHT server for the public network takes no swarm key: %w", ErrConfig)
	}
	if len(cfg.bootstrapDNS) > 0 {
		ais, err := resolveBootstrapLists(ctx, cfg.resolver, cfg.bootstrapDNS)
		if err != nil {
			return nil, err
		}
		cfg.bootstrap = append(cfg.bootstrap, ais...)
	}
	sk, err := identity(cfg.dataDir)
	if err != nil {
		return nil, err
	}
	listen := cfg.listen
	if len(listen) == 0 {
		listen = DefaultListenAddrs
	}
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings(listen...), libp2p.UserAgent("strata-dht-server"))
	if err != nil {
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	// Server mode whatever AutoNAT says: in a testnet every address is
	// private, and a stand-in that waited to be called public would never
	// answer.
	d, err := dht.New(h, dht.Mode(dht.ModeServer), dht.BootstrapPeers(cfg.bootstrap...))
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("dht: %w", err)
	}
	s := &DHTServer{h: h, d: d}
	var wg sync.WaitGroup
	for _, ai := range cfg.bootstrap {
		if ai.ID == h.ID() {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := h.Connect(cctx, ai); err != nil {
				cfg.log.Warn("DHT bootstrap peer unreachable", zap.Stringer("peer", ai.ID), zap.Error(err))
			}
		})
	}
	wg.Wait()
	cfg.log.Info("DHT server started", zap.Stringer("id", h.ID()), zap.Strings("addrs", addrStrings(s.Addrs())))
	return s, nil
}

// ID is the server's peer ID.
func (s *DHTServer) ID() peer.ID { return s.h.ID() }

// Addrs are the server's full multiaddrs, with /p2p/ID: what clients
// take as their public DHT bootstrap peers.
func (s *DHTServer) Addrs() []ma.Multiaddr {
	ai := peer.AddrInfo{ID: s.h.ID(), Addrs: s.h.Addrs()}
	full, err := peer.AddrInfoToP2pAddrs(&ai)
	if err != nil { // only for an empty ID
		return nil
	}
	return full
}

// AddrInfo is the server's peer ID and addresses.
func (s *DHTServer) AddrInfo() peer.AddrInfo { return peer.AddrInfo{ID: s.h.ID(), Addrs: s.h.Addrs()} }

// RoutingTableSize is how many DHT servers this one knows.
func (s *DHTServer) RoutingTableSize() int { return s.d.RoutingTable().Size() }

// Close stops the DHT and the host.
func (s *DHTServer) Close() error {
	s.once.Do(func() { s.err = errors.Join(s.d.Close(), s.h.Close()) })
	return s.err
}
