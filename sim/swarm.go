package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/layers/baseline"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/routing"
)

// SwarmNode is one machine of a swarm scenario.
type SwarmNode struct {
	ID  string
	GPU string // a Helix machine type: a100, l4, t4, v100, l4x2, t4x2, t4x4 (cpu: synthetic)
	// MaxLayers caps the machine's range (synthetic models; Helix's
	// machines take theirs from gpus.csv).
	MaxLayers int
	Region    string
	Relayed   bool
	// JoinAt is when the machine first starts (0: at the start, placed by
	// the initial plan); later machines join through the policy's join.
	JoinAt float64
}

// LinkClass is the network between two kinds of endpoint.
type LinkClass struct {
	Bandwidth float64 `yaml:"bandwidth_bytes_per_s"`
	LatencyMS float64 `yaml:"latency_ms"`
	JitterMS  float64 `yaml:"jitter_ms"`
}

// Network gives every pair of endpoints a link class.
type Network struct {
	InRegion    LinkClass `yaml:"in_region"`
	CrossRegion LinkClass `yaml:"cross_region"`
	// Relay applies to any link that touches a relayed node.
	Relay LinkClass `yaml:"relay"`
	// Entry is the link between the clients' entry and any node.
	Entry LinkClass `yaml:"entry"`
}

// Timing holds the detection and loading figures the policies react with.
type Timing struct {
	// HeartbeatS and DeadAfterS are Strata's (swarm.DefaultHeartbeatInterval
	// and its default dead-after of 4 heartbeats).
	HeartbeatS float64 `yaml:"heartbeat_s"`
	DeadAfterS float64 `yaml:"dead_after_s"`
	// DiskBytesPerS is the rate a node loads layer weights at.
	DiskBytesPerS float64 `yaml:"disk_bytes_per_s"`
	// RebalanceS is how often Strata's leader considers a rebalance (0: never).
	RebalanceS float64 `yaml:"rebalance_s"`
	// ClientTimeoutS is how long a client keeps retrying a request that
	// finds no route before it gives up.
	ClientTimeoutS float64 `yaml:"client_timeout_s"`
	// EntrySetupMS is the entry's time to start an attempt before its
	// prefill leaves: the API call, tokenizing, routing, opening the
	// hops' sessions (what the testnet's TTFT holds beyond the path).
	EntrySetupMS float64 `yaml:"entry_setup_ms"`
}

func (t Timing) withDefaults() Timing {
	if t.HeartbeatS <= 0 {
		t.HeartbeatS = 0.5
	}
	if t.DeadAfterS <= 0 {
		t.DeadAfterS = 4 * t.HeartbeatS
	}
	if t.DiskBytesPerS <= 0 {
		t.DiskBytesPerS = 1e9
	}
	if t.ClientTimeoutS <= 0 {
		t.ClientTimeoutS = 120
	}
	return t
}

// Churn is the machines' availability.
type Churn struct {
	// MedianSessionS > 0 draws every machine's up-times from a lognormal
	// with this median and shape Sigma (heavy-tailed), and its down-times
	// from an exponential of mean MeanDowntimeS.
	MedianSessionS float64 `yaml:"median_session_s"`
	Sigma          float64 `yaml:"sigma"`
	MeanDowntimeS  float64 `yaml:"mean_downtime_s"`
	// StartS is when the drawn sessions start: a swarm that formed (its
	// first map committed) before the churn began.
	StartS float64          `yaml:"start_s"`
	Script []ScriptedChange `yaml:"script"`
}

// ScriptedChange kills or starts a machine at a given time.
type ScriptedChange struct {
	AtS  float64 `yaml:"at_s"`
	Kill string  `yaml:"kill"`
	Join string  `yaml:"join"`
}

// SwarmSpec is everything a swarm run needs.
type SwarmSpec struct {
	Dir   string // Helix reference data (profiles)
	Model string // llama2_70b or llama1_30b
	// Synthetic, when set, replaces Dir and Model: a testnet-like model
	// with a fixed layer time.
	Synthetic *SyntheticModel
	// Modelled, when set, replaces Model: a layers built-in model whose
	// layer times come from the cost model (ModelledModel).
	Modelled *ModelledModel
	// Clients, when positive, caps the requests in flight: an arrival
	// waits for a free client, as the testnet's load does.
	Clients  int
	Nodes    []SwarmNode
	Net      Network
	Timing   Timing
	Churn    Churn
	Requests []Request // arrivals, sorted
	Duration float64   // of the workload, from StartS
	WarmUpS  float64   // measurement starts at StartS + WarmUpS
	// StartS is when requests start (arrival times are offsets from it),
	// so that the initial loads are done, as Helix starts its runs.
	StartS float64
	Seed   uint64
	// KVObjective: Strata plans with the KV cap at the requests' mean
	// length (Scenario.KVObjective).
	KVObjective bool
	// Now, when set, times the run on the wall clock (events/s); the
	// simulation itself never reads a clock.
	Now func() time.Time
	// ParallaxMaxStates bounds the Parallax allocator's search
	// (baseline.ParallaxMaxStates; 0: its default), so that a test can
	// reach its state budget quickly.
	ParallaxMaxStates int
}

