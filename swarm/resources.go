package swarm

import (
	"fmt"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/stratanet/strata/internal/proto"
)

// PeerStreamLimit bounds one remote peer's streams of one protocol: at
// most Inbound open at once that it opened, and Memory reserved on them.
type PeerStreamLimit struct {
	Protocol protocol.ID
	Inbound  int
	Memory   int64
}

// PeerStreamLimits are the per-peer bounds beside the activation and
// control protocols' (newResourceManager), which scale with the host's
// settings; other protocols keep go-libp2p's scaled per-peer defaults
// (64 inbound streams and up). The chunk server answers more than 4 of a
// peer's streams "busy" itself, and its memory allows one of the largest
// chunks (chunks.MaxChunkSize) in flight; a bandwidth probe is one stream
// a minute.
var PeerStreamLimits = []PeerStreamLimit{
	{Protocol: proto.Chunk, Inbound: 16, Memory: 64 << 20},
	{Protocol: proto.BW, Inbound: 4, Memory: 1 << 20},
}

// newResourceManager starts from go-libp2p's scaled defaults (which bound
// every protocol, including the DHT's and gossip's) and raises the limits
// of the activation protocol, whose streams are long-lived and carry tens
// of MiB in flight per neighbour. Control streams are short and bounded
// tighter than the default, so a peer cannot pin many of them. In a swarm
// anyone may join, each of Strata's protocols has a per-peer bound of
// its own (PeerStreamLimits), so that one peer holding its streams open
// takes its own share and no one else's.
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

	for _, pl := range PeerStreamLimits {
		limits.AddProtocolPeerLimit(pl.Protocol,
			// Streams we open are ours to bound; the limit is on the peer's.
			rcmgr.BaseLimit{Streams: pl.Inbound + 64, StreamsInbound: pl.Inbound, StreamsOutbound: 64, Memory: pl.Memory},
			rcmgr.BaseLimitIncrease{})
	}

	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	return relayedConns{rm}, nil
}

// circuitEndpoint stands for a relayed connection's endpoint in the
// per-IP accounting. It is a loopback address, which go-libp2p exempts
// from its per-IP limits: an endpoint without an IP would share one rate
// bucket among all relayed connections, which is what this avoids.
// (TestRelayedConnsSkipPerIPLimits holds go-libp2p to that.)
var circuitEndpoint = ma.StringCast("/ip4/127.0.0.1/p2p-circuit")

// relayedConns keeps relayed connections out of the resource manager's
// per-IP connection limits (8 at a time, 0.2 new a second after a burst
// of 16). A relayed connection's endpoint carries the relay's IP, shared
// by every peer relayed through it, so those limits throttled all of a
// NAT'd node's relayed links together: in the public-swarm testnet a
// node behind a symmetric NAT, relayed to most peers through one relay,
// had its circuit dials refused ("rate limit exceeded") and requests
// stalled. The relay limits circuits per peer itself, and the other
// limits (streams, memory, connections in all) still apply.
type relayedConns struct{ network.ResourceManager }

func (r relayedConns) OpenConnection(dir network.Direction, usefd bool, endpoint ma.Multiaddr) (network.ConnManagementScope, error) {
	if endpoint != nil && IsRelayAddr(endpoint) {
		endpoint = circuitEndpoint
	}
	return r.ResourceManager.OpenConnection(dir, usefd, endpoint)
}

// GetConnLimit passes on the limit libp2p checks the connection
// manager's watermarks against.
func (r relayedConns) GetConnLimit() int {
	if l, ok := r.ResourceManager.(interface{ GetConnLimit() int }); ok {
		return l.GetConnLimit()
	}
	return 0
}
