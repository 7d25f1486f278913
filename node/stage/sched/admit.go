package sched

import (
	"slices"
	"time"
)

// Verdict is what admission does with a session asking to open.
type Verdict uint8

const (
	// Open: the session's KV fits now; the caller reserves it (Reserve).
	Open Verdict = iota
	// Queue: it waits, first come first served, for memory to free.
	Queue
	// NoKV: it needs more than the node has even idle: never admitted here.
	NoKV
	// Busy: the queue is full.
	Busy
)

func (v Verdict) String() string {
	switch v {
	case Open:
		return "open"
	case Queue:
		return "queue"
	case NoKV:
		return "no-kv"
	case Busy:
		return "busy"
	}
	return "verdict?"
}

// Waiter is a session waiting for KV memory: the caller's value, what it
// needs, and when it arrived.
type Waiter[T any] struct {
	V    T
	Need int64
	At   time.Time
}

// Admission admits sessions by KV memory: room is what the weights leave
// (the caller passes it in, since loads change it), used what open
// sessions reserved. A session that does not fit waits in a FIFO of at
// most MaxQueue; nothing overtakes a waiting one.
type Admission[T any] struct {
	MaxQueue int
	used     int64
	waiting  []Waiter[T]
	waited   uint64
}

// Used is the KV memory open sessions hold.
func (a *Admission[T]) Used() int64 { return a.used }

// Free is what room leaves after open sessions.
func (a *Admission[T]) Free(room int64) int64 { return room - a.used }

// Waiting is how many sessions wait.
func (a *Admission[T]) Waiting() int { return len(a.waiting) }

// Waited counts the sessions that ever queued.
func (a *Admission[T]) Waited() uint64 { return a.waited }

// Admit decides a session that needs need, on a hop with room for KV of
// which used is taken, waiting sessions queued and room in the queue for
// maxQueue: it opens if nothing waits and it fits, else it queues while
// the queue has room. NoKV before Busy: a session that can never fit is
// told so, not to retry.
func Admit(need, used, room int64, waiting, maxQueue int) Verdict {
	switch {
	case need > room:
		return NoKV
	case waiting == 0 && Fits(need, used, room):
		return Open
	case waiting >= maxQueue:
		return Busy
	}
	return Queue
}

// Fits reports whether a session needing need opens now, with used of
// room taken: the head of the queue opens when it does.
func Fits(need, used, room int64) bool { return need <= room-used }

// Offer decides a session that needs need bytes, with room bytes for KV
// (Admit); one told to queue is kept, with at.
func (a *Admission[T]) Offer(v T, need, room int64, at time.Time) Verdict {
	verdict := Admit(need, a.used, room, len(a.waiting), a.MaxQueue)
	if verdict == Queue {
		a.waiting = append(a.waiting, Waiter[T]{V: v, Need: need, At: at})
		a.waited++
	}
	return verdict
}

// Reserve counts an opened session's KV; Release gives it back.
func (a *Admission[T]) Reserve(need int64) { a.used += need }

// Release gives back what Reserve took.
func (a *Admission[T]) Release(need int64) { a.used -= need }

// Head is the session that opens next, if any waits.
func (a *Admission[T]) Head() (Waiter[T], bool) {
	if len(a.waiting) == 0 {
		return Waiter[T]{}, false
	}
	return a.waiting[0], true
}

// Fits reports whether a session needing need opens now.
func (a *Admission[T]) Fits(need, room int64) bool { return Fits(need, a.used, room) }

// Pop takes the head off the queue (it opens, or can no longer be served).
func (a *Admission[T]) Pop() {
	if len(a.waiting) > 0 {
		a.waiting[0] = Waiter[T]{}
		a.waiting = a.waiting[1:]
	}
}

// Any reports whether a waiting session satisfies f.
func (a *Admission[T]) Any(f func(T) bool) bool {
	return slices.ContainsFunc(a.waiting, func(w Waiter[T]) bool { return f(w.V) })
}

// Remove takes every waiting session for which gone holds off the queue
// and returns them, in order.
func (a *Admission[T]) Remove(gone func(T) bool) []T {
	var out []T
	a.waiting = slices.DeleteFunc(a.waiting, func(w Waiter[T]) bool {
		if gone(w.V) {
			out = append(out, w.V)
			return true
		}
		return false
	})
	return out
}

// Expire takes the sessions that have waited more than timeout at now off
// the queue and returns them: they are refused (busy).
func (a *Admission[T]) Expire(now time.Time, timeout time.Duration) []Waiter[T] {
	var out []Waiter[T]
	a.waiting = slices.DeleteFunc(a.waiting, func(w Waiter[T]) bool {
		if Stale(now, w.At, timeout) {
			out = append(out, w)
			return true
		}
		return false
	})
	return out
}

// Stale reports whether something last seen at last has been idle more
// than limit at now: a waiting session past the queue timeout, an open
// one past the idle timeout.
func Stale(now, last time.Time, limit time.Duration) bool { return now.Sub(last) > limit }