// SwarmResult is one policy's run on a swarm.
type SwarmResult struct {
	Result
	Policy        string
	Retried       int
	Rejected      int
	IncompleteS   float64   // time with some layer unserved
	Moves         int       // range changes, joins included
	BytesLoaded   float64   // weights loaded after the start
	Recoveries    []float64 // per failure: seconds until every layer was served again (0: never lost)
	Deaths, Joins int
	// LeaderDecisions counts consensus.Decide calls (Strata),
	// LeaderStalls rounds without a quorum, LeaderErrors decisions that
	// returned an error.
	LeaderDecisions, LeaderStalls, LeaderErrors int
	// PlanSessionTokens is the planner's session length in Strata's
	// replicated state at the end (0: none; Scenario.KVObjective).
	PlanSessionTokens int
	EventsPerSec      float64 // wall-clock events per second of this run
	Wall              time.Duration
	// Nodes is each machine's use over the run, for finding a bottleneck.
	Nodes []NodeUsage
	// The stages' prefix cache (strata): sessions that resumed, the
	// positions they skipped, later hops that missed (each a cold
	// replay), entries evicted for memory.
	PrefixHits, PrefixMisses, PrefixEvicted int
	PrefixResumed                           int // attempts whose prefill resumed on every hop
	PrefixReused                            int64
	// The entry's admission queue (strata): requests that waited, were
	// refused, and the admitted requests' wait p50 and p99 in seconds.
	EntryQueued, EntryRefused  int
	EntryWaitP50, EntryWaitP99 float64
	// PeakInFlight is the most requests in flight at once (at most the
	// workload's clients, where it has them).
	PeakInFlight int
}

// NodeUsage is one machine's share of a run.
type NodeUsage struct {
	ID, GPU string
	// Range is what it served at the end (empty: not serving).
	Range layers.Range
	// Busy is the fraction of the run's time its GPU computed.
	Busy float64
	// KVPeak is its peak KV reservation over its capacity at the end.
	KVPeak float64
}

// world is one policy's swarm: the engine plus the control plane the
// policy reacts with (Strata's is consensus.Decide, leader.go).
type world struct {
	s      *Sim
	spec   SwarmSpec
	policy string
	model  layers.ModelSpec
	pnodes []layers.Node // planner view of every machine
	prof   []LayerTimer
	gpu    []string
	maxL   []int
	kvTab  map[string][]int64
	capTab map[string][]Caps
	idx    map[string]int

	up      []bool // process running
	known   []bool // the control plane counts it as a member
	serving []bool // holds loaded layers and takes requests
	rng     []layers.Range
	loading []uint32  // load generation, to void superseded loads
	banned  []float64 // petals clients avoid a node until this time

	committed layers.LayerMap
	all       *layers.Fleet // every machine, for per-node rates
	rand      *rand.Rand

	router   *routing.Router
	view     *routing.View
	epoch    time.Time
	pathOK   bool
	path     []routing.Hop // petals' min-latency path, recomputed on change
	pipes    [][]routing.Hop
	rr       int
	servMap  layers.LayerMap
	mapDirty bool

	lead       *leader     // Strata's control plane: consensus.Decide
	eq         *entryQueue // Strata's entry admission queue (entryq.go)
	nextGID    int
	inflight   int      // requests started and not ended
	lastReplay *query   // the last replay lost made (tests)
	waiting    []*query // arrivals waiting for a free client
	covered    bool
	lostAt     []float64 // open recoveries: when coverage was lost
	incStart   float64
	res        SwarmResult
}

func (w *world) layerBytes() float64 { return w.model.LayerWeightBytes() }

