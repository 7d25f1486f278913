package api

import (
	"context"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
)

// Backend is what the server needs from a running node. *node.Node
// satisfies it; the interface exists so that the HTTP layer depends on a
// small, read-mostly surface of data rather than on the node's internals
// (its consensus replica, its host), and so that the handlers can be
// tested on a fake.
type Backend interface {
	// Generate starts a generation (see node.Node.Generate).
	Generate(ctx context.Context, req node.Request) (*node.Stream, error)
	// ID is the node's peer ID.
	ID() peer.ID
	// Model describes the served model.
	Model() node.ModelInfo
	// CountTokens is the length of req's prompt, tokenized as Generate
	// would.
	CountTokens(req node.Request) (int, error)
	// Committed is the map the node routes on.
	Committed() layers.LayerMap
	// Swarm is the node's view of the swarm now, as data: the
	// replicated state and the peer table.
	Swarm() node.SwarmSnapshot
	// Metrics are the node's counters.
	Metrics() node.Metrics
}

var _ Backend = (*node.Node)(nil)
