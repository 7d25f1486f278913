package consensus

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPendingRepairKeepsReady: over random swarms, when a node of the
// pending map leaves, the leader either proposes the pending map again
// (same epoch, same deadline, covering, without the departed node, and
// every node that was ready for an unchanged range still ready) or
// abandons it; never anything else, and the state admits what it does.
func TestPendingRepairKeepsReady(t *testing.T) {
	repaired, dropped := 0, 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 21))
		w := newWorld(t)
		n := 3 + rng.IntN(6)
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("n%d", i))
		}
		w.do("self n0")
		for _, id := range ids {
			w.appendEvent(w.joinEvent(id, nil))
		}
		for _, id := range ids {
			w.in.Servers = append(w.in.Servers, RaftServer{ID: id, Voter: id == "n0"})
		}
		if out := w.run(); strings.Contains(out, "error") {
			t.Fatalf("seed %d: %s", seed, out)
		}
		p, ok := w.in.State.Pending()
		if !ok {
			t.Fatalf("seed %d: no first map proposed for %d nodes", seed, n)
		}
		for _, id := range p.Waiting() {
			if rng.IntN(2) == 0 {
				w.ready([]string{id})
			}
		}
		before, _ := w.in.State.Pending()
		var cand []string
		for _, st := range before.Map.Stages {
			if st.Node != "n0" {
				cand = append(cand, st.Node)
			}
		}
		gone := cand[rng.IntN(len(cand))]
		w.do("leave " + gone)
		w.do("at 5")

		// Configuration changes (voters, servers) come first; the first
		// append is the one about the pending map.
		var ap Append
		for i := 0; ; i++ {
			a, _, err := w.decide()
			if err != nil || a == nil || i == 8 {
				t.Fatalf("seed %d: %v %v, want an append", seed, a, err)
			}
			if ap, ok = a.(Append); ok {
				break
			}
			w.step()
		}
		switch e := ap.Event.(type) {
		case WarmupAbandoned:
			dropped++
			if e.Epoch != before.Map.Epoch {
				t.Fatalf("seed %d: abandoned epoch %d, pending %d", seed, e.Epoch, before.Map.Epoch)
			}
		case MapProposed:
			repaired++
			if e.Map.Epoch != before.Map.Epoch || !e.Deadline.Equal(before.Deadline) {
				t.Fatalf("seed %d: repaired epoch %d deadline %v, pending %d %v", seed, e.Map.Epoch, e.Deadline, before.Map.Epoch, before.Deadline)
			}
			if _, in := e.Map.Range(gone); in || !e.Map.Covers() {
				t.Fatalf("seed %d: repaired map %v places %s or has gaps", seed, describeMap(e.Map), gone)
			}
			if s := w.appendEvent(e); s != "" {
				t.Fatalf("seed %d: %s", seed, s)
			}
			after, _ := w.in.State.Pending()
			for _, st := range before.Map.Stages {
				r, in := after.Map.Range(st.Node)
				if in && r == st.Range && before.Loads(st.Node) && before.Ready(st.Node) && !after.Ready(st.Node) {
					t.Fatalf("seed %d: %s was ready for %v and is not any more", seed, st.Node, r)
				}
			}
		default:
			t.Fatalf("seed %d: %v, want a repaired proposal or an abandon", seed, ap)
		}
	}
	t.Logf("%d repaired, %d dropped", repaired, dropped)
	if repaired == 0 || dropped == 0 {
		t.Fatalf("%d repaired, %d dropped: the cases do not cover both paths", repaired, dropped)
	}
}