// RunSwarm runs one policy on a swarm spec.
func RunSwarm(ctx context.Context, spec SwarmSpec, policy string) (SwarmResult, error) {
	spec.Timing = spec.Timing.withDefaults()
	w := &world{spec: spec, policy: policy, idx: map[string]int{},
		kvTab: map[string][]int64{}, capTab: map[string][]Caps{},
		rand:  rand.New(rand.NewPCG(spec.Seed, 0x51a)),
		epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w.res.Policy = policy
	c, err := w.machines()
	if err != nil {
		return SwarmResult{}, err
	}
	all := make([]int, len(spec.Nodes))
	for i := range all {
		all[i] = i
	}
	if w.all, err = w.fleet(all); err != nil {
		return SwarmResult{}, err
	}
	N := len(spec.Nodes)
	w.up, w.known, w.serving = make([]bool, N), make([]bool, N), make([]bool, N)
	w.rng, w.loading, w.banned = make([]layers.Range, N), make([]uint32, N), make([]float64, N)
	end := spec.StartS + spec.Duration
	s, err := newSim(c, w, Window{Start: spec.StartS + spec.WarmUpS, End: end})
	if err != nil {
		return SwarmResult{}, err
	}
	w.s = s
	// The stage scheduler's defaults (node.DefaultMaxQueue, DefaultQueueTimeout).
	s.reserve, s.maxQueue, s.queueTimeout = true, 256, 30
	s.rng = rand.New(rand.NewPCG(spec.Seed, 0x1a7))
	s.net = w.link
	s.stats.series.bin = math.Max(end/120, 1)
	for i := range s.nodes {
		s.nodes[i].down = true
	}
	s.onLost = w.lost
	s.onRange = w.setCaps
	if policy == "strata" {
		if w.router, err = routing.New(routing.WithModel(w.model)); err != nil {
			return SwarmResult{}, err
		}
		w.view = routing.NewView()
		// The real entry's admission queue and the stages' prefix cache
		// (node/entry, node/prefixcache.go); Petals' and Parallax's
		// clients and servers have neither (docs/baselines.md).
		w.eq = newEntryQueue(N)
		s.prefix = true
		s.onPrompt = func(q *query) {
			if q.prior == 0 {
				w.eq.opened(q.eresv) // the first token: the hops' next reports count it
			}
		}
	}
	if err := w.start(ctx); err != nil {
		return SwarmResult{}, err
	}
	w.scheduleChurn()
	for _, r := range spec.Requests {
		if r.At > spec.Duration {
			break
		}
		q := &query{input: r.Input, output: r.Output, blame: -1}
		s.schedule(&event{at: spec.StartS + r.At, kind: evCallback, fn: func() {
			s.stats.issued++
			w.arrive(q)
		}})
	}
	s.onDone = w.release
	if w.view != nil {
		var beat func()
		beat = func() {
			w.refreshView()
			if s.now+spec.Timing.HeartbeatS <= end {
				s.schedule(&event{at: s.now + spec.Timing.HeartbeatS, kind: evCallback, fn: beat})
			}
		}
		beat()
	}
	if policy == "petals" {
		var check func()
		check = func() {
			w.petalsRebalance()
			s.schedule(&event{at: s.now + 60, kind: evCallback, fn: check})
		}
		s.schedule(&event{at: 60, kind: evCallback, fn: check})
	}
	var t0 time.Time
	if spec.Now != nil {
		t0 = spec.Now()
	}
	// Run in slices of virtual time so that a cancelled context stops it.
	for t := s.now; t < end; {
		if err := ctx.Err(); err != nil {
			return SwarmResult{}, err
		}
		t = math.Min(t+60, end)
		s.run(t)
	}
	if spec.Now != nil {
		w.res.Wall = spec.Now().Sub(t0)
	}
	if !w.covered {
		w.res.IncompleteS += end - math.Max(w.incStart, s.win.Start)
	}
	w.res.Result = s.result()
	w.res.Retried, w.res.Rejected = s.stats.retried, s.stats.rejected
	w.res.PrefixHits, w.res.PrefixMisses, w.res.PrefixReused, w.res.PrefixEvicted =
		s.stats.prefixHits, s.stats.prefixMisses, s.stats.prefixReused, s.stats.prefixEvicted
	w.res.PrefixResumed = s.stats.prefixResumed
	if eq := w.eq; eq != nil {
		w.res.EntryQueued, w.res.EntryRefused = eq.queued, eq.refused
		if len(eq.waits) > 0 {
			w.res.EntryWaitP50, w.res.EntryWaitP99 = percentile(eq.waits, 0.5), percentile(eq.waits, 0.99)
		}
	}
	if w.lead != nil {
		w.res.LeaderDecisions, w.res.LeaderStalls, w.res.LeaderErrors = w.lead.Decisions, w.lead.Stalls, w.lead.Errors
		w.res.PlanSessionTokens, _ = w.lead.state.SwarmConfig().SessionTokens()
	}
	for i, n := range s.nodes {
		u := NodeUsage{ID: w.spec.Nodes[i].ID, GPU: w.gpu[i], Busy: s.stats.busy[i] / end}
		if w.serving[i] {
			u.Range = w.rng[i]
		}
		if n.KVCapacity > 0 {
			u.KVPeak = float64(n.kvPeak) / float64(n.KVCapacity)
		}
		w.res.Nodes = append(w.res.Nodes, u)
	}
	if w.res.Wall > 0 {
		w.res.EventsPerSec = float64(s.fired) / w.res.Wall.Seconds()
	}
	return w.res, nil
}

// machines builds the planner's and the engine's view of every machine,
// from Helix's profiles or from a synthetic model.
func (w *world) machines() (Cluster, error) {
	spec := w.spec
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
		if w.model, err = sm.spec(); err != nil {
			return Cluster{}, err
		}
		wire, timer = sm.wire(), sm.timer()
		w.capTab["cpu"], w.kvTab["cpu"] = []Caps{sm.caps()}, []int64{1 << 40}
	} else if mm := spec.Modelled; mm != nil {
		if err := mm.validate(); err != nil {
			return Cluster{}, err
		}
		if w.model, err = mm.spec(); err != nil {
			return Cluster{}, err
		}
		wire = mm.wire(w.model)
	} else {
		if w.model, err = plannerModel(spec.Model); err != nil {
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
			t, h, ml = timer, cpuHardware, min(n.MaxLayers, w.model.Layers)
		} else if mm := spec.Modelled; mm != nil {
			if h, ml, err = modelledMachine(w.model, gpu, w.uplink(i)); err != nil {
				return Cluster{}, fmt.Errorf("node %q: %w", n.ID, err)
			}
			if _, ok := w.capTab[gpu]; !ok {
				w.capTab[gpu], w.kvTab[gpu] = mm.tables(w.model, h, ml)
			}
			t = newRooflineTimer(w.model, h, mm.context())
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
				if err := w.loadTables(gpu); err != nil {
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
		w.pnodes = append(w.pnodes, layers.Node{ID: n.ID, Hardware: h, Region: n.Region, MaxLayers: ml})
		w.prof = append(w.prof, t)
		w.gpu = append(w.gpu, gpu)
		w.maxL = append(w.maxL, ml)
		if _, dup := w.idx[n.ID]; dup {
			return Cluster{}, fmt.Errorf("%w: node %q twice", ErrScenario, n.ID)
		}
		w.idx[n.ID] = i
		c.Nodes = append(c.Nodes, NodeSpec{Name: n.ID, GPU: n.GPU, First: 0, End: 1, Timer: t,
			Caps: w.capTab[gpu][0], KVCapacity: w.kvTab[gpu][0], NICIn: 1e10, NICOut: 1e10})
	}
	return c, nil
}

func (w *world) loadTables(gpu string) error {
	path := filepath.Join(w.spec.Dir, "profiles", w.spec.Model, gpu, "settings.csv")
	rows, err := readCSV(path)
	if err != nil {
		return err
	}
	for k := 1; k <= len(rows); k++ {
		c, err := LoadCaps(w.spec.Dir, w.spec.Model, gpu, k)
		if err != nil {
			return err
		}
		kv, err := kvCapacity(w.spec.Dir, w.spec.Model, gpu, k)
		if err != nil {
			return err
		}
		w.capTab[gpu] = append(w.capTab[gpu], c)
		w.kvTab[gpu] = append(w.kvTab[gpu], kv)
	}
	return nil
}

// uplink is the bandwidth of node i's own links in its region (a relayed
// node's, through its relay): what the planner is told its link carries.
func (w *world) uplink(i int) float64 {
	net := w.spec.Net
	cls := net.InRegion
	if w.spec.Nodes[i].Relayed {
		cls = worse(cls, net.Relay)
	}
	return cls.Bandwidth
}

// link is the network model: entry links, relays, regions.
func (w *world) link(from, to int) LinkSpec {
	net := w.spec.Net
	cls := net.InRegion
	switch {
	case from == Source || to == Sink:
		cls = net.Entry
		n := max(from, to)
		if w.spec.Nodes[n].Relayed {
			cls = worse(cls, net.Relay)
		}
		return linkOf(cls)
	case w.spec.Nodes[from].Region != w.spec.Nodes[to].Region:
		cls = net.CrossRegion
	}
	if w.spec.Nodes[from].Relayed || w.spec.Nodes[to].Relayed {
		cls = worse(cls, net.Relay)
	}
	return linkOf(cls)
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

// planSessionTokens is the session length the swarm's founder gives
// Strata's planner (false: none). With KVObjective, Strata's leader caps
// each node by the sessions its KV memory holds at the requests' mean
// length, through the replicated state as a real swarm's does
// (strata node --plan-session-tokens); the baselines keep the plain
// cost model their policies describe.
func (w *world) planSessionTokens() (int, bool) {
	if w.policy != "strata" || !w.spec.KVObjective {
		return 0, false
	}
	n := meanSessionTokens(w.spec.Requests)
	return min(n, consensus.MaxSessionTokens), n > 0
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

// fleet is the planner's view of the given machines.
func (w *world) fleet(members []int) (*layers.Fleet, error) {
	if w.all == nil {
		ns := make([]layers.Node, 0, len(members))
		for _, i := range members {
			ns = append(ns, w.pnodes[i])
		}
		return layers.NewFleet(w.model, ns, layers.DefaultCostParams())
	}
	ids := make([]string, 0, len(members))
	for _, i := range members {
		ids = append(ids, w.pnodes[i].ID)
	}
	return w.all.Subset(ids)
}

func (w *world) members() []int {
	var out []int
	for i, k := range w.known {
		if k {
			out = append(out, i)
		}
	}
	return out
}

// start places the machines that are up at time 0 with the policy's
// planner and loads them.
func (w *world) start(ctx context.Context) error {
	var init []int
	for i, n := range w.spec.Nodes {
		if n.JoinAt <= 0 {
			init = append(init, i)
			w.up[i], w.known[i] = true, true
		}
	}
	if w.policy == "strata" {
		// The leader's decisions place them: joins, the first map, its
		// warmup and commit.
		return w.startLeader(init)
	}
	lm, err := w.plan(ctx, init)
	if err != nil {
		return err
	}
	w.committed = lm
	w.covered = false
	for _, st := range lm.Stages {
		w.load(w.idx[st.Node], st.Range, false, true)
	}
	return nil
}

func (w *world) plan(ctx context.Context, members []int) (layers.LayerMap, error) {
	f, err := w.fleet(members)
	if err != nil {
		return layers.LayerMap{}, err
	}
	switch w.policy {
	case "strata":
		p, err := layers.NewPlanner().Full(f, w.committed.Epoch+1)
		return p.Map, err
	case "petals":
		return baseline.NewPetals(baseline.PetalsSeed(w.spec.Seed)).Plan(ctx, f)
	case "parallax":
		var opts []baseline.ParallaxOption
		if w.spec.ParallaxMaxStates > 0 {
			opts = append(opts, baseline.ParallaxMaxStates(w.spec.ParallaxMaxStates))
		}
		return baseline.NewParallax(opts...).Plan(ctx, f)
	}
	return layers.LayerMap{}, fmt.Errorf("%w: policy %q (known: %s)", ErrScenario, w.policy, strings.Join(Policies, ", "))
}

// load makes node i load range r. Make-before-break keeps it serving its
// old range meanwhile; break-before-make (Petals, Parallax) stops it first.
// initial loads are not counted as moves.
func (w *world) load(i int, r layers.Range, makeBeforeBreak, initial bool) {
	if r.Empty() || !w.up[i] {
		return
	}
	added := r.Len()
	if w.serving[i] {
		added = r.Len() - r.Intersect(w.rng[i]).Len()
	}
	if !initial {
		w.res.Moves++
		w.res.BytesLoaded += float64(added) * w.layerBytes()
	}
	if !makeBeforeBreak && w.serving[i] {
		w.stopServing(i)
	}
	w.loading[i]++
	gen := w.loading[i]
	dt := float64(added) * w.layerBytes() / w.spec.Timing.DiskBytesPerS
	w.s.schedule(&event{at: w.s.now + dt, kind: evCallback, fn: func() {
		if w.loading[i] != gen || !w.up[i] {
			return
		}
		w.serve(i, r)
	}})
}

func (w *world) serve(i int, r layers.Range) {
	w.s.revive(i, r.Start, r.End)
	w.setCaps(i)
	w.serving[i], w.rng[i] = true, r
	w.changed()
}

// reassign moves a serving node to range r the way a committed map does:
// its open sessions go on (sim.reassign).
func (w *world) reassign(i int, r layers.Range) {
	w.s.reassign(i, r.Start, r.End)
	w.setCaps(i)
	w.serving[i], w.rng[i] = true, r
	w.changed()
}

// leaveMap takes a live node out of the map the way a committed map does:
// it takes no new session, and those it holds go on to their end.
func (w *world) leaveMap(i int) {
	w.s.reassign(i, 0, 0)
	w.setCaps(i)
	w.serving[i], w.rng[i] = false, layers.Range{}
	w.changed()
}

// setCaps sets a node's batch caps and KV memory for the layers it holds
// (Helix's tables stop at the most a machine may hold: layers still in
// use past that get the last row).
func (w *world) setCaps(i int) {
	n := w.s.nodes[i]
	tab := w.capTab[w.gpu[i]]
	kv := w.kvTab[w.gpu[i]]
	kk := min(max(n.held, 1), len(tab)) - 1
	n.Caps, n.KVCapacity = tab[kk], kv[kk]
}

func (w *world) stopServing(i int) {
	if w.serving[i] {
		w.serving[i] = false
		c := causeMoved
		if !w.up[i] {
			c = causeDied
		}
		w.s.kill(i, c)
		w.changed()
	}
}

// changed recomputes the serving map and coverage after any change.
func (w *world) changed() {
	w.mapDirty = true
	cov := make([]int, w.model.Layers+1)
	for i, sv := range w.serving {
		if sv {
			cov[w.rng[i].Start]++
			cov[w.rng[i].End]--
		}
	}
	ok, c := true, 0
	for l := 0; l < w.model.Layers; l++ {
		c += cov[l]
		if c <= 0 {
			ok = false
			break
		}
	}
	now := w.s.now
	if ok && !w.covered {
		if now >= w.s.win.Start {
			w.res.IncompleteS += now - math.Max(w.incStart, w.s.win.Start)
		}
		for _, t := range w.lostAt {
			w.res.Recoveries = append(w.res.Recoveries, now-t)
		}
		w.lostAt = w.lostAt[:0]
	}
	if !ok && w.covered {
		w.incStart = now
	}
	w.covered = ok
	w.poke() // the entry's queue looks again
}

func (w *world) servingMap() layers.LayerMap {
	if !w.mapDirty {
		return w.servMap
	}
	var st []layers.Stage
	for i, sv := range w.serving {
		if sv {
			st = append(st, layers.Stage{Node: w.spec.Nodes[i].ID, Range: w.rng[i]})
		}
	}
	m, err := layers.NewLayerMap(w.model.Layers, w.committed.Epoch, st...)
	if err != nil {
		m = layers.LayerMap{Layers: w.model.Layers}
	}
	w.servMap, w.mapDirty, w.pathOK = m, false, false
	w.pipes = nil
	return m
}

// scheduleChurn draws every machine's sessions and the scripted changes.
func (w *world) scheduleChurn() {
	ch := w.spec.Churn
	end := w.spec.StartS + w.spec.Duration
	r := rand.New(rand.NewPCG(w.spec.Seed, 0xc4))
	for i, n := range w.spec.Nodes {
		if n.JoinAt > 0 {
			w.s.schedule(&event{at: n.JoinAt, kind: evCallback, fn: func() { w.nodeUp(i) }})
		}
		if ch.MedianSessionS <= 0 {
			continue
		}
		t := max(n.JoinAt, ch.StartS)
		sigma := ch.Sigma
		if sigma <= 0 {
			sigma = 1
		}
		first := true
		for t < end {
			up := ch.MedianSessionS * math.Exp(sigma*r.NormFloat64())
			if first && n.JoinAt <= 0 {
				// Machines up at the start are mid-session: the residual
				// of a session seen at a random time.
				up *= r.Float64()
			}
			first = false
			t += up
			if t >= end {
				break
			}
			w.s.schedule(&event{at: t, kind: evCallback, fn: func() { w.nodeDown(i) }})
			down := ch.MeanDowntimeS * r.ExpFloat64()
			if ch.MeanDowntimeS <= 0 {
				down = 1800 * r.ExpFloat64()
			}
			t += down
			if t < end {
				w.s.schedule(&event{at: t, kind: evCallback, fn: func() { w.nodeUp(i) }})
			}
		}
	}
	for _, sc := range ch.Script {
		if i, ok := w.idx[sc.Kill]; ok {
			w.s.schedule(&event{at: sc.AtS, kind: evCallback, fn: func() { w.nodeDown(i) }})
		}
		if i, ok := w.idx[sc.Join]; ok {
			w.s.schedule(&event{at: sc.AtS, kind: evCallback, fn: func() { w.nodeUp(i) }})
		}
	}
}

// nodeDown: the process dies. Everything on it is lost now; the control
// plane learns it after its own detection delay.
func (w *world) nodeDown(i int) {
	if !w.up[i] {
		return
	}
	w.up[i] = false
	w.res.Deaths++
	wasCovered := w.covered
	w.loading[i]++
	w.stopServing(i)
	w.s.kill(i, causeDied) // sessions it still held after leaving the map
	if wasCovered && !w.covered {
		w.lostAt = append(w.lostAt, w.s.now)
	} else if wasCovered {
		w.res.Recoveries = append(w.res.Recoveries, 0)
	}
	var detect float64
	switch w.policy {
	case "strata":
		if w.lead.self == i {
			w.leaderDied()
		}
		w.s.schedule(&event{at: w.s.now + w.spec.Timing.DeadAfterS, kind: evCallback, fn: func() { w.peerDead(i) }})
		return
	case "petals":
		detect = 240 // DHT expiry
	case "parallax":
		detect = 30 + 10*w.rand.Float64() // eviction after 30 s of silence, 10 s heartbeats
	}
	w.s.schedule(&event{at: w.s.now + detect, kind: evCallback, fn: func() { w.detected(i) }})
}

func (w *world) detected(i int) {
	if w.up[i] || !w.known[i] {
		return // back already, or already removed
	}
	w.known[i] = false
	switch w.policy {
	case "petals":
		// The DHT forgets it; servers' rebalance checks see the gap.
		w.petalsRebalance()
	case "parallax":
		w.parallaxRebootstrap()
	}
}

// nodeUp: the process (re)starts and announces itself.
func (w *world) nodeUp(i int) {
	if w.up[i] {
		return
	}
	w.up[i] = true
	w.res.Joins++
	switch w.policy {
	case "strata":
		w.s.schedule(&event{at: w.s.now + w.spec.Timing.HeartbeatS, kind: evCallback, fn: func() { w.strataUp(i) }})
	case "petals":
		delay := 10 * w.rand.Float64() // Petals joiners wait 0–10 s
		w.s.schedule(&event{at: w.s.now + delay, kind: evCallback, fn: func() { w.petalsJoin(i) }})
	case "parallax":
		// A joiner waits in standby for the next allocation.
		w.known[i] = true
	}
}

// petalsThroughput is t[b]: the summed throughput of the servers (loaded or
// loading) covering each block, from their cost-model rate.
func (w *world) petalsThroughput(except int) []float64 {
	t := make([]float64, w.model.Layers)
	f := w.all
	for _, st := range w.committed.Stages {
		j := w.idx[st.Node]
		if j == except || !w.known[j] {
			continue
		}
		p, ok := f.Profile(st.Node)
		if !ok {
			continue
		}
		v := p.TPS(st.Len(), layers.EndsOf(st.Range, w.model.Layers))
		for b := st.Start; b < st.End; b++ {
			t[b] += v
		}
	}
	return t
}

// petalsStart is Petals' block choice for n blocks: the window whose
// sorted throughputs are lexicographically smallest, lowest start first.
func petalsStart(t []float64, n int) int {
	best, bestKey := 0, []float64(nil)
	for i := 0; i+n <= len(t); i++ {
		key := append([]float64(nil), t[i:i+n]...)
		sort.Float64s(key)
		if bestKey == nil || lexLess(key, bestKey) {
			best, bestKey = i, key
		}
	}
	return best
}

func lexLess(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func (w *world) petalsJoin(i int) {
	if !w.up[i] {
		return
	}
	w.known[i] = true
	n := min(w.maxL[i], w.model.Layers)
	start := petalsStart(w.petalsThroughput(-1), n)
	r := layers.Range{Start: start, End: start + n}
	w.committed = w.committed.With(w.spec.Nodes[i].ID, r)
	w.load(i, r, false, false)
}

// petalsRebalance is one round of Petals' rebalance check: servers in
// random order; the first whose move lifts the swarm's minimum by more
// than 1/0.75 leaves its span (break before make) and loads the new one.
func (w *world) petalsRebalance() {
	// Forget servers the DHT no longer lists.
	for _, st := range w.committed.Stages {
		if j := w.idx[st.Node]; !w.known[j] {
			w.committed = w.committed.Without(st.Node)
		}
	}
	order := w.members()
	w.rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	before := minOf64(w.petalsThroughput(-1))
	for _, i := range order {
		if !w.up[i] {
			continue
		}
		cur, ok := w.committed.Range(w.spec.Nodes[i].ID)
		if !ok {
			continue
		}
		t := w.petalsThroughput(i)
		if gap := minOf64(t[cur.Start:cur.End]); gap == 0 {
			continue // leaving would open a gap
		}
		n := cur.Len()
		start := petalsStart(t, n)
		if start == cur.Start {
			continue
		}
		p, _ := w.all.Profile(w.spec.Nodes[i].ID)
		r := layers.Range{Start: start, End: start + n}
		v := p.TPS(n, layers.EndsOf(r, w.model.Layers))
		for b := r.Start; b < r.End; b++ {
			t[b] += v
		}
		after := minOf64(t)
		if after > 0 && before/after < 0.75 {
			w.committed = w.committed.With(w.spec.Nodes[i].ID, r)
			w.load(i, r, false, false)
			return
		}
	}
}

func minOf64(t []float64) float64 {
	m := math.Inf(1)
	for _, v := range t {
		m = math.Min(m, v)
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}

// parallaxRebootstrap: a leave broke the pipelines; every node goes to
// standby and the allocator places the live ones from scratch. Every node
// whose range changes reloads, and everything in flight is lost.
func (w *world) parallaxRebootstrap() {
	live := w.members()
	lm, err := w.plan(context.Background(), live)
	if err != nil {
		return
	}
	w.committed = lm
	for i := range w.serving {
		r, ok := lm.Range(w.spec.Nodes[i].ID)
		if !ok {
			w.stopServing(i)
			continue
		}
		if w.serving[i] && r == w.rng[i] {
			w.s.kill(i, causeMoved) // executors restart: in-flight lost
			w.s.revive(i, r.Start, r.End)
			continue
		}
		w.load(i, r, false, false)
	}
}

// refreshView is a heartbeat: every serving node's load as the entry sees
// it, the figures a real node sends (node/status.go).
func (w *world) refreshView() {
	now := w.epoch.Add(time.Duration(w.s.now * float64(time.Second)))
	for i, n := range w.s.nodes {
		id := w.spec.Nodes[i].ID
		if !w.serving[i] {
			w.view.Remove(id)
			continue
		}
		k := max(n.held, 1)
		free := int((n.KVCapacity - n.kvUsed) / int64(k))
		w.view.Set(routing.NodeState{
			ID: id, Health: routing.Alive, Region: w.spec.Nodes[i].Region, Relayed: w.spec.Nodes[i].Relayed,
			Hardware: w.pnodes[i].Hardware, QueueDepth: len(n.wait), ActiveSessions: n.active,
			FreeKV: free, LayerLatency: n.lat, Updated: now,
		})
		if w.eq != nil {
			w.eq.report(i, kvRep{free: free, sessions: n.active + len(n.wait)})
		}
	}
	if w.eq != nil {
		w.eq.beat++
		w.poke()
	}
}

// The world is the engine's scheduler: it routes whole paths at admission.
func (w *world) admit(s *Sim, q *query) bool {
	hops, ok := w.route(q)
	if !ok {
		return false
	}
	w.setRoute(q, hops)
	return true
}

// setRoute lays q's route along hops.
func (w *world) setRoute(q *query, hops []routing.Hop) {
	s := w.s
	prev := Source
	for _, h := range hops {
		j := w.idx[h.Node]
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
func (w *world) route(q *query) ([]routing.Hop, bool) {
	if w.policy != "strata" {
		return w.routeAvoid(q, q.avoid)
	}
	hops, err := ecore.Route(ecore.Replay{Avoid: q.avoid, Hard: q.hard}, func(avoid []string) ([]routing.Hop, error) {
		if hops, ok := w.routeAvoid(q, avoid); ok {
			return hops, nil
		}
		return nil, routing.ErrNoPath
	})
	return hops, err == nil
}

func (w *world) routeAvoid(q *query, avoid []string) ([]routing.Hop, bool) {
	m := w.servingMap()
	if !w.covered {
		return nil, false
	}
	switch w.policy {
	case "strata":
		now := w.epoch.Add(time.Duration(w.s.now * float64(time.Second)))
		req := routing.Request{PromptTokens: q.input, MaxTokens: q.output, Seed: uint64(q.id), Avoid: avoid}
		p, err := w.router.Route(m, w.view, req, now)
		if err != nil {
			return nil, false
		}
		return p.Hops, true
	case "petals":
		if !w.pathOK {
			w.path = w.minLatencyPath()
			w.pathOK = true
		}
		return w.path, w.path != nil
	case "parallax":
		if w.pipes == nil {
			w.pipes = w.pipelines()
		}
		if len(w.pipes) == 0 {
			return nil, false
		}
		w.rr++
		return w.pipes[w.rr%len(w.pipes)], true
	}
	return nil, false
}

// minLatencyPath is Petals' client routing: least single-token latency
// over spans (moving on only at a span's end), ignoring load; servers a
// client saw fail are avoided while banned.
func (w *world) minLatencyPath() []routing.Hop {
	L := w.model.Layers
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
	for i, sv := range w.serving {
		if !sv || w.banned[i] > w.s.now {
			continue
		}
		spans = append(spans, span{i, w.rng[i], w.prof[i].LayerTime(0, 1), w.link(Source, i).Latency})
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
					prev[sp.r.End] = routing.Hop{Node: w.spec.Nodes[sp.i].ID, From: l, To: sp.r.End}
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
func (w *world) pipelines() [][]routing.Hop {
	byStart := map[int][]int{}
	for i, sv := range w.serving {
		if sv {
			byStart[w.rng[i].Start] = append(byStart[w.rng[i].Start], i)
		}
	}
	used := make([]bool, len(w.serving))
	var out [][]routing.Hop
	for _, head := range byStart[0] {
		var p []routing.Hop
		at, cur := 0, head
		for {
			used[cur] = true
			r := w.rng[cur]
			p = append(p, routing.Hop{Node: w.spec.Nodes[cur].ID, From: at, To: r.End})
			at = r.End
			if at == w.model.Layers {
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

func (w *world) hop(*Sim, *query, int) (int32, bool) { return -1, false }
func (w *world) observe(*Sim, *iter, int)            {}
func (w *world) finish(*Sim, *query)                 {}

// The real entry's limits (node.DefaultMaxReplays, node.DefaultRepairWait).
const (
	maxReplays = 16
	repairWait = 30.0
)

// lost is the client's reaction to a query a failure or a refusal broke.
// Strata's is the entry's own decision (node/entry's Replay.Ended, see
// replayDecision). Every blamed hop is avoided by later routes while
// another path exists.
func (w *world) lost(q *query) {
	s := w.s
	// The client saw which hop failed: Petals clients ban it for a while.
	for _, li := range q.route {
		if to := s.links[li].To; to >= 0 && s.nodes[to].down {
			w.banned[to] = s.now + 60
			w.pathOK = false
		}
	}
	if w.policy == "parallax" ||
		// Petals' replay fails once the session has generated tokens (a
		// position assertion since v2.0, docs/baselines.md).
		w.policy == "petals" && q.prior+q.decodes > 0 {
		w.failFor(q, FailNotReplayed)
		return
	}
	delay, counted, wait := 0.05, true, w.spec.Timing.ClientTimeoutS
	if w.policy == "strata" {
		wait = repairWait
		var ok bool
		if delay, counted, ok = w.replayDecision(q); !ok {
			return
		}
	} else if q.retries >= maxReplays {
		w.failFor(q, FailReplaysExhausted)
		return
	}
	// Client replay: resend the prompt and what was generated, for the rest.
	s.stats.retried++
	nq := &query{input: q.input + q.decodes, output: q.output - q.decodes, prior: q.prior + q.decodes,
		retries: q.retries, busy: q.busy, busySince: q.busySince, avoid: q.avoid, hard: q.hard, blame: -1,
		gid: q.gid, cold: q.cold, eresv: q.eresv}
	if counted {
		nq.retries++
	}
	w.lastReplay = nq
	arrival := q.arrival
	s.schedule(&event{at: s.now + delay, kind: evCallback, fn: func() { w.issueRetry(nq, arrival, s.now, wait) }})
}

// arrive starts a request, or queues it for a free client.
func (w *world) arrive(q *query) {
	if w.spec.Clients > 0 && w.inflight >= w.spec.Clients {
		w.waiting = append(w.waiting, q)
		return
	}
	w.inflight++
	w.res.PeakInFlight = max(w.res.PeakInFlight, w.inflight)
	q.gid = w.nextGID
	w.nextGID++
	if w.eq != nil {
		// The entry queues it for a path with KV room (node/entry.TryAdmit).
		q.id = w.s.nextID
		w.s.nextID++
		q.arrival = w.s.now
		w.enter(q)
		return
	}
	// Latency counts from when a client sends it, as the testnet's does.
	w.issueRetry(q, w.s.now, w.s.now, w.spec.Timing.ClientTimeoutS)
}

// release: a request ended; its client takes the next waiting one, and
// the entry's reservations for it go back.
func (w *world) release(q *query) {
	if w.eq != nil && len(q.eresv) > 0 {
		w.eq.release(q.eresv)
		q.eresv = nil
		w.poke()
	}
	w.inflight--
	if len(w.waiting) > 0 {
		q := w.waiting[0]
		w.waiting = w.waiting[1:]
		w.arrive(q)
	}
}

// failFor ends a request for good.
func (w *world) failFor(q *query, why string) {
	s := w.s
	defer w.release(q)
	s.stats.failed++
	s.stats.fail(why)
	if w.covered {
		s.stats.failedWithPath++
	}
}

// issueRetry starts a new or replayed query, waiting for a route while
// the client's wait allows: a fresh request's client retries every
// second (the entry answers Retry-After: 1), a replay polls as the
// entry's reroute does.
func (w *world) issueRetry(q *query, arrival, since, wait float64) {
	s := w.s
	q.id = s.nextID
	s.nextID++
	q.arrival = arrival
	if !w.admit(s, q) {
		if s.now-since > wait {
			why := FailNoRoute
			if len(q.hard) > 0 && w.covered {
				why = FailNoKV
			}
			w.failFor(q, why)
			return
		}
		q.route, q.ranLayers, q.hopEnd = nil, nil, nil
		poll := 1.0
		if q.retries+q.busy > 0 {
			poll = 0.05
		}
		s.schedule(&event{at: s.now + poll, kind: evCallback, fn: func() { w.issueRetry(q, arrival, since, wait) }})
		return
	}
	w.send(q)
}

// launch starts a request the entry's queue admitted on hops.
func (w *world) launch(q *query, hops []routing.Hop) {
	w.setRoute(q, hops)
	w.send(q)
}

// send starts a routed attempt's prefill, after the entry's setup time.
func (w *world) send(q *query) {
	s := w.s
	it := &iter{q: q, prompt: true, tokens: q.input, issued: s.now}
	if d := w.spec.Timing.EntrySetupMS / 1e3; d > 0 {
		s.schedule(&event{at: s.now + d, kind: evCallback, fn: func() {
			if !q.failed {
				s.depart(it, Source)
			}
		}})
		return
	}
	s.depart(it, Source)
}
