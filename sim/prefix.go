package sim

import "github.com/stratanet/strata/node/stage/sched"

// The stage prefix cache, for swarm runs of the strata policy
// (Sim.prefix). Its rules are node/stage/sched's, the functions the
// node's stage scheduler calls (Cache, Limit, Resume); this file only
// says when a simulated session ends and opens:
//
//   - A session that ends on a live hop (the request completed, or its
//     entry closed the attempt after a failure elsewhere) leaves its KV
//     there, cut to whole blocks of prefixBlock positions, over the
//     layers the hop ran. The cache lives in the memory admission leaves
//     free: it is trimmed, least recently used first, whenever sessions
//     take that room, and lost with the node or with a released layer.
//   - A new session resumes from it on its first hop (the hop from layer
//     0) from the longest match over the same layers, leaving one
//     position to compute; every later hop must hold the same number of
//     positions over its layers, or it refuses the session
//     (CodePrefixMiss) and the entry replays it cold, with no prefix
//     cache for the rest of the request.
//
// The simulated prompts share no tokens with each other, so only a
// request's own earlier attempts (its group, gid) can match: a request's
// block hashes are a function of its gid and the block's index.

// prefixBlock is the cache's block size in positions
// (routing.PrefixBlock, which every node uses).
const prefixBlock = 16

// blockHashes is the first n block hashes of q's token sequence, shared
// by every attempt of its request (gid). Hash i stands for blocks 0..i,
// as routing.BlockHashes chains them: two requests never share one.
func (q *query) blockHashes(n int) []uint64 {
	for i := len(q.hashes); i < n; i++ {
		// splitmix64 of (gid, i): distinct for distinct pairs with
		// overwhelming probability.
		z := uint64(q.gid)<<32 ^ uint64(i) + 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		q.hashes = append(q.hashes, z^z>>31)
	}
	return q.hashes[:n:n]
}

// cacheSession keeps what hop i of q's route computed, as a Close that
// ends the session normally does.
func (s *Sim) cacheSession(q *query, i int, n *node) {
	if !s.prefix || i >= len(q.hopFrom) || q.ranLayers[i] == 0 {
		return // its prefill never passed this hop: nothing is held
	}
	from, to := int(q.hopFrom[i]), int(q.hopEnd[i])
	blocks := (q.input + q.decodes) / prefixBlock
	if blocks == 0 || from < n.accFirst || to > n.accEnd {
		return
	}
	hs := q.blockHashes(blocks)
	if n.pc.Holds(from, to, hs) {
		return
	}
	n.pc.Add(from, to, hs, int64(blocks*prefixBlock)*int64(to-from), struct{}{})
}

// trimCache evicts least recently used entries until the cache fits the
// memory sessions leave free.
func (s *Sim) trimCache(n *node) {
	s.stats.prefixEvicted += len(n.pc.Trim(n.KVCapacity - n.kvUsed))
}

// dropReleased evicts entries over layers the node no longer holds.
func (n *node) dropReleased() {
	n.pc.DropLayers(func(l int) bool { return l < n.First || l >= n.End })
}

// resume applies the cache to a session opening on node ni: the first hop
// picks how many positions the attempt skips (q.skip) and computes only
// the rest; a later hop must hold exactly that many. It reports false on
// a prefix miss.
func (s *Sim) resume(ni int, it *iter) bool {
	q := it.q
	if !s.prefix || q.cold {
		return true
	}
	n := s.nodes[ni]
	first := it.entry == 0
	limit := sched.Limit(first, q.input, q.skip, prefixBlock)
	_, k := n.pc.Lookup(it.entry, it.stop, q.blockHashes(limit), limit)
	_, blocks, miss := sched.Resume(first, limit, q.skip/prefixBlock, []sched.Match{{Blocks: k, Chains: k}})
	if miss {
		s.stats.prefixMisses++
		return false
	}
	if blocks > 0 {
		s.stats.prefixHits++
		s.stats.prefixReused += int64(blocks * prefixBlock)
		if first {
			q.skip = blocks * prefixBlock
			it.tokens = q.input - q.skip
		}
	}
	return true
}
