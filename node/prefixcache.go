package node

import (
	"slices"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/routing"
)

// The stage prefix cache. When a session ends normally its KV is kept,
// compacted to its whole blocks of prefixBlock tokens, so that a later
// session over the same first blocks (a chat's next turn re-sends the
// whole history) resumes there instead of recomputing them. It lives in
// the memory admission leaves free: it never counts against a session's
// admission, and is trimmed, least recently used first, whenever sessions
// need the room. The scheduler's loop owns it; nothing here locks.

// prefixBlock is the cache's unit in tokens, the block routing hashes
// (routing.BlockHashes) with: every node must use the same.
const prefixBlock = routing.PrefixBlock

// maxSummaryBits bounds the summary a heartbeat carries
// (swarm.MaxPrefixLen bytes).
const maxSummaryBits = 8192

// prefixEntry is one cached sequence's KV over layers [from, to).
type prefixEntry struct {
	from, to int
	tokens   []int32  // whole blocks
	hashes   []uint64 // routing.BlockHashes of tokens
	sess     []engine.Session
	marks    []chainMark // the receipt chains' states per block (verify.go)
	bytes    int64
	used     uint64 // LRU clock
}

type prefixCache struct {
	entries []*prefixEntry
	bytes   int64
	clock   uint64
	summary *routing.PrefixSummary // rebuilt on change; nil when empty
	hits    uint64                 // sessions resumed from the cache
	reused  uint64                 // positions they did not recompute
	evicted uint64
}

// lookup finds the entry over layers [from, to) that shares the most
// whole leading blocks with tokens, at most limit positions, and how many
// positions it shares. Only the same range will do, though a wider one
// holds the KV: its receipt chains hash the inputs and outputs of its own
// range, and a session resumed with them would sign chains that no cold
// run of [from, to) gives, so an honest hop would fail its spot checks.
func (c *prefixCache) lookup(from, to int, tokens []int32, limit int) (*prefixEntry, int) {
	var best *prefixEntry
	bestN := 0
	for _, e := range c.entries {
		if e.from != from || e.to != to {
			continue
		}
		if n := sharedBlocks(e.tokens, tokens, limit); n > bestN {
			best, bestN = e, n
		}
	}
	if best != nil {
		c.clock++
		best.used = c.clock
	}
	return best, bestN
}

// sharedBlocks is how many positions a and b share in whole leading
// blocks, at most limit.
func sharedBlocks(a, b []int32, limit int) int {
	n := 0
	for n+prefixBlock <= min(len(a), len(b), limit) && slices.Equal(a[n:n+prefixBlock], b[n:n+prefixBlock]) {
		n += prefixBlock
	}
	return n
}

// add caches the first whole blocks of a finished session's positions
// (tokens, one per position) over layers [from, to): sess are its
// sessions, one per layer, which add closes. A cached sequence that the
// new one extends is dropped; one that already covers it is kept instead.
func (c *prefixCache) add(from, to int, tokens []int32, marks []chainMark, sess []engine.Session, stages []engine.Stage, perToken int64) {
	defer func() {
		for _, es := range sess {
			es.Close()
		}
	}()
	n := len(tokens) / prefixBlock * prefixBlock
	if n == 0 {
		return
	}
	tokens = tokens[:n]
	for i := 0; i < len(c.entries); i++ {
		e := c.entries[i]
		if e.from != from || e.to != to {
			continue
		}
		switch {
		case len(e.tokens) >= n && slices.Equal(e.tokens[:n], tokens):
			c.clock++
			e.used = c.clock
			return // already held
		case len(e.tokens) < n && slices.Equal(e.tokens, tokens[:len(e.tokens)]):
			c.remove(i)
			i--
		}
	}
	if len(marks) < n/prefixBlock {
		return // no receipt chains to resume with
	}
	e := &prefixEntry{from: from, to: to, tokens: slices.Clone(tokens), hashes: routing.BlockHashes(tokens, prefixBlock),
		marks: slices.Clone(marks[:n/prefixBlock]), bytes: perToken * int64(n)}
	for i, es := range sess {
		ps, ok := stages[i].(engine.PrefixStage)
		if !ok {
			e.close()
			return
		}
		// A compact copy: the session reserved its whole capacity.
		cp, err := ps.NewSessionFrom(es, n, n)
		if err != nil {
			e.close()
			return
		}
		e.sess = append(e.sess, cp)
	}
	c.clock++
	e.used = c.clock
	c.entries = append(c.entries, e)
	c.bytes += e.bytes
	c.changed()
}

func (e *prefixEntry) close() {
	for _, es := range e.sess {
		es.Close()
	}
	e.sess = nil
}

func (c *prefixCache) remove(i int) {
	e := c.entries[i]
	e.close()
	c.bytes -= e.bytes
	c.entries = slices.Delete(c.entries, i, i+1)
	c.changed()
}

// trim evicts least recently used entries until the cache takes at most
// room bytes.
func (c *prefixCache) trim(room int64) {
	for c.bytes > max(room, 0) && len(c.entries) > 0 {
		lru := 0
		for i, e := range c.entries {
			if e.used < c.entries[lru].used {
				lru = i
			}
		}
		c.remove(lru)
		c.evicted++
	}
}

// dropLayers evicts every entry over a layer for which gone is true.
func (c *prefixCache) dropLayers(gone func(l int) bool) {
	for i := 0; i < len(c.entries); i++ {
		e := c.entries[i]
		for l := e.from; l < e.to; l++ {
			if gone(l) {
				c.remove(i)
				i--
				break
			}
		}
	}
}

func (c *prefixCache) close() {
	for _, e := range c.entries {
		e.close()
	}
	c.entries, c.bytes = nil, 0
	c.changed()
}

// changed rebuilds the summary the heartbeat carries: a new one each time,
// since views may share the last.
func (c *prefixCache) changed() {
	if len(c.entries) == 0 {
		c.summary = nil
		return
	}
	// About 16 bits per block (a few percent false positives at 3
	// probes), within what a heartbeat carries.
	n := 0
	for _, e := range c.entries {
		n += len(e.hashes)
	}
	s := routing.NewPrefixSummary(min(max(routing.DefaultSummaryBits, 16*n), maxSummaryBits))
	for _, e := range c.entries {
		s.Add(e.hashes...)
	}
	c.summary = s
}
