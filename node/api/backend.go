package api

import (
	"context"
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
)

// Backend is what the server needs from a running node: NodeBackend
// makes one of a *node.Node. The interface exists so that the HTTP layer
// depends on a small, read-mostly surface of data rather than on the
// node's internals (its consensus replica, its host), and so that the
// handlers, streaming included, can be tested on a fake.
type Backend interface {
	// Generate starts a generation (see node.Node.Generate). follow, when
	// not nil, is a stream of the same request that Generate returned
	// before, whose path the generation takes (node.Request.Follow).
	Generate(ctx context.Context, req node.Request, follow Stream) (Stream, error)
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

	// SetSwarmVerifyRate, SetSwarmSessionTokens and SetSwarmStewards
	// change the swarm's replicated configuration (on the leader; see
	// node.Node.SetSwarmConfig). A backend that cannot answers
	// ErrUnsupported.
	SetSwarmVerifyRate(ctx context.Context, r float64) error
	SetSwarmSessionTokens(ctx context.Context, n int) error
	SetSwarmStewards(ctx context.Context, ids []string) error
}

// Stream is a running generation (see node.Stream).
type Stream interface {
	// PromptTokens is the length of the tokenized prompt.
	PromptTokens() int
	// Recv returns the next delta; after the last, io.EOF or the error
	// that ended the generation.
	Recv() (node.Delta, error)
	// Result waits for the end and returns the outcome.
	Result() (node.Result, error)
	// Close abandons the generation.
	Close()
}

// ErrUnsupported is a backend's answer to what it cannot do (501).
var ErrUnsupported = errors.New("api: not supported by this node")

// NodeBackend is node n as a Backend.
func NodeBackend(n *node.Node) Backend { return nodeBackend{n} }

// nodeBackend forwards each call to the node; only Generate adapts, as
// the node takes and returns its own stream type.
type nodeBackend struct{ n *node.Node }

func (b nodeBackend) Generate(ctx context.Context, req node.Request, follow Stream) (Stream, error) {
	if f, ok := follow.(*node.Stream); ok {
		req.Follow = f
	}
	st, err := b.n.Generate(ctx, req)
	if err != nil {
		return nil, err // not a nil *node.Stream in a non-nil Stream
	}
	return st, nil
}

func (b nodeBackend) ID() peer.ID                               { return b.n.ID() }
func (b nodeBackend) Model() node.ModelInfo                     { return b.n.Model() }
func (b nodeBackend) CountTokens(req node.Request) (int, error) { return b.n.CountTokens(req) }
func (b nodeBackend) Committed() layers.LayerMap                { return b.n.Committed() }
func (b nodeBackend) Swarm() node.SwarmSnapshot                 { return b.n.Swarm() }
func (b nodeBackend) Metrics() node.Metrics                     { return b.n.Metrics() }

func (b nodeBackend) SetSwarmVerifyRate(ctx context.Context, r float64) error {
	return b.n.SetSwarmConfig(ctx, node.SwarmChange{VerifyRate: &r})
}

func (b nodeBackend) SetSwarmSessionTokens(ctx context.Context, n int) error {
	return b.n.SetSwarmConfig(ctx, node.SwarmChange{SessionTokens: &n})
}

// SetSwarmStewards sends a nil ids on to consensus (which refuses an
// empty set) as before: SwarmChange reads nil as no change.
func (b nodeBackend) SetSwarmStewards(ctx context.Context, ids []string) error {
	if ids == nil {
		ids = []string{}
	}
	return b.n.SetSwarmConfig(ctx, node.SwarmChange{Stewards: ids})
}
