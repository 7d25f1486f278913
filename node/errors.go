package node

import (
	"errors"
	"time"
)

// Sentinel errors. Every error the package returns wraps one of them, so
// callers (the HTTP layer) branch with errors.Is and map each to a status:
//
//	ErrBadRequest     400   ErrUnknownModel 404
//	ErrPromptTooLong  413   ErrNoCapacity   503 (Retry-After: RetryAfter(err))
//	ErrUncovered      503, with ErrNoCapacity: layers no node can hold
//	ErrSessionLost    a stream that cannot continue (an error event)
//	ErrClosed         503   ErrBadFrame     peer input only, never a caller's
var (
	// ErrBadRequest: the request is malformed (no prompt, bad sampling
	// parameters, negative max tokens, tokens outside the vocabulary).
	ErrBadRequest = errors.New("node: bad request")
	// ErrUnknownModel: the request names a model this swarm does not serve.
	ErrUnknownModel = errors.New("node: unknown model")
	// ErrPromptTooLong: the prompt plus the tokens asked for exceed the
	// model's context.
	ErrPromptTooLong = errors.New("node: prompt beyond the model's context")
	// ErrNoCapacity: no full path with room through the swarm (a layer
	// has no live holder, no map is committed yet, or the KV caches are
	// full). New requests get it only after waiting in the entry's queue
	// until their deadline, or at once when the queue is full; in-flight
	// ones after waiting for a repair.
	ErrNoCapacity = errors.New("node: no capacity")
	// ErrUncovered: no map is committed and the members a plan may place
	// cannot hold every layer between them (too few nodes, each capped by
	// its memory or --max-layers): no path can exist until more nodes
	// join, so a request is refused at once rather than queued. It comes
	// with ErrNoCapacity (503), naming the layers served by no node.
	ErrUncovered = errors.New("node: no path")
	// ErrQueueFull: the entry's admission queue is at its bound; it comes
	// wrapped with ErrNoCapacity (503).
	ErrQueueFull = errors.New("node: admission queue full")
	// ErrQueueTimeout: a request waited in the entry's queue until its
	// deadline with no path with room; it comes wrapped with
	// ErrNoCapacity (503).
	ErrQueueTimeout = errors.New("node: queue deadline passed")
	// ErrSessionLost: a generation that had started could not continue
	// (no path within the repair wait, or too many replays).
	ErrSessionLost = errors.New("node: session lost")
	// ErrClosed: the node is shutting down.
	ErrClosed = errors.New("node: closed")
	// ErrBadFrame: an activation frame that does not decode or does not
	// fit the model.
	ErrBadFrame = errors.New("node: bad activation frame")
	// ErrConfig: an option has an invalid value.
	ErrConfig = errors.New("node: invalid configuration")
	// ErrNotServing: the layers asked for are not loaded here.
	ErrNotServing = errors.New("node: layers not served")
)

// retryAfter is an error that suggests when to try again.
type retryAfter struct {
	err   error
	after time.Duration
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// RetryAfter is how long a caller refused with ErrNoCapacity should wait
// before trying again (the HTTP layer's Retry-After), or 0.
func RetryAfter(err error) time.Duration {
	var r *retryAfter
	if errors.As(err, &r) {
		return r.after
	}
	if errors.Is(err, ErrNoCapacity) || errors.Is(err, ErrClosed) {
		return time.Second
	}
	return 0
}
