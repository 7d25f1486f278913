package sim

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
)

// machines is what the swarm is made of, fixed for the run: every
// machine's planner view, layer timer, batch caps and KV tables, and
// the network model between them.
type machines struct {
	spec   SwarmSpec
	model  layers.ModelSpec
	pnodes []layers.Node // planner view of every machine
	prof   []LayerTimer
	gpu    []string
	maxL   []int
	kvTab  map[string][]int64
	capTab map[string][]Caps
	idx    map[string]int
	all    *layers.Fleet // every machine, for per-node rates
}

// newMachines reads spec's machines (Helix's profiles, a modelled or a
// synthetic model) and gives the engine's cluster of them.
func newMachines(spec SwarmSpec) (*machines, Cluster, error) {
	m := &machines{spec: spec, idx: map[string]int{}, kvTab: map[string][]int64{}, capTab: map[string][]Caps{}}
	c, err := m.build()
	if err != nil {
		return nil, Cluster{}, err
	}
	all := make([]int, len(spec.Nodes))
	for i := range all {
		all[i] = i
	}
	if m.all, err = m.fleet(all); err != nil {
		return nil, Cluster{}, err
	}
	return m, c, nil
}

func (m *machines) layerBytes() float64 { return m.model.LayerWeightBytes() }

// build makes the planner's and the engine's view of every machine,
// from Helix's profiles or from a synthetic model.
func (m *machines) build() (Cluster, error) {
	spec := m.spec
	var (
		wire  ModelWire
		maxL  map[string]int
		timer LayerTimer
		err   error
	)
	if sm := spec.Synthetic; sm != nil {
		if err := sm.validate(); err != nil {
			return Cluster{}, err
		}
		if m.model, err = sm.spec(); err != nil {
			return Cluster{}, err
		}
		wire, timer = sm.wire(), sm.timer()
		m.capTab["cpu"], m.kvTab["cpu"] = []Caps{sm.caps()}, []int64{1 << 40}
	} else if mm := spec.Modelled; mm != nil {
		if err := mm.validate(); err != nil {
			return Cluster{}, err
		}
		if m.model, err = mm.spec(); err != nil {
			return Cluster{}, err
		}
		wire = mm.wire(m.model)
	} else {
		if m.model, err = plannerModel(spec.Model); err != nil {
			return Cluster{}, err
		}
		if wire, err = modelWire(spec.Dir, spec.Model); err != nil {
			return Cluster{}, err
		}
		if maxL, err = maxLayers(spec.Dir, spec.Model); err != nil {
			return Cluster{}, err
		}
	}
	profiles := map[string]Profile{}
	c := Cluster{Model: wire}
	for i, n := range spec.Nodes {
		gpu := strings.ToLower(n.GPU)
		var (
			t  LayerTimer
			h  layers.Hardware
			ml int
		)
		if spec.Synthetic != nil {
			if gpu != "cpu" || n.MaxLayers <= 0 {
				return Cluster{}, fmt.Errorf("%w: node %q of a synthetic model needs gpu cpu and max_layers", ErrScenario, n.ID)
			}
			t, h, ml = timer, cpuHardware, min(n.MaxLayers, m.model.Layers)
		} else if mm := spec.Modelled; mm != nil {
			if h, ml, err = modelledMachine(m.model, gpu, m.uplink(i)); err != nil {
				return Cluster{}, fmt.Errorf("node %q: %w", n.ID, err)
			}
			if _, ok := m.capTab[gpu]; !ok {
				m.capTab[gpu], m.kvTab[gpu] = mm.tables(m.model, h, ml)
			}
			t = newRooflineTimer(m.model, h, mm.context())
			if n.MaxLayers > 0 {
				ml = min(ml, n.MaxLayers)
			}
		} else {
			p, ok := profiles[gpu]
			if !ok {
				if p, err = LoadProfile(spec.Dir, spec.Model, gpu); err != nil {
					return Cluster{}, err
				}
				profiles[gpu] = p
				if err := m.loadTables(gpu); err != nil {
					return Cluster{}, err
				}
			}
			if h, err = helixHardware(gpu); err != nil {
				return Cluster{}, err
			}
			t, ml = p, maxL[gpu]
			if n.MaxLayers > 0 {
				ml = min(ml, n.MaxLayers)
			}
		}
		if ml == 0 {
			return Cluster{}, fmt.Errorf("%w: no layer cap for %q", ErrBadData, n.GPU)
		}
		m.pnodes = append(m.pnodes, layers.Node{ID: n.ID, Hardware: h, Region: n.Region, MaxLayers: ml})
		m.prof = append(m.prof, t)
		m.gpu = append(m.gpu, gpu)
		m.maxL = append(m.maxL, ml)
		if _, dup := m.idx[n.ID]; dup {
			return Cluster{}, fmt.Errorf("%w: node %q twice", ErrScenario, n.ID)
		}
		m.idx[n.ID] = i
		c.Nodes = append(c.Nodes, NodeSpec{Name: n.ID, GPU: n.GPU, First: 0, End: 1, Timer: t,
			Caps: m.capTab[gpu][0], KVCapacity: m.kvTab[gpu][0], NICIn: 1e10, NICOut: 1e10})
	}
	return c, nil
}

