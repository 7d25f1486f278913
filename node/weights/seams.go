package weights

import (
	"context"
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks"
)

// Network is what the package needs of the host: the chunk protocol's
// streams (chunks.Network: ID, Handle, Open) and control calls to a
// peer (swarm.Streams.Call). The host's Streams() is one.
type Network interface {
	chunks.Network
	// Call sends a control request to p and returns its answer.
	Call(ctx context.Context, p peer.ID, req []byte) ([]byte, error)
}

// Swarm is what the package reads of the node's consensus replica. A
// node with none (a static map, or one still starting) reads as not
// leading, with no members and no manifest.
type Swarm interface {
	// IsLeader is whether this node leads the swarm now.
	IsLeader() bool
	// Members are the swarm's members, this node among them.
	Members() []peer.ID
	// Manifest is the chunk manifest the swarm committed; nil: none.
	Manifest() []byte
}

// noSwarm is a node without a replica.
type noSwarm struct{}

func (noSwarm) IsLeader() bool     { return false }
func (noSwarm) Members() []peer.ID { return nil }
func (noSwarm) Manifest() []byte   { return nil }

// Sentinel errors. Every error the package returns wraps one of them (or
// is a peer's, the network's or the file system's).
var (
	// ErrBadFrame: a request or answer of the info or manifest protocol
	// that does not decode.
	ErrBadFrame = errors.New("weights: bad frame")
	// ErrUnknownModel: a manifest request names a model this node does
	// not serve.
	ErrUnknownModel = errors.New("weights: unknown model")
	// ErrNoManifest: this node has no manifest of the model yet.
	ErrNoManifest = errors.New("weights: no manifest")
	// ErrConfig: what the caller asked cannot be: no bootstrap peers to
	// learn the model from, a manifest that is not the model's, a model
	// whose header does not read.
	ErrConfig = errors.New("weights: invalid configuration")
)

// shortID is the tail of a peer ID, as the node's logs show it.
func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}
