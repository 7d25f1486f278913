package node

import (
	"slices"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node/stage/sched"
	"github.com/stratanet/strata/node/trust"
	"github.com/stratanet/strata/routing"
)

// The stage prefix cache. When a session ends normally its KV is kept,
// compacted to its whole blocks of prefixBlock tokens, so that a later
// session over the same first blocks (a chat's next turn re-sends the
// whole history) resumes there instead of recomputing them. It lives in
// the memory admission leaves free: it never counts against a session's
// admission, and is trimmed, least recently used first, whenever sessions
// need the room. The scheduler's loop owns it; nothing here locks. The
// rules are node/stage/sched's Cache, which the simulator runs too.

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
	marks    []trust.Mark // the receipt chains' states per block (trust.Chains)
	bytes    int64
}

// prefixCache is the hop's cache: the decisions (what is held, what a
// lookup finds, what goes for room) are node/stage/sched's; this keeps
// the KV sessions and receipt chain states they are about, and the
// summary heartbeats carry.
type prefixCache struct {
	c       sched.Cache[*prefixEntry]
	summary *routing.PrefixSummary // rebuilt on change; nil when empty
}

// lookup finds the entry over layers [from, to) that shares the most
// whole leading blocks with tokens, at most limit blocks, and how many
// blocks it shares. Only the same range will do (sched.Cache.Lookup).
func (c *prefixCache) lookup(from, to int, tokens []int32, limit int) (*prefixEntry, int) {
	n := min(limit, len(tokens)/prefixBlock)
	e, k := c.c.Lookup(from, to, routing.BlockHashes(tokens[:n*prefixBlock], prefixBlock), n)
	if e == nil {
		return nil, 0
	}
	// Hashes may collide; the KV is of these exact tokens or not used.
	return e, sharedBlocks(e.tokens, tokens, k*prefixBlock) / prefixBlock
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
func (c *prefixCache) add(from, to int, tokens []int32, marks []trust.Mark, sess []engine.Session, stages []engine.Stage, perToken int64) {
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
	hashes := routing.BlockHashes(tokens, prefixBlock)
	if c.c.Holds(from, to, hashes) || len(marks) < n/prefixBlock {
		return // already held, or no receipt chains to resume with
	}
	e := &prefixEntry{from: from, to: to, tokens: slices.Clone(tokens), hashes: hashes,
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
	c.put(e)
}

// put caches e, closing the entries it extends.
func (c *prefixCache) put(e *prefixEntry) {
	for _, d := range c.c.Add(e.from, e.to, e.hashes, e.bytes, e) {
		d.close()
	}
	c.changed()
}

func (e *prefixEntry) close() {
	for _, es := range e.sess {
		if es != nil { // a test's stand-in
			es.Close()
		}
	}
	e.sess = nil
}

// trim evicts least recently used entries until the cache takes at most
// room bytes.
func (c *prefixCache) trim(room int64) {
	c.closeAll(c.c.Trim(room))
}

// dropLayers evicts every entry over a layer for which gone is true.
func (c *prefixCache) dropLayers(gone func(l int) bool) {
	c.closeAll(c.c.DropLayers(gone))
}

func (c *prefixCache) close() {
	for _, e := range c.c.Clear() {
		e.close()
	}
	c.changed()
}

func (c *prefixCache) closeAll(es []*prefixEntry) {
	for _, e := range es {
		e.close()
	}
	if len(es) > 0 {
		c.changed()
	}
}

// changed rebuilds the summary the heartbeat carries: a new one each time,
// since views may share the last.
func (c *prefixCache) changed() {
	if c.c.Len() == 0 {
		c.summary = nil
		return
	}
	// About 16 bits per block (a few percent false positives at 3
	// probes), within what a heartbeat carries.
	n := 0
	c.c.Each(func(_, _ int, hashes []uint64, _ *prefixEntry) { n += len(hashes) })
	s := routing.NewPrefixSummary(min(max(routing.DefaultSummaryBits, 16*n), maxSummaryBits))
	c.c.Each(func(_, _ int, hashes []uint64, _ *prefixEntry) { s.Add(hashes...) })
	c.summary = s
}
