package sim

// The stage prefix cache as node/scheduler.go and node/prefixcache.go run
// it, for swarm runs of the strata policy (Sim.prefix):
//
//   - A session that ends on a live hop (the request completed, or its
//     entry closed the attempt after a failure elsewhere) leaves its KV
//     there, cut to whole blocks of prefixBlock positions, over the
//     layers the hop ran. The cache lives in the memory admission leaves
//     free: it is trimmed, least recently used first, whenever sessions
//     take that room, and lost with the node or with a released layer.
//   - A new session resumes from it on its first hop (the hop from layer
//     0) from the longest match, leaving one position to compute; every
//     later hop must hold the same number of positions over its layers,
//     or it refuses the session (CodePrefixMiss) and the entry replays it
//     cold, with no prefix cache for the rest of the request.
//
// The simulated prompts share no tokens with each other, so only a
// request's own earlier attempts (its group, gid) can match.

// prefixBlock is node/prefixcache.go's block size in positions.
const prefixBlock = 16

// pcEntry is one cached sequence: request group gid's first n positions
// over layers [from, to).
type pcEntry struct {
	gid, from, to, n int
	cost             int64 // n × layers, in KV units
}

// cacheSession keeps what hop i of q's route computed, as a Close that
// ends the session normally does.
func (s *Sim) cacheSession(q *query, i int, n *node) {
	if !s.prefix || i >= len(q.hopFrom) || q.ranLayers[i] == 0 {
		return // its prefill never passed this hop: nothing is held
	}
	from, to := int(q.hopFrom[i]), int(q.hopEnd[i])
	pos := (q.input + q.decodes) / prefixBlock * prefixBlock
	if pos == 0 || from < n.accFirst || to > n.accEnd {
		return
	}
	for k := 0; k < len(n.pc); k++ {
		e := n.pc[k]
		if e.gid != q.gid || e.from != from || e.to != to {
			continue
		}
		if e.n >= pos {
			n.touch(k)
			return // already held
		}
		n.dropEntry(k) // the new one extends it
		k--
	}
	e := pcEntry{gid: q.gid, from: from, to: to, n: pos, cost: int64(pos) * int64(to-from)}
	n.pc = append(n.pc, e)
	n.pcCost += e.cost
}

// touch makes entry k the most recently used (the slice is in use order).
func (n *node) touch(k int) {
	e := n.pc[k]
	copy(n.pc[k:], n.pc[k+1:])
	n.pc[len(n.pc)-1] = e
}

func (n *node) dropEntry(k int) {
	n.pcCost -= n.pc[k].cost
	n.pc = append(n.pc[:k], n.pc[k+1:]...)
}

// trimCache evicts least recently used entries until the cache fits the
// memory sessions leave free.
func (s *Sim) trimCache(n *node) {
	room := max(n.KVCapacity-n.kvUsed, 0)
	k := 0
	for n.pcCost > room && k < len(n.pc) {
		n.pcCost -= n.pc[k].cost
		k++
		s.stats.prefixEvicted++
	}
	if k > 0 {
		n.pc = append(n.pc[:0], n.pc[k:]...)
	}
}

// dropReleased evicts entries over layers the node no longer holds.
func (n *node) dropReleased() {
	for k := 0; k < len(n.pc); k++ {
		if e := n.pc[k]; e.from < n.First || e.to > n.End {
			n.dropEntry(k)
			k--
		}
	}
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
	if it.entry == 0 {
		limit := (q.input - 1) / prefixBlock * prefixBlock
		best, bestK := 0, -1
		for k, e := range n.pc {
			if e.gid == q.gid && e.from <= it.entry && e.to >= it.stop {
				if m := min(e.n, limit); m > best {
					best, bestK = m, k
				}
			}
		}
		if bestK >= 0 {
			n.touch(bestK)
			q.skip = best
			it.tokens = q.input - best
			s.stats.prefixHits++
			s.stats.prefixReused += int64(best)
		}
		return true
	}
	if q.skip == 0 {
		return true
	}
	for k, e := range n.pc {
		if e.gid == q.gid && e.from <= it.entry && e.to >= it.stop && e.n >= q.skip {
			n.touch(k)
			s.stats.prefixHits++
			s.stats.prefixReused += int64(q.skip)
			return true
		}
	}
	s.stats.prefixMisses++
	return false
}
