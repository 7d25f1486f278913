package sim

import "testing"

type constTimer float64

func (c constTimer) LayerTime(int, int) float64 { return float64(c) }

// throughNode routes every query source → node 0 (to layer hopEnd) → sink.
type throughNode struct{ hopEnd int16 }

func (r throughNode) admit(s *Sim, q *query) bool {
	in, _ := s.linkTo(Source, 0)
	out, _ := s.linkTo(0, Sink)
	q.route, q.ranLayers, q.hopEnd = []int32{in, out}, []int16{0, 0}, []int16{r.hopEnd, 0}
	return true
}
func (throughNode) hop(*Sim, *query, int) (int32, bool) { return -1, false }
func (throughNode) observe(*Sim, *iter, int)            {}
func (throughNode) finish(*Sim, *query)                 {}

// TestReassignKeepsSessions: a committed range change does not break the
// sessions a node holds (node/scheduler.go keeps a released layer until
// no session uses it); a prompt still waiting for memory on a released
// layer and a new session routed there are refused as stale; once the
// last old session ends the node holds only its new range.
func TestReassignKeepsSessions(t *testing.T) {
	c := Cluster{Model: ModelWire{Layers: 4, TokenBytes: 2, ActivationBytes: 16},
		Nodes: []NodeSpec{{Name: "a", First: 0, End: 4, Timer: constTimer(1e-3), KVCapacity: 2 * 60 * 4,
			Caps: Caps{PromptMaxRequests: 4, PromptMaxTokens: 1000, DecodeMaxTokens: 100, DecodeMaxContext: 1 << 20}}}}
	s, err := newSim(c, throughNode{hopEnd: 4}, Window{Start: 0, End: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	s.reserve, s.maxQueue = true, 8
	s.net = func(int, int) LinkSpec { return LinkSpec{Bandwidth: 1e9, Latency: 1e-4} }
	ranges := 0
	s.onRange = func(int) { ranges++ }
	for range 3 {
		s.issue(10, 50, 0) // two fit in memory, the third waits
	}
	s.run(0.05)
	n := s.nodes[0]
	if n.active != 2 || len(n.wait) != 1 || s.stats.completed != 0 {
		t.Fatalf("before the change: %d active, %d waiting, %d completed; want 2, 1, 0", n.active, len(n.wait), s.stats.completed)
	}
	s.reassign(0, 2, 4)
	if n.First != 0 || n.End != 4 || n.accFirst != 2 || n.legacy != 2 {
		t.Fatalf("after the change: span [%d,%d) accepting [%d,%d), %d legacy", n.First, n.End, n.accFirst, n.accEnd, n.legacy)
	}
	if s.stats.breaks[causeStale] != 1 || len(n.wait) != 0 {
		t.Fatalf("waiting prompt on a released layer: breaks %v, %d waiting", s.stats.breaks, len(n.wait))
	}
	late := s.issue(10, 5, s.now) // routed from layer 0 on the old map
	s.run(1e3)
	if s.stats.completed != 2 || s.stats.breaks[causeMoved] != 0 {
		t.Fatalf("old sessions: %d completed, breaks %v; want both completed, none moved", s.stats.completed, s.stats.breaks)
	}
	if !late.failed || late.cause != causeStale {
		t.Fatalf("a new session on a released layer: failed %v cause %v", late.failed, late.cause)
	}
	if n.First != 2 || n.End != 4 || n.held != 2 || ranges != 1 || n.kvUsed != 0 {
		t.Fatalf("after the old sessions: span [%d,%d), %d held, %d range calls, kv %d", n.First, n.End, n.held, ranges, n.kvUsed)
	}
}
