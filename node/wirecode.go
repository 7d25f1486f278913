package node

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// What the activation protocol's frames name besides their payload (the
// format is in wire.go): why a hop failed a step, and the model a
// session is routed for.

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
