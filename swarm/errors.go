package swarm

import (
	"errors"

	"github.com/stratanet/strata/internal/codec"
)

// Sentinel errors. Every error that a caller may want to branch on wraps
// one of these, so errors.Is works through any amount of context.
var (
	// ErrFrameTooLarge: a frame's declared length is above the maximum.
	// Nothing of the payload was allocated or read. (The framing's own
	// sentinel, internal/codec's.)
	ErrFrameTooLarge = codec.ErrFrameTooLarge
	// ErrShortFrame: the stream ended inside a frame.
	ErrShortFrame = codec.ErrShortFrame

	// ErrHeartbeatSchema: a heartbeat does not decode under the schema
	// (wrong version, bad field, trailing bytes).
	ErrHeartbeatSchema = errors.New("swarm: heartbeat schema violation")
	// ErrHeartbeatSize: a heartbeat is larger than MaxHeartbeatSize.
	ErrHeartbeatSize = errors.New("swarm: heartbeat too large")
	// ErrHeartbeatSender: the heartbeat's node ID is not its signer.
	ErrHeartbeatSender = errors.New("swarm: heartbeat sender mismatch")
	// ErrHeartbeatClock: the heartbeat's timestamp is too far from ours.
	ErrHeartbeatClock = errors.New("swarm: heartbeat timestamp out of range")

	// ErrSwarmKey: a swarm key file is missing, unreadable or malformed.
	ErrSwarmKey = errors.New("swarm: bad swarm key")
	// ErrIdentity: the identity key in the data dir is unreadable.
	ErrIdentity = errors.New("swarm: bad identity key")
	// ErrConfig: an option has an invalid value.
	ErrConfig = errors.New("swarm: invalid configuration")

	// ErrProbe: a bandwidth probe failed or its answer is malformed.
	ErrProbe = errors.New("swarm: bandwidth probe failed")
	// ErrProbeSchema: a bandwidth probe message does not decode (wrong
	// length, a size or count out of bounds, a figure that is no rate).
	ErrProbeSchema = errors.New("swarm: bandwidth probe message malformed")

	// ErrUnreachable: no connection to the peer could be made (every
	// dial failed, or its addresses are in go-libp2p's dial backoff), so
	// nothing was sent. It may be reachable a moment later.
	ErrUnreachable = errors.New("swarm: peer unreachable")

	// ErrClosed: the host has been closed.
	ErrClosed = errors.New("swarm: host closed")
	// ErrNoHandler: the remote has no handler for the protocol.
	ErrNoHandler = errors.New("swarm: no handler")
	// ErrRemote: the remote handler returned an error; the message is in
	// the wrapping *RemoteError.
	ErrRemote = errors.New("swarm: remote error")
)

// RemoteError is a control call that the peer answered with an error.
type RemoteError struct {
	Msg string
}

func (e *RemoteError) Error() string { return "swarm: remote: " + e.Msg }

// Unwrap makes errors.Is(err, ErrRemote) hold.
func (e *RemoteError) Unwrap() error { return ErrRemote }
