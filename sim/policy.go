package sim

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/layers/baseline"
)

// Policies is what Compare can run on a Helix cluster.
var Policies = []string{"strata", "petals", "parallax"}

// llama2_70b for the planner: LLaMA-2 70B's hyper-parameters (Helix's
// profiles are for this model).
func plannerModel(model string) (layers.ModelSpec, error) {
	switch model {
	case "llama2_70b":
		return layers.NewModelSpec(layers.HyperParams{Name: "llama-2-70b", Layers: 80, Hidden: 8192, Heads: 64,
			KVHeads: 8, FFN: 28672, Vocab: 32000, BytesPerParam: 2})
	case "llama1_30b":
		return layers.NewModelSpec(layers.HyperParams{Name: "llama-30b", Layers: 60, Hidden: 6656, Heads: 52,
			KVHeads: 52, FFN: 17920, Vocab: 32000, BytesPerParam: 2})
	}
	return layers.ModelSpec{}, fmt.Errorf("%w: no planner model for %q", ErrBadData, model)
}

// helixHardware gives the planner Helix's machine types from their
// datasheets (multi-GPU machines add up).
func helixHardware(gpu string) (layers.Hardware, error) {
	const GB, GiB = 1e9, 1 << 30
	base := map[string]layers.Hardware{
		"a100": {Name: "a100-40g", MemoryBytes: 40 * GiB, MemBandwidth: 1555 * GB, TFLOPS: 312},
		"l4":   {Name: "l4", MemoryBytes: 24 * GiB, MemBandwidth: 300 * GB, TFLOPS: 121},
		"t4":   {Name: "t4", MemoryBytes: 16 * GiB, MemBandwidth: 320 * GB, TFLOPS: 65},
		"v100": {Name: "v100", MemoryBytes: 16 * GiB, MemBandwidth: 900 * GB, TFLOPS: 125},
	}
	name, n := strings.ToLower(gpu), 1.0
	if b, x, ok := strings.Cut(name, "x"); ok {
		k, err := strconv.Atoi(x)
		if err != nil {
			return layers.Hardware{}, fmt.Errorf("%w: gpu %q", ErrBadData, gpu)
		}
		name, n = b, float64(k)
	}
	h, ok := base[name]
	if !ok {
		return layers.Hardware{}, fmt.Errorf("%w: gpu %q", ErrBadData, gpu)
	}
	h.Name = strings.ToLower(gpu)
	h.MemoryBytes *= n
	h.MemBandwidth *= n
	h.TFLOPS *= n
	h.NetBandwidth = 1e9
	return h, nil
}

// helixNodes reads a Helix cluster's machines.
type helixNode struct {
	id, gpu string
	nicIn   float64
	nicOut  float64
}

func loadHelixNodes(dir, setup, model string) ([]helixNode, map[[2]string]LinkSpec, map[string]int, error) {
	path := filepath.Join(dir, "clusters", setup, "nodes.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, nil, nil, err
	}
	var nodes []helixNode
	for _, r := range rows {
		in, err := num(r, "nic_in_bytes_per_s", path)
		if err != nil {
			return nil, nil, nil, err
		}
		out, err := num(r, "nic_out_bytes_per_s", path)
		if err != nil {
			return nil, nil, nil, err
		}
		nodes = append(nodes, helixNode{id: r["node_id"], gpu: r["gpu"], nicIn: in, nicOut: out})
	}
	lpath := filepath.Join(dir, "clusters", setup, "links.csv")
	lrows, err := readCSV(lpath)
	if err != nil {
		return nil, nil, nil, err
	}
	links := map[[2]string]LinkSpec{}
	for _, r := range lrows {
		bw, err := num(r, "bandwidth_bytes_per_s", lpath)
		if err != nil {
			return nil, nil, nil, err
		}
		lat, err := num(r, "latency_s", lpath)
		if err != nil {
			return nil, nil, nil, err
		}
		l := LinkSpec{Bandwidth: bw, Latency: lat}
		links[[2]string{r["a"], r["b"]}] = l
		links[[2]string{r["b"], r["a"]}] = l
	}
	gpath := filepath.Join(dir, "profiles", "gpus.csv")
	grows, err := readCSV(gpath)
	if err != nil {
		return nil, nil, nil, err
	}
	maxLayers := map[string]int{}
	for _, r := range grows {
		if r["model"] == model {
			v, err := num(r, "max_num_layers", gpath)
			if err != nil {
				return nil, nil, nil, err
			}
			maxLayers[r["machine_type"]] = int(v)
		}
	}
	return nodes, links, maxLayers, nil
}

