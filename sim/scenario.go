package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrScenario reports a simulation scenario that does not parse or validate.
var ErrScenario = errors.New("sim: bad scenario")

// Scenario is a simulation scenario as written in YAML.
type Scenario struct {
	Name        string    `yaml:"name"`
	Description string    `yaml:"description"`
	Seed        uint64    `yaml:"seed"`
	Helix       *HelixRef `yaml:"helix"`

	// A swarm run: machines, network, workload, churn, timings. Data is
	// the Helix reference directory the profiles and lengths come from.
	Data  string `yaml:"data"`
	Model string `yaml:"model"`
	// SyntheticModel replaces data and model: a testnet-like model.
	SyntheticModel *SyntheticModel `yaml:"synthetic_model"`
	// ModelledModel replaces model: a layers built-in model on layers'
	// device table, its layer times from the cost model (modelled, not
	// measured). Data still gives the workload's lengths.
	ModelledModel *ModelledModel `yaml:"modelled_model"`
	DurationS     float64        `yaml:"duration_s"`
	WarmUpS       float64        `yaml:"warmup_s"`
	StartS        float64        `yaml:"start_s"`
	Nodes         []NodeGroup    `yaml:"nodes"`
	Network       Network        `yaml:"network"`
	Workload      Workload       `yaml:"workload"`
	Churn         Churn          `yaml:"churn"`
	Timing        Timing         `yaml:"timing"`
	// KVObjective makes Strata's planner cap each node's rate by the
	// sessions of the workload's mean length its KV memory holds
	// (layers.CostParams.SessionTokens), given as a real founder's
	// --plan-session-tokens is: in the replicated state (planSessionTokens).
	// `strata sim --kv-objective` sets it.
	KVObjective bool `yaml:"kv_objective"`

	dir string // the scenario file's directory, for relative paths
}

// NodeGroup is count machines of one kind, or a Helix cluster's machines.
type NodeGroup struct {
	Count  int    `yaml:"count"`
	GPU    string `yaml:"gpu"`
	Region string `yaml:"region"`
	// RelayedFraction of the group is reachable only through relays.
	RelayedFraction float64 `yaml:"relayed_fraction"`
	JoinAtS         float64 `yaml:"join_at_s"`
	// HelixCluster takes the machines of single24, geo24 or hetero42.
	HelixCluster string `yaml:"helix_cluster"`
	// Prefix names the group's machines (default: the GPU).
	Prefix string `yaml:"prefix"`
	// Name names a group of one machine.
	Name string `yaml:"name"`
	// MaxLayers caps the machines' ranges (required for synthetic models).
	MaxLayers int `yaml:"max_layers"`
}

// Workload is the requests: Helix's stream for a rate, or Poisson
// arrivals with Azure conversation lengths.
type Workload struct {
	PoissonRatePerS float64      `yaml:"poisson_rate_per_s"`
	HelixStreamRate float64      `yaml:"helix_stream_rate"`
	TestnetLoad     *TestnetLoad `yaml:"testnet_load"`
	// Clients, when positive, caps the requests in flight (a closed
	// loop of that many users): an arrival waits for a client to free.
	// With an arrival rate above what a policy serves it measures the
	// policy's capacity, as Helix's offline runs do.
	Clients int `yaml:"clients"`
}

// TestnetLoad is a testnet scenario's load section (testnet.LoadSpec):
// Poisson arrivals at Rate, drawn exactly as testnet/load.go draws them
// from Seed, at most Clients in flight, fixed lengths.
type TestnetLoad struct {
	Clients      int     `yaml:"clients"`
	Rate         float64 `yaml:"rate"`
	Prompts      int     `yaml:"prompts"`
	PromptTokens int     `yaml:"prompt_tokens"`
	MaxTokens    int     `yaml:"max_tokens"`
	Seed         uint64  `yaml:"seed"`
}

