package routing

import (
	"fmt"
	"math"
	"testing"
)

func TestViewBasics(t *testing.T) {
	v := NewView(NodeState{ID: "a"}, NodeState{ID: "b"}, NodeState{ID: "c"})
	if v.Set(NodeState{}) {
		t.Fatal("stored a state with no ID")
	}
	if v.Len() != 3 {
		t.Fatalf("len %d", v.Len())
	}
	for _, x := range []float64{0, -1, math.NaN(), math.Inf(1), 2 * maxSeconds} {
		if v.SetRTT("a", "b", x) {
			t.Errorf("stored RTT %v", x)
		}
	}
	if v.SetRTT("a", "a", 1) || v.SetRTT("a", "zz", 1) {
		t.Fatal("stored a self or unknown link")
	}
	v.SetRTT("a", "b", 0.01)
	v.SetRTT("b", "c", 0.02)
	v.SetRTT("a", "c", 0.03)
	v.SetRTT("c", "a", 0.04) // replaces
	if x, ok := v.RTT("a", "c"); !ok || x != 0.04 {
		t.Fatalf("a-c %v %v", x, ok)
	}
	c := v.Clone()
	v.Remove("a")
	if _, ok := v.Node("a"); ok || v.Len() != 2 {
		t.Fatal("a still there")
	}
	if x, ok := v.RTT("b", "c"); !ok || x != 0.02 {
		t.Fatalf("b-c after remove: %v %v", x, ok)
	}
	if _, ok := v.RTT("c", "a"); ok {
		t.Fatal("link to removed node")
	}
	if x, ok := c.RTT("c", "a"); !ok || x != 0.04 {
		t.Fatal("clone changed")
	}
	v.Remove("nope")
	if !v.Update("b", func(s *NodeState) { s.QueueDepth = 5; s.ID = "hijack" }) {
		t.Fatal("update failed")
	}
	if n, _ := v.Node("b"); n.QueueDepth != 5 || n.ID != "b" {
		t.Fatalf("update: %+v", n)
	}
	if v.Update("zz", func(*NodeState) {}) {
		t.Fatal("updated a missing node")
	}
	var nilView *View
	if nilView.Len() != 0 {
		t.Fatal("nil view")
	}
	if _, ok := nilView.Node("a"); ok {
		t.Fatal("nil view node")
	}
}

// checkSums recomputes the region sums from the links.
func checkSums(t *testing.T, v *View) {
	t.Helper()
	var sum, cnt [zones * zones]int64
	for i, ls := range v.adj {
		for _, l := range ls {
			a, b := v.zone[i], v.zone[l.peer]
			sum[a*zones+b] += sumNanos(l.rtt)
			cnt[a*zones+b]++
		}
	}
	if sum != v.rsum || cnt != v.rcnt {
		t.Fatal("region sums out of step with the links")
	}
}

// Removing nodes in any order keeps every other link intact.
func TestViewRemoveKeepsLinks(t *testing.T) {
	v := NewView()
	const n = 12
	id := func(i int) string { return fmt.Sprintf("n%d", i) }
	for i := range n {
		v.Set(NodeState{ID: id(i)})
	}
	rtt := func(i, j int) float64 { return float64(min(i, j)*100+max(i, j)) * 1e-4 }
	for i := range n {
		for j := i + 1; j < n; j++ {
			v.SetRTT(id(i), id(j), rtt(i, j))
		}
	}
	for i := range n {
		v.Update(id(i), func(s *NodeState) { s.Region = fmt.Sprint(i % 3) })
	}
	checkSums(t, v)
	v.SetRTT(id(1), id(2), rtt(1, 2)) // a replaced sample counts once
	v.Set(NodeState{ID: id(4), Region: "elsewhere"})
	checkSums(t, v)
	gone := map[int]bool{}
	for _, k := range []int{3, 11, 0, 7, 5} {
		v.Remove(id(k))
		checkSums(t, v)
		gone[k] = true
		for i := range n {
			for j := range n {
				x, ok := v.RTT(id(i), id(j))
				want := i != j && !gone[i] && !gone[j]
				if ok != want || (ok && x != rtt(i, j)) {
					t.Fatalf("after removing %d: %d-%d = %v %v", k, i, j, x, ok)
				}
			}
		}
	}
}

// Regions past MaxRegions share the no-region estimates instead of growing
// the router's per-layer work.
func TestViewRegionCap(t *testing.T) {
	v := NewView()
	for i := range 3 * MaxRegions {
		v.Set(NodeState{ID: fmt.Sprint(i), Region: fmt.Sprint("r", i)})
	}
	if len(v.regions) != MaxRegions {
		t.Fatalf("%d regions interned", len(v.regions))
	}
	for i, z := range v.zone {
		if (i < MaxRegions) != (z != 0) {
			t.Fatalf("node %d in zone %d", i, z)
		}
	}
}

func TestEnumsPrint(t *testing.T) {
	for _, s := range []fmt.Stringer{Alive, Suspect, Dead, Health(9), Serving, Warming, Joining, Draining, Phase(9)} {
		if s.String() == "" {
			t.Fatal("empty name")
		}
	}
}
