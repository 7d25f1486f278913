package sim

import (
	"math"
	"math/rand/v2"
)

// avgOutputLen is the output length Helix's KV expectation assumes.
const avgOutputLen = 240

// maxflowSched is Helix's MaxFlow scheduler: the whole route is fixed at
// prefill, hop by hop, by interleaved weighted round-robin over the
// out-links weighted by their max-flow values, with next hops masked when
// their flow is under 5% of the node's out-flow, the prompt exceeds their
// prefill cap, or their expected KV use would pass the high-water mark.
type maxflowSched struct {
	flow    []float64 // per link, tokens/s
	load    []float64 // per link, IWRR load
	avail   []int64   // per node, expected free KV
	total   []int64
	hwm     float64
	ratio   float64
	offline bool
}

// newMaxflow solves the cluster's flow graph: node capacity is its
// typical token throughput (capped by its NICs), link capacity its
// bandwidth over the bytes a token takes on it.
func newMaxflow(s *Sim, typical []float64, hwm, ratio float64, offline bool) (*maxflowSched, float64) {
	n := len(s.nodes)
	g := newFlowGraph(2*n + 2)
	src, snk := 2*n, 2*n+1
	wire := s.cluster.Model
	act := wire.TokenBytes + wire.ActivationBytes
	for i, nd := range s.nodes {
		c := math.Min(typical[i], math.Min(nd.NICIn/act, nd.NICOut/act))
		g.add(2*i, 2*i+1, c)
	}
	edge := make([]int, len(s.links))
	for i, l := range s.links {
		size, u, v := act, 0, 0
		if l.From == Source {
			size, u = wire.TokenBytes, src
		} else {
			u = 2*l.From + 1
		}
		if l.To == Sink {
			size, v = wire.TokenBytes, snk
		} else {
			v = 2 * l.To
		}
		edge[i] = g.add(u, v, l.Bandwidth/size)
	}
	value := g.solve(src, snk)
	m := &maxflowSched{flow: make([]float64, len(s.links)), load: make([]float64, len(s.links)),
		hwm: hwm, ratio: ratio, offline: offline}
	for i := range s.links {
		m.flow[i] = math.Max(g.flow[edge[i]], 0)
	}
	// Bandwidth a transmission gets: the link's, or the NICs' shares of
	// the flow-weighted bytes on this link, whichever is least.
	outBytes := make(map[int]float64)
	inBytes := make(map[int]float64)
	bytesOf := func(l *link) float64 {
		if l.From == Source || l.To == Sink {
			return wire.TokenBytes
		}
		return act
	}
	for i, l := range s.links {
		outBytes[l.From] += m.flow[i] * bytesOf(l)
		inBytes[l.To] += m.flow[i] * bytesOf(l)
	}
	for i, l := range s.links {
		b := m.flow[i] * bytesOf(l)
		alloc := l.Bandwidth
		if l.From != Source && outBytes[l.From] > 0 && b > 0 {
			alloc = math.Min(alloc, s.nodes[l.From].NICOut*b/outBytes[l.From])
		}
		if l.To != Sink && inBytes[l.To] > 0 && b > 0 {
			alloc = math.Min(alloc, s.nodes[l.To].NICIn*b/inBytes[l.To])
		}
		l.alloc = alloc
	}
	for _, nd := range s.nodes {
		m.avail = append(m.avail, nd.KVCapacity)
		m.total = append(m.total, nd.KVCapacity)
	}
	return m, value
}

func (m *maxflowSched) expected(input int) int64 {
	return int64(float64(input) + avgOutputLen*m.ratio)
}

func (m *maxflowSched) admit(s *Sim, q *query) bool {
	exp := m.expected(q.input)
	cur, done := Source, 0
	var route []int32
	var ran []int16
	for cur != Sink {
		outs := s.outs(cur)
		sum := 0.0
		for _, li := range outs {
			sum += m.flow[li]
		}
		best, bestLoad := int32(-1), math.Inf(1)
		for _, li := range outs {
			f := m.flow[li]
			if f <= 0 || f < 0.05*sum {
				continue
			}
			if to := s.links[li].To; to != Sink {
				nd := s.nodes[to]
				if q.input > nd.Caps.PromptMaxTokens {
					continue
				}
				if m.avail[to]-exp*int64(nd.End-nd.First) < int64((1-m.hwm)*float64(m.total[to])) {
					continue
				}
			}
			if after := m.load[li] + float64(q.input)/f; after < bestLoad {
				best, bestLoad = li, after
			}
		}
		if best < 0 {
			for _, li := range route {
				m.load[li] -= float64(q.input) / m.flow[li]
			}
			return false
		}
		m.load[best] += float64(q.input) / m.flow[best]
		route = append(route, best)
		to := s.links[best].To
		if to == Sink {
			ran = append(ran, 0)
			break
		}
		nd := s.nodes[to]
		k := nd.End - max(nd.First, done)
		ran = append(ran, int16(k))
		done = nd.End
		cur = to
	}
	if done != s.cluster.Model.Layers {
		return false
	}
	for i, li := range route {
		if to := s.links[li].To; to != Sink {
			m.avail[to] -= exp * int64(ran[i])
		}
	}
	q.route, q.ranLayers = route, ran
	return true
}

