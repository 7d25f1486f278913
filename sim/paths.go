package sim

import (
	"math"
	"time"

	"github.com/stratanet/strata/layers"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// paths is how the policy routes a request through the serving nodes:
// Strata's router over the entry's view of the nodes' loads, Petals'
// least-latency path, Parallax's pipelines. It is the engine's
// scheduler: it fixes a query's whole route when the query starts.
type paths struct {
	w      *world
	router *routing.Router
	view   *routing.View
	pathOK bool
	path   []routing.Hop // petals' min-latency path, recomputed on change
	pipes  [][]routing.Hop
	rr     int
	banned []float64 // petals clients avoid a node until this time
}

// refreshView is a heartbeat: every serving node's load as the entry sees
// it, the figures a real node sends (node/status.go).
func (pa *paths) refreshView() {
	now := pa.w.epoch.Add(time.Duration(pa.w.s.now * float64(time.Second)))
	for i, n := range pa.w.s.nodes {
		id := pa.w.spec.Nodes[i].ID
		if !pa.w.ro.serving[i] {
			pa.view.Remove(id)
			continue
		}
		k := max(n.held, 1)
		free := int((n.KVCapacity - n.kvUsed) / int64(k))
		pa.view.Set(routing.NodeState{
			ID: id, Health: routing.Alive, Region: pa.w.spec.Nodes[i].Region, Relayed: pa.w.spec.Nodes[i].Relayed,
			Hardware: pa.w.m.pnodes[i].Hardware, QueueDepth: len(n.wait), ActiveSessions: n.active,
			FreeKV: free, LayerLatency: n.lat, Updated: now,
		})
		if pa.w.eq != nil {
			pa.w.eq.report(i, kvRep{free: free, sessions: n.active + len(n.wait)})
		}
	}
	if pa.w.eq != nil {
		pa.w.eq.beat++
		pa.w.eq.poke()
	}
}

// admit: paths is the engine's scheduler; it routes whole paths at admission.
func (pa *paths) admit(s *Sim, q *query) bool {
	hops, ok := pa.route(q)
	if !ok {
		return false
	}
	pa.setRoute(q, hops)
	return true
}

// setRoute lays q's route along hops.
func (pa *paths) setRoute(q *query, hops []routing.Hop) {
	s := pa.w.s
	prev := Source
	for _, h := range hops {
		j := pa.w.m.idx[h.Node]
		li, _ := s.linkTo(prev, j)
		q.route = append(q.route, li)
		q.ranLayers = append(q.ranLayers, 0)
		q.hopEnd = append(q.hopEnd, int16(h.To))
		q.hopFrom = append(q.hopFrom, int16(h.From))
		prev = j
	}
	li, _ := s.linkTo(prev, Sink)
	q.route = append(q.route, li)
	q.ranLayers = append(q.ranLayers, 0)
	q.hopEnd = append(q.hopEnd, 0)
	q.hopFrom = append(q.hopFrom, 0)
}

// route is the policy's path for q: Strata's avoids q's given-up hops,
// or where that finds none, as the entry's reroute does, only the hops
// it can never fit.
func (pa *paths) route(q *query) ([]routing.Hop, bool) {
	if pa.w.policy != "strata" {
		return pa.routeAvoid(q, q.avoid)
	}
	hops, err := ecore.Route(ecore.Replay{Avoid: q.avoid, Hard: q.hard}, func(avoid []string) ([]routing.Hop, error) {
		if hops, ok := pa.routeAvoid(q, avoid); ok {
			return hops, nil
		}
		return nil, routing.ErrNoPath
	})
	return hops, err == nil
}

// routeAvoid is the policy's path for q around the avoided nodes (false:
// none, or the layers are not all served).
func (pa *paths) routeAvoid(q *query, avoid []string) ([]routing.Hop, bool) {
	m := pa.w.ro.servingMap()
	if !pa.w.ro.covered {
		return nil, false
	}
	switch pa.w.policy {
	case "strata":
		now := pa.w.epoch.Add(time.Duration(pa.w.s.now * float64(time.Second)))
		req := routing.Request{PromptTokens: q.input, MaxTokens: q.output, Seed: uint64(q.id), Avoid: avoid}
		p, err := pa.router.Route(m, pa.view, req, now)
		if err != nil {
			return nil, false
		}
		return p.Hops, true
	case "petals":
		if !pa.pathOK {
			pa.path = pa.minLatencyPath()
			pa.pathOK = true
		}
		return pa.path, pa.path != nil
	case "parallax":
		if pa.pipes == nil {
			pa.pipes = pa.pipelines()
		}
		if len(pa.pipes) == 0 {
			return nil, false
		}
		pa.rr++
		return pa.pipes[pa.rr%len(pa.pipes)], true
	}
	return nil, false
}

// minLatencyPath is Petals' client routing: least single-token latency
// over spans (moving on only at a span's end), ignoring load; servers a
// client saw fail are avoided while banned.
func (pa *paths) minLatencyPath() []routing.Hop {
	L := pa.w.m.model.Layers
	dist := make([]float64, L+1)
	prev := make([]routing.Hop, L+1)
	for i := range dist {
		dist[i] = math.Inf(1)
	}
	dist[0] = 0
	type span struct {
		i    int
		r    layers.Range
		cost float64
		lat  float64
	}
	var spans []span
	for i, sv := range pa.w.ro.serving {
		if !sv || pa.banned[i] > pa.w.s.now {
			continue
		}
		spans = append(spans, span{i, pa.w.ro.rng[i], pa.w.m.prof[i].LayerTime(0, 1), pa.w.m.link(Source, i).Latency})
	}
	for l := 0; l < L; l++ {
		if math.IsInf(dist[l], 1) {
			continue
		}
		for _, sp := range spans {
			if sp.r.Start <= l && l < sp.r.End {
				d := dist[l] + sp.lat + float64(sp.r.End-l)*sp.cost
				if d < dist[sp.r.End] {
					dist[sp.r.End] = d
					prev[sp.r.End] = routing.Hop{Node: pa.w.spec.Nodes[sp.i].ID, From: l, To: sp.r.End}
				}
			}
		}
	}
	if math.IsInf(dist[L], 1) {
		return nil
	}
	var hops []routing.Hop
	for l := L; l > 0; l = prev[l].From {
		hops = append([]routing.Hop{prev[l]}, hops...)
	}
	return hops
}

// pipelines are Parallax's disjoint pipelines: chains of serving nodes
// whose ranges meet exactly, from layer 0 to the last.
func (pa *paths) pipelines() [][]routing.Hop {
	byStart := map[int][]int{}
	for i, sv := range pa.w.ro.serving {
		if sv {
			byStart[pa.w.ro.rng[i].Start] = append(byStart[pa.w.ro.rng[i].Start], i)
		}
	}
	used := make([]bool, len(pa.w.ro.serving))
	var out [][]routing.Hop
	for _, head := range byStart[0] {
		var p []routing.Hop
		at, cur := 0, head
		for {
			used[cur] = true
			r := pa.w.ro.rng[cur]
			p = append(p, routing.Hop{Node: pa.w.spec.Nodes[cur].ID, From: at, To: r.End})
			at = r.End
			if at == pa.w.m.model.Layers {
				out = append(out, p)
				break
			}
			next := -1
			for _, j := range byStart[at] {
				if !used[j] {
					next = j
					break
				}
			}
			if next < 0 {
				break
			}
			cur = next
		}
	}
	return out
}

// The rest of the scheduler: a route is whole from admission, so there
// is no next hop to pick, nothing to observe and nothing to release.
func (pa *paths) hop(*Sim, *query, int) (int32, bool) { return -1, false }
func (pa *paths) observe(*Sim, *iter, int)            {}
func (pa *paths) finish(*Sim, *query)                 {}
