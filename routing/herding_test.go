package routing

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stratanet/strata/layers"
)

// fourPipelines is four disjoint two-node pipelines, front k holding
// [0,40) and back k [40,80), on equal devices, with measured links inside
// each pipeline and from the entry.
func fourPipelines(t *testing.T) (layers.LayerMap, *View, [][2]string) {
	var stages []layers.Stage
	var pipes [][2]string
	v := NewView(fresh(t, "entry", "h100"))
	for k := range 4 {
		f, b := fmt.Sprintf("front%d", k), fmt.Sprintf("back%d", k)
		stages = append(stages, stage(f, 0, 40), stage(b, 40, 80))
		pipes = append(pipes, [2]string{f, b})
		v.Set(fresh(t, f, "rtx4090"))
		v.Set(fresh(t, b, "rtx4090"))
		v.SetRTT("entry", f, 0.01)
		v.SetRTT("entry", b, 0.01)
		v.SetRTT(f, b, 0.005)
	}
	return mustMap(t, 80, stages...), v, pipes
}

// herd routes n requests, bumping the queue depth of every node on each
// chosen path as the entry would before the next heartbeat (update false:
// the view stays as it was, as between heartbeats). It returns each
// pipeline's share of the requests, by its front and its back node.
func herd(t *testing.T, r *Router, m layers.LayerMap, v *View, pipes [][2]string, n int, update bool) (front, back []float64) {
	t.Helper()
	use := map[string]int{}
	for i := range n {
		p, err := r.Route(m, v, Request{Entry: "entry", PromptTokens: 200, MaxTokens: 256, Seed: uint64(i)}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range p.Hops {
			use[h.Node]++
			if update {
				v.Update(h.Node, func(s *NodeState) { s.QueueDepth++ })
			}
		}
	}
	for _, pp := range pipes {
		front = append(front, float64(use[pp[0]])/float64(n))
		back = append(back, float64(use[pp[1]])/float64(n))
	}
	return front, back
}

func shares(x []float64) string {
	var b strings.Builder
	for i, s := range x {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.1f%%", 100*s)
	}
	return b.String()
}

func TestHerding(t *testing.T) {
	r := newRouter(t)
	const n = 10000

	t.Run("equal", func(t *testing.T) {
		m, v, pipes := fourPipelines(t)
		front, back := herd(t, r, m, v, pipes, n, true)
		t.Logf("4 equal pipelines, %d requests: fronts %s; backs %s", n, shares(front), shares(back))
		for k := range pipes {
			if front[k] > 0.35 || back[k] > 0.35 {
				t.Errorf("pipeline %d got %.1f%% / %.1f%% of the requests, more than 35%%", k, 100*front[k], 100*back[k])
			}
		}
	})

	t.Run("one twice as slow", func(t *testing.T) {
		m, v, pipes := fourPipelines(t)
		for _, id := range pipes[0] {
			v.Update(id, func(s *NodeState) { s.Speed = 0.5 })
		}
		front, back := herd(t, r, m, v, pipes, n, true)
		t.Logf("pipeline 0 twice as slow, %d requests: fronts %s; backs %s", n, shares(front), shares(back))
		for k := 1; k < len(pipes); k++ {
			if front[0] > 0.75*front[k] || back[0] > 0.75*back[k] {
				t.Errorf("slow pipeline got %.1f%% / %.1f%%, not clearly below pipeline %d's %.1f%% / %.1f%%",
					100*front[0], 100*back[0], k, 100*front[k], 100*back[k])
			}
			if front[k] > 0.35 || back[k] > 0.35 {
				t.Errorf("pipeline %d got %.1f%% / %.1f%%, more than 35%%", k, 100*front[k], 100*back[k])
			}
		}
	})

	// Entries that route on the same view before the next heartbeat: the
	// seeded pick alone must spread them, where the plain best path would
	// send all of them down one pipeline.
	t.Run("stale view", func(t *testing.T) {
		m, v, pipes := fourPipelines(t)
		front, _ := herd(t, r, m, v, pipes, 2000, false)
		t.Logf("4 equal pipelines, 2000 requests on one unchanging view: fronts %s", shares(front))
		for k := range pipes {
			if front[k] > 0.35 {
				t.Errorf("pipeline %d got %.1f%% on a fixed view", k, 100*front[k])
			}
		}
		best := newRouter(t, WithSlack(0))
		front, _ = herd(t, best, m, v, pipes, 200, false)
		t.Logf("the same with slack 0: fronts %s", shares(front))
		if max(front[0], front[1], front[2], front[3]) != 1 {
			t.Errorf("slack 0 did not herd: %v", front)
		}
	})
}