// requests draws the arrivals over [0, duration).
func (l TestnetLoad) requests(duration float64) []Request {
	rng := rand.New(rand.NewPCG(l.Seed, 0xa771))
	var out []Request
	for t := 0.0; ; {
		t += rng.ExpFloat64() / l.Rate
		if t > duration {
			return out
		}
		rng.IntN(l.Prompts) // the prompt's draw, to keep the stream in step
		out = append(out, Request{At: t, Input: l.PromptTokens, Output: l.MaxTokens})
	}
}

// HelixRef replays Helix's published simulations of one setup and model.
type HelixRef struct {
	// Dir holds the Helix reference data, relative to the scenario file.
	Dir   string `yaml:"dir"`
	Setup string `yaml:"setup"`
	Model string `yaml:"model"`
	// Modes to replay: online, offline (empty: both).
	Modes []string `yaml:"modes"`
}

// ParseScenario reads a scenario; path names it in errors and anchors its
// relative paths.
func ParseScenario(path string, data []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrScenario, path, err)
	}
	sc.dir = filepath.Dir(path)
	if sc.Name == "" {
		return nil, fmt.Errorf("%w: %s: no name", ErrScenario, path)
	}
	if sc.Helix == nil && len(sc.Nodes) == 0 {
		return nil, fmt.Errorf("%w: %s: nothing to simulate (give a helix section or nodes)", ErrScenario, path)
	}
	if h := sc.Helix; h != nil {
		if h.Dir == "" || h.Setup == "" || h.Model == "" {
			return nil, fmt.Errorf("%w: %s: helix needs dir, setup and model", ErrScenario, path)
		}
		for _, m := range h.Modes {
			if m != "online" && m != "offline" {
				return nil, fmt.Errorf("%w: %s: helix mode %q (want online or offline)", ErrScenario, path, m)
			}
		}
	}
	if len(sc.Nodes) > 0 {
		switch {
		case (sc.Data == "" || sc.Model == "") && sc.SyntheticModel == nil && sc.ModelledModel == nil:
			return nil, fmt.Errorf("%w: %s: a swarm needs data and model, synthetic_model or modelled_model", ErrScenario, path)
		case sc.ModelledModel != nil && (sc.SyntheticModel != nil || sc.Model != ""):
			return nil, fmt.Errorf("%w: %s: modelled_model replaces model and synthetic_model", ErrScenario, path)
		case !(sc.DurationS > 0) || sc.WarmUpS < 0 || sc.WarmUpS >= sc.DurationS || sc.StartS < 0:
			return nil, fmt.Errorf("%w: %s: duration_s %g, warmup_s %g", ErrScenario, path, sc.DurationS, sc.WarmUpS)
		case kinds(sc.Workload.PoissonRatePerS > 0, sc.Workload.HelixStreamRate > 0, sc.Workload.TestnetLoad != nil) != 1:
			return nil, fmt.Errorf("%w: %s: workload needs exactly one of poisson_rate_per_s, helix_stream_rate and testnet_load", ErrScenario, path)
		}
		if sc.Workload.Clients < 0 {
			return nil, fmt.Errorf("%w: %s: workload clients %d", ErrScenario, path, sc.Workload.Clients)
		}
		if l := sc.Workload.TestnetLoad; l != nil && (l.Clients <= 0 || !(l.Rate > 0) || l.Prompts <= 0 || l.PromptTokens <= 0 || l.MaxTokens <= 0) {
			return nil, fmt.Errorf("%w: %s: testnet_load needs positive clients, rate, prompts, prompt_tokens and max_tokens", ErrScenario, path)
		}
		for i, g := range sc.Nodes {
			if g.Name != "" && g.Count == 0 {
				sc.Nodes[i].Count, g.Count = 1, 1
			}
			if g.Name != "" && g.Count != 1 {
				return nil, fmt.Errorf("%w: %s: node group %d is named %q but has count %d", ErrScenario, path, i, g.Name, g.Count)
			}
			if g.HelixCluster == "" && (g.Count <= 0 || g.GPU == "") {
				return nil, fmt.Errorf("%w: %s: node group %d needs count and gpu, or helix_cluster", ErrScenario, path, i)
			}
			if g.RelayedFraction < 0 || g.RelayedFraction > 1 {
				return nil, fmt.Errorf("%w: %s: node group %d: relayed_fraction %g", ErrScenario, path, i, g.RelayedFraction)
			}
		}
	}
	return &sc, nil
}

