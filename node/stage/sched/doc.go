// Package sched holds the stage scheduler's decisions as pure functions
// of its state: admission by KV memory with a bounded FIFO of sessions
// waiting for it, which steps run together in a batch and in what order,
// where a session opening on a hop resumes from the prefix cache, and the
// cache itself (least recently used first, in the memory sessions leave).
//
// It owns the rules, not the work: it never calls an engine, opens a
// stream, starts a goroutine or reads a clock (times are passed in).
// node's scheduler loop is the one place that turns its decisions into
// engine calls and sends; sim calls the same functions, so a policy
// change is made once. Sessions and cached sequences are the caller's
// values (type parameters); sequences are compared by chained block
// hashes (routing.BlockHashes: equal hashes at block i mean equal blocks
// up to i).
package sched