// PlanHelix places a Helix cluster's machines with one of our policies
// and returns the map. Every policy sees Helix's per-machine layer caps.
func PlanHelix(ctx context.Context, dir, setup, model, policy string) (layers.LayerMap, error) {
	m, err := plannerModel(model)
	if err != nil {
		return layers.LayerMap{}, err
	}
	hn, _, maxL, err := loadHelixNodes(dir, setup, model)
	if err != nil {
		return layers.LayerMap{}, err
	}
	var nodes []layers.Node
	for _, n := range hn {
		h, err := helixHardware(n.gpu)
		if err != nil {
			return layers.LayerMap{}, err
		}
		nodes = append(nodes, layers.Node{ID: n.id, Hardware: h, MaxLayers: maxL[n.gpu]})
	}
	f, err := layers.NewFleet(m, nodes, layers.DefaultCostParams())
	if err != nil {
		return layers.LayerMap{}, err
	}
	switch policy {
	case "strata":
		p, err := layers.NewPlanner().Full(f, 1)
		return p.Map, err
	case "petals":
		return baseline.NewPetals().Plan(ctx, f)
	case "parallax":
		return baseline.NewParallax().Plan(ctx, f)
	}
	return layers.LayerMap{}, fmt.Errorf("%w: policy %q (known: %s)", ErrScenario, policy, strings.Join(Policies, ", "))
}

// clusterOfMap builds the simulated cluster of a layer map on a Helix
// cluster: Helix's profiles, caps and KV capacity for each node's layer
// count, and a link wherever one node's range can follow another's.
func clusterOfMap(dir, setup, model, machines string, lm layers.LayerMap) (Cluster, []float64, error) {
	wire, err := modelWire(dir, model)
	if err != nil {
		return Cluster{}, nil, err
	}
	hn, links, _, err := loadHelixNodes(dir, setup, model)
	if err != nil {
		return Cluster{}, nil, err
	}
	byID := map[string]helixNode{}
	for _, n := range hn {
		byID[n.id] = n
	}
	typ, err := readCSV(filepath.Join(dir, "profiles", "typical_throughput.csv"))
	if err != nil {
		return Cluster{}, nil, err
	}
	c := Cluster{Model: wire}
	var typical []float64
	for _, st := range lm.Stages {
		n := byID[st.Node]
		gpu := strings.ToLower(n.gpu)
		p, err := LoadProfile(dir, model, gpu)
		if err != nil {
			return Cluster{}, nil, err
		}
		k := st.Len()
		caps, err := LoadCaps(dir, model, gpu, k)
		if err != nil {
			return Cluster{}, nil, err
		}
		kv, err := kvCapacity(dir, model, gpu, k)
		if err != nil {
			return Cluster{}, nil, err
		}
		c.Nodes = append(c.Nodes, NodeSpec{Name: st.Node, GPU: n.gpu, First: st.Start, End: st.End, Timer: p, Caps: caps,
			KVCapacity: kv, NICIn: n.nicIn, NICOut: n.nicOut})
		t := 0.0
		for _, tr := range typ {
			if tr["model"] == model && tr["machine_num_dict"] == machines && tr["gpu"] == n.gpu && tr["num_layers_on_node"] == strconv.Itoa(k) {
				t, _ = strconv.ParseFloat(tr["typical_tokens_per_s"], 64)
			}
		}
		typical = append(typical, t)
	}
	L := wire.Layers
	for i, a := range c.Nodes {
		if a.First == 0 {
			l := links[[2]string{"source", byID[a.Name].id}]
			c.Links = append(c.Links, LinkSpec{From: Source, To: i, Bandwidth: l.Bandwidth, Latency: l.Latency})
		}
		for j, b := range c.Nodes {
			if i != j && b.First <= a.End && a.End < b.End {
				l := links[[2]string{a.Name, b.Name}]
				c.Links = append(c.Links, LinkSpec{From: i, To: j, Bandwidth: l.Bandwidth, Latency: l.Latency})
			}
		}
		if a.End == L {
			l := links[[2]string{"sink", a.Name}]
			c.Links = append(c.Links, LinkSpec{From: i, To: Sink, Bandwidth: l.Bandwidth, Latency: l.Latency})
		}
	}
	return c, typical, c.Validate()
}

func kvCapacity(dir, model, gpu string, k int) (int64, error) {
	path := filepath.Join(dir, "profiles", model, gpu, "settings.csv")
	rows, err := readCSV(path)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, fmt.Errorf("%w: %s: no rows", ErrBadData, path)
	}
	row := rows[len(rows)-1]
	for _, r := range rows {
		if r["num_layers_on_node"] == strconv.Itoa(k) {
			row = r
		}
	}
	v, err := num(row, "kv_cache_capacity_token_layers", path)
	return int64(v), err
}

