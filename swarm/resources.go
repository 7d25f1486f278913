package swarm

import (
	"fmt"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// newResourceManager starts from go-libp2p's scaled defaults (which bound
// every protocol, including the DHT's and gossip's) and raises the limits
// of the activation protocol, whose streams are long-lived and carry tens
// of MiB in flight per neighbour. Control streams are short and bounded
// tighter than the default, so a peer cannot pin many of them.
func newResourceManager(actStreams int) (network.ResourceManager, error) {
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)

	limits.AddProtocolLimit(ProtocolAct,
		rcmgr.BaseLimit{Streams: 8 * actStreams, StreamsInbound: 4 * actStreams, StreamsOutbound: 4 * actStreams, Memory: 1 << 30},
		rcmgr.BaseLimitIncrease{Streams: actStreams, StreamsInbound: actStreams, StreamsOutbound: actStreams, Memory: 256 << 20})
	limits.AddProtocolPeerLimit(ProtocolAct,
		rcmgr.BaseLimit{Streams: 2 * actStreams, StreamsInbound: actStreams, StreamsOutbound: actStreams, Memory: 256 << 20},
		rcmgr.BaseLimitIncrease{})

	limits.AddProtocolLimit(ProtocolCtl,
		rcmgr.BaseLimit{Streams: 512, StreamsInbound: 256, StreamsOutbound: 256, Memory: 64 << 20},
		rcmgr.BaseLimitIncrease{Streams: 128, StreamsInbound: 64, StreamsOutbound: 64, Memory: 16 << 20})
	limits.AddProtocolPeerLimit(ProtocolCtl,
		rcmgr.BaseLimit{Streams: 64, StreamsInbound: 32, StreamsOutbound: 32, Memory: 4 * DefaultMaxCtlFrame},
		rcmgr.BaseLimitIncrease{})

	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	return rm, nil
}
