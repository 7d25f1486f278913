package swarm

import "github.com/libp2p/go-libp2p/core/peer"

// A Host is split by responsibility, as go-libp2p's core splits a host
// into its network, peerstore and protocols: each part is a view of the
// one host with its own methods, reached through an accessor.
//
//   - Streams: the protocols and their streams (activations, control
//     calls, and the protocols others register with Handle).
//   - Links: connections and reachability (NAT, relays, bandwidth,
//     round trips, protection, rejections).
//   - Beats: what the host announces and hears (status, heartbeats,
//     vouches, map notices, monitor snapshots).
//   - Discovery: how peers are found (bootstrap, DHT, the public
//     rendezvous, the address book).

// Streams is the host's protocols and streams.
type Streams struct{ h *Host }

// Links is the host's connections and reachability.
type Links struct{ h *Host }

// Beats is what the host announces and hears.
type Beats struct{ h *Host }

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