// fixedPathSched is Petals' routing as the issue describes it: every
// client takes the path of least latency for one token (link latency plus
// the layers' single-token time), whatever the servers' load.
type fixedPathSched struct{ route []int32 }

func newFixedPath(s *Sim) (*fixedPathSched, error) {
	// Shortest path in the DAG of links (node ranges strictly advance).
	n := len(s.nodes)
	dist := make([]float64, n)
	prev := make([]int32, n)
	for i := range dist {
		dist[i], prev[i] = math.Inf(1), -1
	}
	cost := func(i int, from int) float64 {
		nd := s.nodes[i]
		k := nd.End - max(nd.First, from)
		return float64(k) * nd.Timer.LayerTime(0, 1)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	// Relax in order of range end: every link goes to a node ending later.
	for changed := true; changed; {
		changed = false
		for _, li := range s.srcOuts {
			l := s.links[li]
			if d := l.Latency + cost(l.To, 0); d < dist[l.To] {
				dist[l.To], prev[l.To], changed = d, li, true
			}
		}
		for i := range s.nodes {
			if math.IsInf(dist[i], 1) {
				continue
			}
			for _, li := range s.nodes[i].outs {
				l := s.links[li]
				if l.To == Sink {
					continue
				}
				if d := dist[i] + l.Latency + cost(l.To, s.nodes[i].End); d < dist[l.To]-1e-12 {
					dist[l.To], prev[l.To], changed = d, li, true
				}
			}
		}
	}
	best, bestD := int32(-1), math.Inf(1)
	for i, nd := range s.nodes {
		for _, li := range nd.outs {
			if s.links[li].To == Sink && dist[i]+s.links[li].Latency < bestD {
				best, bestD = li, dist[i]+s.links[li].Latency
			}
		}
	}
	if best < 0 {
		return nil, fmt.Errorf("%w: no path covers the model", ErrBadCluster)
	}
	route := []int32{best}
	for at := s.links[best].From; at != Source; {
		li := prev[at]
		route = append([]int32{li}, route...)
		at = s.links[li].From
	}
	return &fixedPathSched{route: route}, nil
}

func (p *fixedPathSched) admit(s *Sim, q *query) bool {
	q.route = append([]int32(nil), p.route...)
	q.ranLayers = make([]int16, len(p.route))
	return true
}
func (p *fixedPathSched) hop(*Sim, *query, int) (int32, bool) { return -1, false }
func (p *fixedPathSched) observe(*Sim, *iter, int)            {}
func (p *fixedPathSched) finish(*Sim, *query)                 {}

// roundRobinSched is Parallax's request routing as the issue describes it:
// round-robin, here at every hop over the next stage's servers.
type roundRobinSched struct{ next map[int]int }

func (r *roundRobinSched) admit(*Sim, *query) bool { return true }
func (r *roundRobinSched) hop(s *Sim, q *query, from int) (int32, bool) {
	outs := s.outs(from)
	if len(outs) == 0 {
		return -1, false
	}
	i := r.next[from] % len(outs)
	r.next[from]++
	return outs[i], true
}
func (r *roundRobinSched) observe(*Sim, *iter, int) {}
func (r *roundRobinSched) finish(*Sim, *query)      {}

// ComparePolicy places a Helix cluster with policy and serves Helix's
// online stream at rate tokens/s for measure seconds.
func ComparePolicy(ctx context.Context, dir, setup, model, machines, policy string, rate, measure float64) (Result, layers.LayerMap, error) {
	lm, err := PlanHelix(ctx, dir, setup, model, policy)
	if err != nil {
		return Result{}, lm, err
	}
	c, typical, err := clusterOfMap(dir, setup, model, machines, lm)
	if err != nil {
		return Result{}, lm, err
	}
	s, err := newSim(c, nil, Window{0, measure})
	if err != nil {
		return Result{}, lm, err
	}
	s.stats.series.bin = 30
	switch policy {
	case "strata":
		mf, _ := newMaxflow(s, typical, 0.9, 0.6, false)
		s.sched = mf
	case "petals":
		fp, err := newFixedPath(s)
		if err != nil {
			return Result{}, lm, err
		}
		s.sched = fp
	case "parallax":
		s.sched = &roundRobinSched{next: map[int]int{}}
	}
	stream, err := LoadHelixStream(dir, rate)
	if err != nil {
		return Result{}, lm, err
	}
	for _, r := range stream {
		if r.At > measure {
			break
		}
		s.schedule(&event{at: r.At, kind: evArrive, q: &query{input: r.Input, output: r.Output}})
	}
	s.run(measure)
	return s.result(), lm, nil
}
