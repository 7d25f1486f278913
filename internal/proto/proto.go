// Package proto is the protocol vocabulary of a Strata swarm: the libp2p
// protocol IDs and the connection-manager tags, defined once so that swarm,
// consensus and node cannot drift apart. It owns names only; it must not
// grow behaviour or import anything of ours.
package proto

import "github.com/libp2p/go-libp2p/core/protocol"

// Protocol IDs: one versioned ID per purpose. Changing one is a wire
// change.
const (
	// Act carries activations and token messages on one persistent
	// stream per neighbour (node/wire's messages in swarm's frames).
	Act protocol.ID = "/strata/act/1"
	// Ctl carries control RPCs (join, StageReady, drain, map fetch): one
	// stream per call, one request frame, one response frame.
	Ctl protocol.ID = "/strata/ctl/1"
	// Raft carries hashicorp/raft's RPCs (consensus's transport).
	Raft protocol.ID = "/strata/raft/1"
	// Chunk carries model file chunks between peers (swarm/chunks): one
	// request and one response at a time on a stream, many in turn.
	Chunk protocol.ID = "/strata/chunk/1"
	// BW measures a relayed link's bandwidth: the prober sends a burst
	// of bytes, the other side counts them and answers.
	BW protocol.ID = "/strata/bw/1"
	// Steal hands a queued request from a loaded entry to an idle one
	// and carries its tokens back (node/steal.go): one request per
	// stream.
	Steal protocol.ID = "/strata/steal/1"
	// Monitor answers a read-only observer (strata monitor) with the
	// node's signed snapshot: its latest heartbeats, the layer map it
	// routes on and its links; one request and one response per stream.
	Monitor protocol.ID = "/strata/monitor/1"
	// Charter answers with the founder-signed charter of the public
	// swarm the node is a member of (swarm/charter.go): one answer per
	// stream, no request.
	Charter protocol.ID = "/strata/charter/1"
	// DHTPrefix gives the DHT protocol /strata/kad/1.0.0.
	DHTPrefix protocol.ID = "/strata"
)

// Connection-manager tags that protect peers from trimming.
const (
	TagNeighbour = "strata-neighbour" // pipeline neighbour (set by the node)
	TagVoter     = "strata-voter"     // Raft voter (set by consensus)
	TagActStream = "strata-act"       // an open activation stream (swarm)
	TagRelay     = "strata-relay"     // a relay we hold a reservation on (swarm)
)
