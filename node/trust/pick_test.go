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
	none := func(peer.ID) int { return 0 } // no inconclusive check yet

	// Nothing served yet: every candidate ties, and each is drawn.
	seen := map[int]int{}
	for range 300 {
		seen[PickAudit(hops, cand, none, w.Unverified, rnd.IntN)]++
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
		if i := PickAudit(hops, cand, none, w.Unverified, rnd.IntN); i != 1 && i != 2 {
			t.Fatalf("picked hop %d (%d unverified), want b or c (10 each)", i, w.Unverified(hops[i]))
		}
	}
	// b passes a check: c is now alone at the top; then c passes, and d
	// (4) outranks b (0).
	w.Passed(b)
	if got := w.Unverified(b); got != 0 {
		t.Fatalf("b's unverified steps %d after a passed check, want 0", got)
	}
	if i := PickAudit(hops, cand, none, w.Unverified, rnd.IntN); i != 2 {
		t.Fatalf("picked hop %d, want 2 (c, 10 unverified)", i)
	}
	w.Passed(c)
	if i := PickAudit(hops, cand, none, w.Unverified, rnd.IntN); i != 3 {
		t.Fatalf("picked hop %d, want 3 (d, 4 unverified)", i)
	}
	// A peer on the path twice (two ranges) counts both hops' steps.
	w.Served([]peer.ID{b, b}, 3)
	if got := w.Unverified(b); got != 6 {
		t.Fatalf("b's unverified steps %d, want 6", got)
	}
	if i := PickAudit(hops, cand, none, w.Unverified, rnd.IntN); i != 1 {
		t.Fatalf("picked hop %d, want 1 (b, 6 unverified)", i)
	}
}

// Within an attempt, a hop whose check said nothing (inconclusive) is
// checked again only after the others: an inconclusive check resets no
// work, so the rule of most unverified work alone would draw it at every
// boundary. The case of issue 35's clean-clone CI: on the path
// liar[0,4)→b[4,6)→c[6,8), b and c had served more steps than the liar,
// every check of them came out inconclusive (the liar answers its check
// sessions otherwise than its session, so their checkers were fed other
// input), and the liar was never checked in the whole generation.
func TestAuditSkipsInconclusiveHops(t *testing.T) {
	liar, b, c := peer.ID("liar"), peer.ID("b"), peer.ID("c")
	hops := []peer.ID{liar, b, c}
	cand := []int{0, 1, 2}
	var w Work
	w.Served([]peer.ID{b, c}, 30) // earlier generations on other paths
	w.Served(hops, 11)            // this attempt's prefill
	rnd := rand.New(rand.NewPCG(3, 4))
	inc := map[peer.ID]int{}
	pick := func() int {
		return PickAudit(hops, cand, func(p peer.ID) int { return inc[p] }, w.Unverified, rnd.IntN)
	}

	if i := pick(); i != 1 && i != 2 {
		t.Fatalf("picked hop %d, want b or c (41 unverified each, the liar 11)", i)
	}
	// b's check is inconclusive: c next, then the liar, though b still has
	// more unverified work than the liar.
	inc[b]++
	if i := pick(); i != 2 {
		t.Fatalf("picked hop %d after b's inconclusive check, want 2 (c)", i)
	}
	inc[c]++
	for range 20 {
		if i := pick(); i != 0 {
			t.Fatalf("picked hop %d after b's and c's inconclusive checks, want 0 (the liar)", i)
		}
	}
	// Every hop inconclusive once: the work decides again.
	inc[liar]++
	if i := pick(); i != 1 && i != 2 {
		t.Fatalf("picked hop %d with every hop inconclusive once, want b or c (most unverified)", i)
	}
}
