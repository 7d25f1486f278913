package swarm

import (
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A Host is split by responsibility, as go-libp2p's core splits a host
// into its network, peerstore and protocols: each part has its own
// methods, reached through an accessor, and owns its own state (Streams,
// Beats) beside the libp2p host that all of them share and none hands
// out.
//
//   - Streams: the protocols and their streams (activations, control
//     calls, and the protocols others register with Handle).
//   - Links: connections and reachability (NAT, relays, bandwidth,
//     round trips, protection, rejections).
//   - Beats: what the host announces and hears (status, heartbeats,
//     vouches, map notices, monitor snapshots).
//   - Discovery: how peers are found (bootstrap, DHT, the public
//     rendezvous, the address book).

// Streams is the host's protocols and streams. It owns the activation
// streams and the handlers of the activation and control protocols.
type Streams struct {
	h          *Host
	acts       *actPool
	actHandler atomic.Pointer[ActHandler]
	ctlHandler atomic.Pointer[CtlHandler]
}

// Links is the host's connections and reachability.
type Links struct{ h *Host }

// Beats is what the host announces and hears. It owns the status and
// vouches the heartbeats carry, and what the monitor protocol answers.
type Beats struct {
	h *Host

	statusMu sync.Mutex
	status   Status
	vouches  []Vouch // SetVouches; under statusMu
	vouchAt  int     // the next heartbeat's first vouch

	// The monitor protocol (monitor.go): what the node adds to its
	// snapshots, its own latest heartbeats, and the requests in service.
	snapSource atomic.Pointer[func() SnapshotInfo]
	beatsMu    sync.Mutex
	beats      []*Heartbeat
	monitorSem chan struct{}
}

// Discovery is how the host finds peers.
type Discovery struct{ h *Host }

// Streams is the host's protocols and streams.
func (s *Host) Streams() *Streams { return s.streams }

// Links is the host's connections and reachability.
func (s *Host) Links() *Links { return s.links }

// Beats is what the host announces and hears.
func (s *Host) Beats() *Beats { return s.beat }

// Discovery is how the host finds peers.
func (s *Host) Discovery() *Discovery { return s.disco }

// ID is the host's peer ID (the local end of every stream).
func (st *Streams) ID() peer.ID { return st.h.ID() }
