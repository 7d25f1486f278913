package node

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

// The activation protocol's small messages (the format is in wire.go):
// a hop's failure with its code, a close, the audits and the receipt
// that answers them; and the model hash an open step carries.

// ErrorCode says why a hop failed a step.
type ErrorCode uint8

// The error codes.
const (
	// CodeBadFrame: the frame is malformed or does not fit the model.
	CodeBadFrame ErrorCode = 1
	// CodeUnknownSession: the hop holds no such session (expired, closed,
	// never opened).
	CodeUnknownSession ErrorCode = 2
	// CodeBusy: the hop's admission queue is full.
	CodeBusy ErrorCode = 3
	// CodeNoKV: the session can never fit the hop's KV memory.
	CodeNoKV ErrorCode = 4
	// CodeNotServing: the hop does not hold the layers asked for.
	CodeNotServing ErrorCode = 5
	// CodeUnreachable: the hop could not forward to the next one (Peer).
	CodeUnreachable ErrorCode = 6
	// CodeWrongModel: the step was routed for another model.
	CodeWrongModel ErrorCode = 7
	// CodeInternal: the engine failed the step.
	CodeInternal ErrorCode = 8
	// CodeDuplicate: an open step for a session the hop already holds.
	CodeDuplicate ErrorCode = 9
	// CodePrefixMiss: the previous hop resumed a prefix from its cache
	// that this hop no longer holds; the entry retries cold.
	CodePrefixMiss ErrorCode = 10
	// CodeGrammar: the session's grammar cannot go on (too ambiguous, or
	// no token of the vocabulary continues it): the request's fault,
	// which the entry checks with its own matcher before it believes it.
	CodeGrammar ErrorCode = 11
	maxCode               = CodeGrammar
)

func (c ErrorCode) String() string {
	switch c {
	case CodeBadFrame:
		return "bad frame"
	case CodeUnknownSession:
		return "unknown session"
	case CodeBusy:
		return "busy"
	case CodeNoKV:
		return "no KV memory"
	case CodeNotServing:
		return "layers not served"
	case CodeUnreachable:
		return "next hop unreachable"
	case CodeWrongModel:
		return "wrong model"
	case CodeInternal:
		return "internal"
	case CodeDuplicate:
		return "duplicate session"
	case CodePrefixMiss:
		return "prefix cache miss"
	case CodeGrammar:
		return "grammar"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// ErrorMsg is a hop's report that it failed a step, sent to the entry
// (or, when the frame named none, to the sender).
type ErrorMsg struct {
	Session SessionID
	Code    ErrorCode
	Peer    peer.ID // the peer at fault, if not the sender
	Text    string
}

// Close frees a session on a hop at once.
type Close struct {
	Session SessionID
}

// Audit asks the hop of a session that starts at layer From for its
// signed receipt; only the session's entry may ask.
type Audit struct {
	Session SessionID
	From    int
}

// UpAudit asks the hop of a session that starts at layer From for the
// receipt its upstream signed over the last frame it sent (FrameSig),
// answered as a ReceiptMsg signed by the upstream; only the session's
// entry may ask.
type UpAudit struct {
	Session SessionID
	From    int
}

// ReceiptMsg carries a hop's signed receipt (verify.go) to the entry.
type ReceiptMsg struct {
	Session SessionID
	Receipt consensus.Receipt
}

// ModelHash is the 64-bit tag of a model fingerprint that open steps
// carry, so that a hop refuses a session routed for another model.
func ModelHash(fingerprint string) uint64 {
	// FNV-1a: a tag, not a security measure (the fingerprint is checked
	// when a node joins).
	h := uint64(14695981039346656037)
	for i := 0; i < len(fingerprint); i++ {
		h ^= uint64(fingerprint[i])
		h *= 1099511628211
	}
	return h
}