func (sc *Scenario) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(sc.dir, p)
}

// SwarmSpec builds the swarm run the scenario describes.
func (sc *Scenario) SwarmSpec() (SwarmSpec, error) {
	dir := sc.path(sc.Data)
	spec := SwarmSpec{Dir: dir, Model: sc.Model, Synthetic: sc.SyntheticModel, Modelled: sc.ModelledModel, Net: sc.Network, Timing: sc.Timing, Churn: sc.Churn,
		Duration: sc.DurationS, WarmUpS: sc.WarmUpS, StartS: sc.StartS, Seed: sc.Seed, KVObjective: sc.KVObjective}
	for gi, g := range sc.Nodes {
		if g.HelixCluster != "" {
			ns, err := HelixSwarmNodes(dir, g.HelixCluster)
			if err != nil {
				return SwarmSpec{}, err
			}
			spec.Nodes = append(spec.Nodes, ns...)
			continue
		}
		prefix := g.Prefix
		if prefix == "" {
			prefix = fmt.Sprintf("g%d-%s", gi, g.GPU)
		}
		relayed := int(g.RelayedFraction*float64(g.Count) + 0.5)
		for i := range g.Count {
			// Spread the relayed machines evenly through the group.
			r := relayed > 0 && (i*relayed)/g.Count != ((i+1)*relayed)/g.Count
			id := fmt.Sprintf("%s-%d", prefix, i)
			if g.Name != "" {
				id = g.Name
			}
			spec.Nodes = append(spec.Nodes, SwarmNode{ID: id, GPU: g.GPU, Region: g.Region,
				Relayed: r, JoinAt: g.JoinAtS, MaxLayers: g.MaxLayers})
		}
	}
	switch {
	case sc.Workload.TestnetLoad != nil:
		spec.Requests = sc.Workload.TestnetLoad.requests(sc.DurationS)
		spec.Clients = sc.Workload.TestnetLoad.Clients
	case sc.Workload.HelixStreamRate > 0:
		st, err := LoadHelixStream(dir, sc.Workload.HelixStreamRate)
		if err != nil {
			return SwarmSpec{}, err
		}
		spec.Requests = st
	default:
		lens, err := LoadAzureConvLengths(dir)
		if err != nil {
			return SwarmSpec{}, err
		}
		spec.Requests = Poisson(sc.Workload.PoissonRatePerS, sc.DurationS, lens, sc.Seed)
	}
	if sc.Workload.Clients > 0 {
		spec.Clients = sc.Workload.Clients
	}
	return spec, nil
}