func (m *machines) loadTables(gpu string) error {
	path := filepath.Join(m.spec.Dir, "profiles", m.spec.Model, gpu, "settings.csv")
	rows, err := readCSV(path)
	if err != nil {
		return err
	}
	for k := 1; k <= len(rows); k++ {
		c, err := LoadCaps(m.spec.Dir, m.spec.Model, gpu, k)
		if err != nil {
			return err
		}
		kv, err := kvCapacity(m.spec.Dir, m.spec.Model, gpu, k)
		if err != nil {
			return err
		}
		m.capTab[gpu] = append(m.capTab[gpu], c)
		m.kvTab[gpu] = append(m.kvTab[gpu], kv)
	}
	return nil
}

// uplink is the bandwidth of node i's own links in its region (a relayed
// node's, through its relay): what the planner is told its link carries.
func (m *machines) uplink(i int) float64 {
	net := m.spec.Net
	cls := net.InRegion
	if m.spec.Nodes[i].Relayed {
		cls = worse(cls, net.Relay)
	}
	return cls.Bandwidth
}

// link is the network model: entry links, relays, regions.
func (m *machines) link(from, to int) LinkSpec {
	net := m.spec.Net
	cls := net.InRegion
	switch {
	case from == Source || to == Sink:
		cls = net.Entry
		n := max(from, to)
		if m.spec.Nodes[n].Relayed {
			cls = worse(cls, net.Relay)
		}
		return linkOf(cls)
	case m.spec.Nodes[from].Region != m.spec.Nodes[to].Region:
		cls = net.CrossRegion
	}
	if m.spec.Nodes[from].Relayed || m.spec.Nodes[to].Relayed {
		cls = worse(cls, net.Relay)
	}
	return linkOf(cls)
}

// planSessionTokens is the session length the swarm's founder gives
// Strata's planner (false: none). With KVObjective, Strata's leader caps
// each node by the sessions its KV memory holds at the requests' mean
// length, through the replicated state as a real swarm's does
// (strata node --plan-session-tokens); the baselines keep the plain
// cost model their policies describe.
func planSessionTokens(spec SwarmSpec, policy string) (int, bool) {
	if policy != "strata" || !spec.KVObjective {
		return 0, false
	}
	n := meanSessionTokens(spec.Requests)
	return min(n, consensus.MaxSessionTokens), n > 0
}

// fleet is the planner's view of the given machines.
func (m *machines) fleet(members []int) (*layers.Fleet, error) {
	if m.all == nil {
		ns := make([]layers.Node, 0, len(members))
		for _, i := range members {
			ns = append(ns, m.pnodes[i])
		}
		return layers.NewFleet(m.model, ns, layers.DefaultCostParams())
	}
	ids := make([]string, 0, len(members))
	for _, i := range members {
		ids = append(ids, m.pnodes[i].ID)
	}
	return m.all.Subset(ids)
}

func (m *machines) caps(i int) consensus.Capabilities {
	n := m.pnodes[i]
	return consensus.Capabilities{Hardware: n.Hardware, Region: n.Region, MaxLayers: n.MaxLayers, Relayed: m.spec.Nodes[i].Relayed}
}

func worse(a, b LinkClass) LinkClass {
	if b.Bandwidth > 0 && (a.Bandwidth == 0 || b.Bandwidth < a.Bandwidth) {
		a.Bandwidth = b.Bandwidth
	}
	a.LatencyMS += b.LatencyMS
	a.JitterMS = math.Max(a.JitterMS, b.JitterMS)
	return a
}

func linkOf(c LinkClass) LinkSpec {
	bw := c.Bandwidth
	if bw <= 0 {
		bw = 1e9
	}
	return LinkSpec{Bandwidth: bw, Latency: c.LatencyMS / 1e3, Jitter: c.JitterMS / 1e3}
}

// meanSessionTokens is the requests' mean prompt plus output (0: none).
func meanSessionTokens(rs []Request) int {
	if len(rs) == 0 {
		return 0
	}
	sum := 0.0
	for _, r := range rs {
		sum += float64(r.Input + r.Output)
	}
	return int(math.Round(sum / float64(len(rs))))
}
