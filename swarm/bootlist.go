package swarm

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"
)

// resolveBootstrapLists resolves the published bootstrap lists
// (/dnsaddr/NAME) into peers. A list that resolves to no peer is an
// error: a joiner given only that list could join no one.
func resolveBootstrapLists(ctx context.Context, r *madns.Resolver, lists []ma.Multiaddr) ([]peer.AddrInfo, error) {
	if r == nil {
		r = madns.DefaultResolver
	}
	var out []peer.AddrInfo
	for _, l := range lists {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		addrs, err := r.Resolve(rctx, l)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bootstrap list %s: %w: %w", l, ErrConfig, err)
		}
		var full []ma.Multiaddr
		for _, a := range addrs {
			// A TXT record without a peer ID names no one we can check.
			if _, err := a.ValueForProtocol(ma.P_P2P); err == nil {
				full = append(full, a)
			}
		}
		ais, err := peer.AddrInfosFromP2pAddrs(full...)
		if err != nil {
			return nil, fmt.Errorf("bootstrap list %s: %w: %w", l, ErrConfig, err)
		}
		if len(ais) == 0 {
			return nil, fmt.Errorf("bootstrap list %s names no peer (dnsaddr TXT records with /p2p/ID): %w", l, ErrConfig)
		}
		out = append(out, ais...)
	}
	return out, nil
}

// Bootstrap are the host's bootstrap peers: those given, and those its
// bootstrap lists named.
func (dc *Discovery) Bootstrap() []peer.AddrInfo {
	s := dc.h
	return append([]peer.AddrInfo(nil), s.cfg.bootstrap...)
}
