package consensus

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error a caller may branch on wraps one of these,
// so errors.Is works through any amount of context, and across the
// control protocol: a remote refusal comes back as a *RemoteError that
// unwraps to the same sentinel.
var (
	// ErrFingerprint: a join whose model fingerprint differs from the
	// swarm's. The swarm serves one model; the node must not join it.
	ErrFingerprint = errors.New("consensus: model fingerprint differs from the swarm's")
	// ErrBadEvent: a log record or control message that does not decode
	// under its schema (version, kind, bounds, trailing bytes).
	ErrBadEvent = errors.New("consensus: malformed event")
	// ErrBadSnapshot: a snapshot that does not decode.
	ErrBadSnapshot = errors.New("consensus: malformed snapshot")
	// ErrRejected: a well-formed event that the state does not admit (a
	// commit of an epoch that is not pending, a proposal naming a
	// non-member, ...). The state is unchanged.
	ErrRejected = errors.New("consensus: event rejected by the state")
	// ErrStale: an event about an epoch or plan that is no longer
	// pending, such as a late StageReady.
	ErrStale = errors.New("consensus: stale event")
	// ErrUnknownMember: the event names a node that is not a member.
	ErrUnknownMember = errors.New("consensus: not a member")
	// ErrNotLeader: the call needs the leader and this member is not it.
	ErrNotLeader = errors.New("consensus: not the leader")
	// ErrNoLeader: no leader is known (an election is running, or this
	// member has not joined yet).
	ErrNoLeader = errors.New("consensus: no leader")
	// ErrForbidden: a control request about another node than its sender.
	ErrForbidden = errors.New("consensus: request not allowed from this peer")
	// ErrConfig: an option has an invalid value.
	ErrConfig = errors.New("consensus: invalid configuration")
	// ErrClosed: the consensus member has been closed.
	ErrClosed = errors.New("consensus: closed")
	// ErrRemote: the remote end failed the call for a reason that has no
	// sentinel of its own; the message is in the *RemoteError.
	ErrRemote = errors.New("consensus: remote error")
)

// errCodes numbers the sentinels that cross the control protocol. The
// numbers are part of /strata/ctl/1 and must not change.
var errCodes = []error{
	nil, ErrRemote, ErrFingerprint, ErrBadEvent, ErrRejected, ErrStale,
	ErrUnknownMember, ErrNotLeader, ErrNoLeader, ErrForbidden, ErrClosed,
	ErrBanned, ErrBadEvidence, ErrBadStewards,
}

func errCode(err error) uint8 {
	for i, s := range errCodes {
		if i > 0 && errors.Is(err, s) {
			return uint8(i)
		}
	}
	return 1
}

// RemoteError is a control call that the peer answered with an error.
type RemoteError struct {
	Code uint8
	Msg  string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("consensus: remote: %s", e.Msg) }

// Unwrap returns the sentinel the remote's error wrapped.
func (e *RemoteError) Unwrap() error {
	if int(e.Code) < len(errCodes) && e.Code > 0 {
		return errCodes[e.Code]
	}
	return ErrRemote
}