func kinds(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// PolicyReport is one policy's figures, in the units of --json.
type PolicyReport struct {
	Policy      string  `json:"policy"`
	GoodputTokS float64 `json:"goodput_tok_s"`
	// DecodeTokS counts every decoded token in the window, as Helix's
	// simulator does, finished request or not.
	DecodeTokS float64 `json:"decode_tok_s"`
	TTFTp50ms  float64 `json:"ttft_p50_ms"`
	TTFTp99ms  float64 `json:"ttft_p99_ms"`
	TPOTp50ms  float64 `json:"tpot_p50_ms"`
	TPOTp99ms  float64 `json:"tpot_p99_ms"`
	Completed  int     `json:"completed"`
	Failed     int     `json:"failed"`
	// FailedByCause splits Failed by why (replays_exhausted,
	// busy_too_long, no_route, not_replayed, kv_never_fits, or for
	// Helix's replays the break itself).
	FailedByCause map[string]int `json:"failed_by_cause"`
	// FailedWithPath counts the failures that happened while every layer
	// was served: losses where another path existed.
	FailedWithPath int `json:"failed_where_path_existed"`
	// BrokenByCause counts broken attempts (each then replayed or failed)
	// by cause: node_died, moved, queue_full, queue_timeout,
	// kv_never_fits, stale_route, no_hop.
	BrokenByCause map[string]int `json:"attempts_broken_by_cause"`
	// UseByGPU is the machines' use per machine type (swarm runs): where
	// the bottleneck is.
	UseByGPU []GPUUse `json:"use_by_gpu,omitempty"`
	// EntryQueue and PrefixCache are the strata policy's entry admission
	// queue and stage prefix cache (swarm runs).
	EntryQueue  *EntryQueueUse  `json:"entry_queue,omitempty"`
	PrefixCache *PrefixCacheUse `json:"prefix_cache,omitempty"`

	swarm  *SwarmResult
	events uint64
	series []float64
	bin    float64
}

// EntryQueueUse is what the entry's admission queue did: requests that
// waited in it, were refused (deadline or bound), and the admitted
// requests' waits.
type EntryQueueUse struct {
	Queued    int     `json:"queued"`
	Refused   int     `json:"refused"`
	WaitP50ms float64 `json:"wait_p50_ms"`
	WaitP99ms float64 `json:"wait_p99_ms"`
}

// PrefixCacheUse is what the stages' prefix cache did: hops that resumed
// a session, positions they did not recompute, later hops that missed
// the first hop's prefix (each a cold replay), entries evicted.
type PrefixCacheUse struct {
	Hits      int   `json:"hits"`
	Reused    int64 `json:"reused_positions"`
	Misses    int   `json:"misses"`
	Resumed   int   `json:"attempts_resumed"`
	Evictions int   `json:"evictions"`
}

// GPUUse sums up the machines of one type over a run.
type GPUUse struct {
	GPU     string `json:"gpu"`
	Nodes   int    `json:"nodes"`
	Serving int    `json:"serving_at_end"`
	// BusyMean and BusyMax are the share of the run's time the machines
	// computed; KVPeakMean their mean peak KV reservation over capacity.
	BusyMean   float64 `json:"busy_mean"`
	BusyMax    float64 `json:"busy_max"`
	KVPeakMean float64 `json:"kv_peak_mean"`
}

func useByGPU(ns []NodeUsage) []GPUUse {
	by := map[string]*GPUUse{}
	var order []string
	for _, n := range ns {
		u := by[n.GPU]
		if u == nil {
			u = &GPUUse{GPU: n.GPU}
			by[n.GPU] = u
			order = append(order, n.GPU)
		}
		u.Nodes++
		if !n.Range.Empty() {
			u.Serving++
		}
		u.BusyMean += n.Busy
		u.BusyMax = max(u.BusyMax, n.Busy)
		u.KVPeakMean += n.KVPeak
	}
	sort.Strings(order)
	out := make([]GPUUse, 0, len(order))
	for _, g := range order {
		u := by[g]
		u.BusyMean /= float64(u.Nodes)
		u.KVPeakMean /= float64(u.Nodes)
		out = append(out, *u)
	}
	return out
}

// PublishedRow is a paper figure next to our simulation of its placement.
type PublishedRow struct {
	Policy      string  `json:"policy"`
	GoodputTokS float64 `json:"goodput_tok_s"`
	Simulated   float64 `json:"simulated_tok_s"`
	Source      string  `json:"source"`
}

// Report is a scenario's outcome.
type Report struct {
	Scenario  string         `json:"scenario"`
	Policies  []PolicyReport `json:"policies"`
	Published []PublishedRow `json:"published"`

	notes []string
}

// policyReport folds the parts of one policy (Helix sums sub-clusters).
func policyReport(name string, parts []Result) PolicyReport {
	p := PolicyReport{Policy: name, FailedByCause: map[string]int{}, BrokenByCause: map[string]int{}}
	var ttft50, ttft99, tpot50, tpot99, w float64
	for _, r := range parts {
		p.GoodputTokS += r.GoodputTokS
		p.DecodeTokS += r.DecodeTokS
		p.Completed += r.Completed
		p.Failed += r.Failed
		p.FailedWithPath += r.FailedWithPath
		for k, v := range r.FailedByCause {
			p.FailedByCause[k] += v
		}
		for k, v := range r.BrokenByCause {
			p.BrokenByCause[k] += v
		}
		p.events += r.Events
		// Latency of a sum of parts: weighted by decode rate (Helix merges
		// the samples; this is close where parts are alike).
		ttft50 += r.TTFTp50 * r.DecodeTokS
		ttft99 = max(ttft99, r.TTFTp99)
		tpot50 += r.TPOTp50 * r.DecodeTokS
		tpot99 = max(tpot99, r.TPOTp99)
		w += r.DecodeTokS
		p.bin = r.SeriesBin
		for i, v := range r.Series {
			for len(p.series) <= i {
				p.series = append(p.series, 0)
			}
			p.series[i] += v
		}
	}
	if w > 0 {
		p.TTFTp50ms, p.TPOTp50ms = ttft50/w*1e3, tpot50/w*1e3
	}
	p.TTFTp99ms, p.TPOTp99ms = ttft99*1e3, tpot99*1e3
	return p
}

// Run simulates a scenario. policies filters by name (empty: all); now,
// if not nil, times the swarm runs on the wall clock.
func Run(ctx context.Context, sc *Scenario, now func() time.Time, policies ...string) (Report, error) {
	rep := Report{Scenario: sc.Name}
	want := map[string]bool{}
	for _, p := range policies {
		want[p] = true
	}
	if len(sc.Nodes) > 0 {
		spec, err := sc.SwarmSpec()
		if err != nil {
			return Report{}, err
		}
		spec.Now = now
		for _, p := range Policies {
			if len(want) > 0 && !want[p] {
				continue
			}
			res, err := RunSwarm(ctx, spec, p)
			if errors.Is(err, context.Canceled) {
				return Report{}, err
			}
			if err != nil {
				// A policy that cannot place this swarm is a result, not a
				// reason to drop the others.
				rep.notes = append(rep.notes, fmt.Sprintf("%s: no run: %v", p, err))
				continue
			}
			pr := policyReport(p, []Result{res.Result})
			pr.swarm = &res
			pr.UseByGPU = useByGPU(res.Nodes)
			if p == "strata" {
				pr.EntryQueue = &EntryQueueUse{Queued: res.EntryQueued, Refused: res.EntryRefused,
					WaitP50ms: res.EntryWaitP50 * 1e3, WaitP99ms: res.EntryWaitP99 * 1e3}
				pr.PrefixCache = &PrefixCacheUse{Hits: res.PrefixHits, Reused: res.PrefixReused, Misses: res.PrefixMisses,
					Resumed: res.PrefixResumed, Evictions: res.PrefixEvicted}
			}
			rep.Policies = append(rep.Policies, pr)
		}
	}
	h := sc.Helix
	if h == nil {
		return rep, nil
	}
	dir := sc.path(h.Dir)
	if len(want) == 0 || want["helix-published"] {
		cals, err := CalibrateHelix(dir, h.Setup, h.Model, sc.Seed)
		if err != nil {
			return Report{}, err
		}
		modes := map[string]bool{}
		for _, m := range h.Modes {
			modes[m] = true
		}
		for _, c := range cals {
			if len(modes) > 0 && !modes[c.Mode] {
				continue
			}
			name := c.Method + "-" + c.Mode
			rep.Policies = append(rep.Policies, policyReport(name, c.Parts))
			rep.Published = append(rep.Published, PublishedRow{Policy: name, GoodputTokS: c.Published, Simulated: c.Simulated,
				Source: "Helix ASPLOS'25 artifact, " + c.Source + " (decode tok/s of Helix's simulator)"})
		}
	}
	return rep, nil
}