// decode charges one token to the round-robin load of every link on the
// query's route, as Helix's MaxFlow scheduler does for each decode
// iteration (Helix-ASPLOS25 simulator/scheduler/global_maxflow/
// scheduler_core.py:504-513 → schedule_increment :353-366 →
// interleaved_weighted_round_robin.py:20-30, update_loads with workload
// token_seq_length = 1), so later prompts balance the tokens each link
// carries, decodes included, not only prompt tokens.
func (m *maxflowSched) decode(_ *Sim, q *query) {
	for _, li := range q.route {
		m.load[li] += 1 / m.flow[li]
	}
}

func (m *maxflowSched) hop(*Sim, *query, int) (int32, bool) { return -1, false }
func (m *maxflowSched) observe(*Sim, *iter, int)            {}

func (m *maxflowSched) finish(s *Sim, q *query) {
	exp := m.expected(q.input)
	for i, li := range q.route {
		if to := s.links[li].To; to != Sink {
			m.avail[to] += exp * int64(q.ranLayers[i])
		}
	}
}

// bottleneck is the most used layer's expected KV share, what Helix's
// offline feeder compares with its feed high-water mark.
func (m *maxflowSched) bottleneck(s *Sim) float64 {
	L := s.cluster.Model.Layers
	free := make([]float64, L)
	tot := make([]float64, L)
	for i, nd := range s.nodes {
		k := float64(nd.End - nd.First)
		for l := nd.First; l < nd.End; l++ {
			free[l] += float64(m.avail[i]) / k
			tot[l] += float64(m.total[i]) / k
		}
	}
	worst := 0.0
	for l := range free {
		if tot[l] > 0 {
			worst = math.Max(worst, 1-free[l]/tot[l])
		}
	}
	return worst
}

// swarmSched is SWARM's routing as Helix simulates it (SWARM Parallelism,
// Appendix C): each node keeps, per out-link, an exponential moving
// average of the time a request took from leaving it to leaving the next
// node, and picks the link with the least accumulated priority, adding
// that link's average to it.
type swarmSched struct {
	prio, ema []float64 // per link
	smooth    float64
}

func newSwarm(s *Sim) *swarmSched {
	w := &swarmSched{prio: make([]float64, len(s.links)), ema: make([]float64, len(s.links)), smooth: 0.8}
	for i := range s.links {
		w.prio[i], w.ema[i] = 0.05, 0.05
	}
	for _, l := range s.links {
		// Helix shares a node's NIC evenly among its out-links.
		if l.From != Source {
			l.alloc = math.Min(l.Bandwidth, s.nodes[l.From].NICOut/float64(len(s.nodes[l.From].outs)))
		}
	}
	return w
}

func (w *swarmSched) admit(*Sim, *query) bool { return true }

func (w *swarmSched) hop(s *Sim, q *query, from int) (int32, bool) {
	best := int32(-1)
	for _, li := range s.outs(from) {
		if best < 0 || w.prio[li] < w.prio[best] {
			best = li
		}
	}
	if best < 0 {
		return -1, false
	}
	w.prio[best] += w.ema[best]
	return best, true
}

func (w *swarmSched) observe(s *Sim, it *iter, from int) {
	li := it.q.route[it.hop-1]
	w.ema[li] = w.smooth*(s.now-it.sentAt) + (1-w.smooth)*w.ema[li]
}

func (w *swarmSched) finish(*Sim, *query) {}

// randomSched picks a uniformly random out-link at every hop (Helix's
// "random" scheduler, used for the separate-pipeline baselines).
type randomSched struct{ rng *rand.Rand }

func (r *randomSched) admit(*Sim, *query) bool { return true }
func (r *randomSched) hop(s *Sim, q *query, from int) (int32, bool) {
	outs := s.outs(from)
	if len(outs) == 0 {
		return -1, false
	}
	return outs[r.rng.IntN(len(outs))], true
}
func (r *randomSched) observe(*Sim, *iter, int) {}
func (r *randomSched) finish(*Sim, *query)      {}
