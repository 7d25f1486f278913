package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"time"

	"github.com/stratanet/strata/layers"
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

// world is one policy's swarm: the engine plus the parts around it,
// each owning its state: the machines, the roster of who serves what,
// the routing, the clients, and for Strata the entry's admission queue
// and the control plane (consensus.Decide, leader.go). world itself
// plays the machines' churn and keeps the run's result.
type world struct {
	s      *Sim
	spec   SwarmSpec
	policy string
	rand   *rand.Rand
	epoch  time.Time
	res    SwarmResult

	m    *machines
	ro   *roster
	pa   *paths
	cl   *clients
	eq   *entryQueue // Strata's entry admission queue (entryq.go); nil otherwise
	lead *leader     // Strata's control plane: consensus.Decide; nil otherwise
}

// at is the virtual clock's time as the consensus package reads it.
func (w *world) at() time.Time { return w.epoch.Add(time.Duration(w.s.now * float64(time.Second))) }

// RunSwarm runs one policy on a swarm spec.
func RunSwarm(ctx context.Context, spec SwarmSpec, policy string) (SwarmResult, error) {
	spec.Timing = spec.Timing.withDefaults()
	w := &world{spec: spec, policy: policy,
		rand:  rand.New(rand.NewPCG(spec.Seed, 0x51a)),
		epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	w.res.Policy = policy
	m, c, err := newMachines(spec)
	if err != nil {
		return SwarmResult{}, err
	}
	N := len(spec.Nodes)
	w.m, w.ro = m, newRoster(w, N)
	w.pa = &paths{w: w, banned: make([]float64, N)}
	w.cl = &clients{w: w}
	end := spec.StartS + spec.Duration
	s, err := newSim(c, w.pa, Window{Start: spec.StartS + spec.WarmUpS, End: end})
	if err != nil {
		return SwarmResult{}, err
	}
	w.s = s
	// The stage scheduler's defaults (node.DefaultMaxQueue, DefaultQueueTimeout).
	s.reserve, s.maxQueue, s.queueTimeout = true, 256, 30
	s.rng = rand.New(rand.NewPCG(spec.Seed, 0x1a7))
	s.net = w.m.link
	s.stats.series.bin = math.Max(end/120, 1)
	for i := range s.nodes {
		s.nodes[i].down = true
	}
	s.onLost = w.cl.lost
	s.onRange = w.ro.setCaps
	if policy == "strata" {
		if w.pa.router, err = routing.New(routing.WithModel(w.m.model)); err != nil {
			return SwarmResult{}, err
		}
		w.pa.view = routing.NewView()
		// The real entry's admission queue and the stages' prefix cache
		// (node/entry, node/prefixcache.go); Petals' and Parallax's
		// clients and servers have neither (docs/baselines.md).
		w.eq = newEntryQueue(w, N)
		w.lead = newLeader(w)
		s.prefix = true
		s.onPrompt = func(q *query) {
			if q.prior == 0 {
				w.eq.opened(q.eresv) // the first token: the hops' next reports count it
			}
		}
	}
	if err := w.ro.start(ctx); err != nil {
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
			w.cl.arrive(q)
		}})
	}
	s.onDone = w.cl.release
	if w.pa.view != nil {
		var beat func()
		beat = func() {
			w.pa.refreshView()
			if s.now+spec.Timing.HeartbeatS <= end {
				s.schedule(&event{at: s.now + spec.Timing.HeartbeatS, kind: evCallback, fn: beat})
			}
		}
		beat()
	}
	if policy == "petals" {
		var check func()
		check = func() {
			w.ro.petalsRebalance()
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
	if !w.ro.covered {
		w.res.IncompleteS += end - math.Max(w.ro.incStart, s.win.Start)
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
		u := NodeUsage{ID: w.spec.Nodes[i].ID, GPU: w.m.gpu[i], Busy: s.stats.busy[i] / end}
		if w.ro.serving[i] {
			u.Range = w.ro.rng[i]
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
