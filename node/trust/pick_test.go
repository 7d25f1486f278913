package trust

import (
	"math/rand/v2"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A check goes to the candidate hop whose peer served the most steps
// since its last passed check; ties are drawn at random, and a check that
// passes sends the peer to the back of the queue.
func TestAuditPicksMostUnverified(t *testing.T) {
	a, b, c, d := peer.ID("a"), peer.ID("b"), peer.ID("c"), peer.ID("d")
	hops := []peer.ID{a, b, c, d} // a path's hops' peers, in order
	cand := []int{1, 2, 3}        // a is the entry itself: never a candidate
	var w Work
	rnd := rand.New(rand.NewPCG(1, 2))

	// Nothing served yet: every candidate ties, and each is drawn.
	seen := map[int]int{}
	for range 300 {
		seen[PickAudit(hops, cand, w.Unverified, rnd.IntN)]++
	}
	for _, i := range cand {
		if seen[i] == 0 {
			t.Fatalf("tied candidate %d never drawn in 300 picks: %v", i, seen)
		}
	}
	if seen[0] != 0 {
		t.Fatalf("picked a hop that is no candidate: %v", seen)
	}

	// A path a→b→c served a prefill of 8 and two steps; d came later.
	w.Served(hops[:3], 8)
	w.Served(hops[:3], 1)
	w.Served(hops[:3], 1)
	w.Served(hops[3:], 4)
	if got := w.Unverified(b); got != 10 {
		t.Fatalf("b's unverified steps %d, want 10", got)
	}
	for range 50 {
		if i := PickAudit(hops, cand, w.Unverified, rnd.IntN); i != 1 && i != 2 {
			t.Fatalf("picked hop %d (%d unverified), want b or c (10 each)", i, w.Unverified(hops[i]))
		}
	}
	// b passes a check: c is now alone at the top; then c passes, and d
	// (4) outranks b (0).
	w.Passed(b)
	if got := w.Unverified(b); got != 0 {
		t.Fatalf("b's unverified steps %d after a passed check, want 0", got)
	}
	if i := PickAudit(hops, cand, w.Unverified, rnd.IntN); i != 2 {
		t.Fatalf("picked hop %d, want 2 (c, 10 unverified)", i)
	}
	w.Passed(c)
	if i := PickAudit(hops, cand, w.Unverified, rnd.IntN); i != 3 {
		t.Fatalf("picked hop %d, want 3 (d, 4 unverified)", i)
	}
	// A peer on the path twice (two ranges) counts both hops' steps.
	w.Served([]peer.ID{b, b}, 3)
	if got := w.Unverified(b); got != 6 {
		t.Fatalf("b's unverified steps %d, want 6", got)
	}
	if i := PickAudit(hops, cand, w.Unverified, rnd.IntN); i != 1 {
		t.Fatalf("picked hop %d, want 1 (b, 6 unverified)", i)
	}
}
