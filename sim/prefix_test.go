package sim

import "testing"

// TestPrefixResume checks how the simulator applies the stage prefix
// cache (node/stage/sched, the node's rules): whole blocks, the first hop
// resumes leaving one position to compute, a later hop must hold what the
// first resumed, a cold request resumes nothing, only the same range
// resumes, and eviction is least recently used first.
func TestPrefixResume(t *testing.T) {
	mk := func(first, end int, kv int64) *node {
		return &node{NodeSpec: NodeSpec{First: first, End: end, KVCapacity: kv}, accFirst: first, accEnd: end}
	}
	s := &Sim{prefix: true, nodes: []*node{mk(0, 10, 1<<20), mk(10, 20, 1<<20), mk(10, 20, 1<<20)}}
	// An attempt of request 7 over a: [0,10) → b: [10,20), its prefill
	// through both and 5 tokens decoded: 40+5 positions, 2 whole blocks.
	q := &query{gid: 7, input: 40, decodes: 5, hopFrom: []int16{0, 10, 0}, hopEnd: []int16{10, 20, 0}, ranLayers: []int16{10, 10, 0}}
	s.cacheSession(q, 0, s.nodes[0])
	s.cacheSession(q, 1, s.nodes[1])
	if c := &s.nodes[0].pc; c.Len() != 1 || c.Cost() != 320 {
		t.Fatalf("cached %d entries costing %d, want 32 positions over 10 layers", c.Len(), c.Cost())
	}
	// The replay: prompt and decoded tokens, 45 positions.
	replay := func(hop int, cold bool) (*query, *iter, bool) {
		nq := &query{gid: 7, input: 45, cold: cold}
		first := &iter{q: nq, prompt: true, tokens: 45, entry: 0, stop: 10}
		ok := s.resume(0, first)
		if ok {
			ok = s.resume(hop, &iter{q: nq, prompt: true, tokens: first.tokens, entry: 10, stop: 20})
		}
		return nq, first, ok
	}
	nq, it, ok := replay(1, false)
	if !ok || nq.skip != 32 || it.tokens != 13 {
		t.Fatalf("replay on the same hops: ok %v skip %d tokens %d, want 32 resumed and 13 computed", ok, nq.skip, it.tokens)
	}
	if nq, _, ok := replay(2, false); ok || nq.skip != 32 {
		t.Fatalf("a later hop without the prefix must refuse (prefix miss): ok %v skip %d", ok, nq.skip)
	}
	if nq, it, ok := replay(2, true); !ok || nq.skip != 0 || it.tokens != 45 {
		t.Fatalf("a cold replay resumes nothing: ok %v skip %d tokens %d", ok, nq.skip, it.tokens)
	}
	// Leaving one position: a 32-position replay resumes 16, not 32.
	short := &query{gid: 7, input: 32}
	if s.resume(0, &iter{q: short, prompt: true, tokens: 32, entry: 0, stop: 10}); short.skip != 16 {
		t.Fatalf("32 positions resumed %d, want 16 (one must be computed)", short.skip)
	}
	// Another request shares nothing; a wider hop is not covered.
	other := &query{gid: 8, input: 45}
	if s.resume(0, &iter{q: other, prompt: true, tokens: 45, entry: 0, stop: 10}); other.skip != 0 {
		t.Fatal("another request resumed request 7's prefix")
	}
	wide := &query{gid: 7, input: 45}
	s.nodes[0].End, s.nodes[0].accEnd = 12, 12
	if s.resume(0, &iter{q: wide, prompt: true, tokens: 45, entry: 0, stop: 12}); wide.skip != 0 {
		t.Fatal("an entry over [0,10) resumed a hop over [0,12)")
	}
	// Sessions take the room: the least recently used entry goes first.
	n := mk(0, 10, 1000)
	s.nodes[0] = n
	for g := range 3 {
		s.cacheSession(&query{gid: g, input: 32, hopFrom: []int16{0}, hopEnd: []int16{10}, ranLayers: []int16{10}}, 0, n)
	}
	s.resume(0, &iter{q: &query{gid: 0, input: 40}, prompt: true, tokens: 40, entry: 0, stop: 10}) // uses 0
	n.kvUsed = 1000 - 700
	s.trimCache(n)
	if n.pc.Len() != 2 || n.pc.Cost() != 640 || s.stats.prefixEvicted != 1 {
		t.Fatalf("after trimming to 700: %d entries costing %d, %d evicted; want one evicted", n.pc.Len(), n.pc.Cost(), s.stats.prefixEvicted)
	}
	for g, want := range []int{32, 0, 32} {
		q := &query{gid: g, input: 40}
		if s.resume(0, &iter{q: q, prompt: true, tokens: 40, entry: 0, stop: 10}); q.skip != want {
			t.Fatalf("request %d resumed %d, want %d (request 1 evicted)", g, q.skip, want)
		}
	}
}
