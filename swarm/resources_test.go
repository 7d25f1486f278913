package swarm

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

// TestRelayedConnsSkipPerIPLimits: forty relayed connections through one
// relay's IP open and stay open together, where go-libp2p's per-IP limits
// refuse direct ones from one IP well before forty.
func TestRelayedConnsSkipPerIPLimits(t *testing.T) {
	rm, err := newResourceManager(8)
	if err != nil {
		t.Fatal(err)
	}
	defer rm.Close()
	relay := "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit"
	open := func(addr string) (ok int, last error) {
		var scopes []network.ConnManagementScope
		defer func() {
			for _, s := range scopes {
				s.Done()
			}
		}()
		for range 40 {
			s, err := rm.OpenConnection(network.DirInbound, true, ma.StringCast(addr))
			if err != nil {
				last = err
				continue
			}
			scopes = append(scopes, s)
		}
		return len(scopes), last
	}
	if n, err := open(relay); n != 40 {
		t.Fatalf("%d of 40 relayed connections opened (%v)", n, err)
	}
	if n, err := open("/ip4/203.0.113.8/tcp/4001"); n == 40 || err == nil {
		t.Fatalf("all %d direct connections from one IP opened: the per-IP limits are gone", n)
	} else {
		t.Logf("direct from one IP: %d of 40 opened (%v)", n, err)
	}
}
