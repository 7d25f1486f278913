package sched

import "slices"

// The stage prefix cache. When a session ends normally its KV is kept,
// cut to whole blocks, so that a later session over the same first blocks
// (a chat's next turn re-sends the whole history) resumes there instead of
// recomputing them. It lives in the memory admission leaves free: it never
// counts against a session's admission, and is trimmed, least recently
// used first, whenever sessions need the room. A sequence is its chained
// block hashes; the caller's value P holds what the cache keeps (a node's
// KV sessions and receipt chain states; nothing, in the simulator).

// Cache is a hop's prefix cache. The zero value is empty and ready.
type Cache[P any] struct {
	entries []*entry[P]
	cost    int64
	clock   uint64 // LRU clock
	// Hits counts the sessions resumed, Reused what they did not
	// recompute (in the caller's unit: positions, blocks), Evicted the
	// entries trimmed for room.
	Hits, Reused, Evicted uint64
}

type entry[P any] struct {
	from, to int
	hashes   []uint64
	cost     int64
	used     uint64
	val      P
}

// Len is how many sequences the cache holds; Cost their total cost.
func (c *Cache[P]) Len() int    { return len(c.entries) }
func (c *Cache[P]) Cost() int64 { return c.cost }

// Shared is how many leading blocks two chained hash sequences share:
// hash i covers every block up to i, so they agree up to the last equal
// one (found by bisection).
func Shared(a, b []uint64) int {
	lo, hi := 0, min(len(a), len(b)) // a[:lo] shared; a[hi:] not
	for lo < hi {
		mid := (lo + hi) / 2
		if a[mid] == b[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Lookup finds the sequence over layers [from, to) that shares the most
// leading blocks with hashes, at most limit, and how many it shares (0:
// none); it becomes the most recently used. Only the same range will do,
// though a wider one holds the KV: its receipt chains hash the inputs and
// outputs of its own range, and a session resumed from them would sign
// chains no cold run of [from, to) gives.
func (c *Cache[P]) Lookup(from, to int, hashes []uint64, limit int) (P, int) {
	var best *entry[P]
	bestN := 0
	for _, e := range c.entries {
		if e.from != from || e.to != to {
			continue
		}
		if n := min(Shared(e.hashes, hashes), limit); n > bestN {
			best, bestN = e, n
		}
	}
	if best == nil {
		var zero P
		return zero, 0
	}
	c.clock++
	best.used = c.clock
	return best.val, bestN
}

// Holds reports whether a sequence over [from, to) covers all of hashes,
// and makes it the most recently used: a finished session that adds
// nothing.
func (c *Cache[P]) Holds(from, to int, hashes []uint64) bool {
	for _, e := range c.entries {
		if e.from == from && e.to == to && len(e.hashes) >= len(hashes) && Shared(e.hashes, hashes) == len(hashes) {
			c.clock++
			e.used = c.clock
			return true
		}
	}
	return false
}

// Add caches a sequence over [from, to) (the caller checked Holds first)
// as the most recently used, and drops the ones it extends, which it
// returns for the caller to free. hashes is kept: the caller must not
// change it.
func (c *Cache[P]) Add(from, to int, hashes []uint64, cost int64, v P) (dropped []P) {
	for i := 0; i < len(c.entries); i++ {
		e := c.entries[i]
		if e.from == from && e.to == to && len(e.hashes) < len(hashes) && Shared(e.hashes, hashes) == len(e.hashes) {
			dropped = append(dropped, c.remove(i))
			i--
		}
	}
	if len(hashes) == 0 {
		return dropped
	}
	c.clock++
	c.entries = append(c.entries, &entry[P]{from: from, to: to, hashes: hashes, cost: cost, used: c.clock, val: v})
	c.cost += cost
	return dropped
}

func (c *Cache[P]) remove(i int) P {
	e := c.entries[i]
	c.cost -= e.cost
	c.entries = slices.Delete(c.entries, i, i+1)
	return e.val
}

// Trim evicts least recently used sequences until the cache costs at most
// room, and returns them.
func (c *Cache[P]) Trim(room int64) (evicted []P) {
	for c.cost > max(room, 0) && len(c.entries) > 0 {
		lru := 0
		for i, e := range c.entries {
			if e.used < c.entries[lru].used {
				lru = i
			}
		}
		evicted = append(evicted, c.remove(lru))
		c.Evicted++
	}
	return evicted
}

// DropLayers evicts every sequence over a layer for which gone holds (the
// node released it, or a new stage took it over), and returns them.
func (c *Cache[P]) DropLayers(gone func(l int) bool) (dropped []P) {
	for i := 0; i < len(c.entries); i++ {
		e := c.entries[i]
		for l := e.from; l < e.to; l++ {
			if gone(l) {
				dropped = append(dropped, c.remove(i))
				i--
				break
			}
		}
	}
	return dropped
}

// Clear empties the cache and returns what it held.
func (c *Cache[P]) Clear() []P {
	var out []P
	for _, e := range c.entries {
		out = append(out, e.val)
	}
	c.entries, c.cost = nil, 0
	return out
}

// Each calls f with every cached sequence's range, hashes and value, in
// the order they were added (a summary for heartbeats is built from them).
func (c *Cache[P]) Each(f func(from, to int, hashes []uint64, v P)) {
	for _, e := range c.entries {
		f(e.from, e.to, e.hashes, e.val)
	}
}

// Resumed counts a session resumed from the cache (or a live session)
// that did not recompute n (Reused's unit).
func (c *Cache[P]) Resumed(n int) {
	c.Hits++
	c.Reused += uint64(n)
}

// Limit is how many whole blocks of block positions a session opening
// with tokens positions may resume on its hop: the first hop (first)
// leaves at least one position to compute, so that it has a row to sample
// from; a later hop resumes exactly the skip positions the first did, no
// more, since its input rows start there.
func Limit(first bool, tokens, skip, block int) int {
	if first {
		return max(tokens-1, 0) / block
	}
	return skip / block
}

// Match is a candidate source for a resume: how many leading blocks it
// shares with the session's tokens, and over how many blocks it holds the
// receipt chains' states (a resumed session's chains go on from them, as
// a cold run's would stand; the simulator passes Blocks).
type Match struct {
	Blocks, Chains int
}

// Resume decides where a session opening on a hop starts. matches are its
// candidates: the cache's best first, then the hop's live sessions over
// the same layers (the previous turn's, whose close may reach the hop
// after the next turn's first step, count as cached). The longest match
// within limit wins, the earliest among equals. The first hop (first)
// resumes it if its chains reach; a later hop only if it is exactly the
// skip blocks the first resumed. It returns the source's index (-1: none)
// and the blocks resumed; miss: a later hop does not hold what the first
// resumed, and must refuse the session (the entry replays it cold).
func Resume(first bool, limit, skip int, matches []Match) (src, blocks int, miss bool) {
	src = -1
	for i, m := range matches {
		if k := min(m.Blocks, limit); k > blocks {
			src, blocks = i, k
		}
	}
	if src < 0 || matches[src].Chains < blocks || !first && blocks != skip {
		src, blocks = -1, 0
	}
	return src, blocks, !first && blocks != skip
}
