package sim

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
)

// HelixRun is one simulation of Helix's artifact (a row of
// results/sim_runs.csv): a placement, its scheduler and its workload.
type HelixRun struct {
	// Section is the paper's section the run belongs to ("6.4"): one
	// setup, model, method and mode can appear in several (geo24's Helix
	// and Swarm offline runs in §6.4, and again on §6.7's layout).
	Section                          string
	Setup, Model, Method, Mode, Part string
	Scheduler                        string  // maxflow, swarm, random
	Placement                        string  // placements/<key>
	Machines                         string  // machine_num_dict, keys typical_throughput.csv
	Rate                             float64 // online: tokens/s (prompt + output)
	InitialQueries                   int     // offline
	FeedHWM, KVHWM, KVRatio          float64
	WarmUp, Measure                  float64
	Source                           string
}

// LoadHelixRuns reads results/sim_runs.csv and resolves each run's
// placement through placements/summary.csv.
func LoadHelixRuns(dir string) ([]HelixRun, error) {
	sum, err := readCSV(filepath.Join(dir, "placements", "summary.csv"))
	if err != nil {
		return nil, err
	}
	key := map[string]string{}
	for _, r := range sum {
		key[r["placement_file"]] = r["placement"]
	}
	path := filepath.Join(dir, "results", "sim_runs.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	var runs []HelixRun
	for _, r := range rows {
		p, ok := key[r["placement_file"]]
		if !ok {
			continue // a layout without an extracted placement
		}
		runs = append(runs, HelixRun{
			Section: strings.TrimPrefix(r["section"], "sec"),
			Setup:   r["setup"], Model: r["model"], Method: r["method"], Mode: r["mode"], Part: r["part"],
			Scheduler: r["scheduler"], Placement: p, Machines: r["machine_num_dict"],
			Rate: f(r["online_avg_token_throughput"]), InitialQueries: int(f(r["offline_initial_queries"])),
			FeedHWM: f(r["offline_feed_hwm"]), KVHWM: f(r["kv_expected_hwm"]), KVRatio: f(r["kv_expected_output_ratio"]),
			WarmUp: f(r["warm_up_s"]), Measure: f(r["measure_s"]), Source: r["source"],
		})
	}
	return runs, nil
}

// Published is a decode throughput from Helix's results.
type Published struct {
	Section                    string // "6.4", as HelixRun.Section
	Setup, Model, Mode, Method string
	TokS                       float64
	Source                     string
}

// LoadHelixPublished reads the simulated rows of
// results/headline_decode_throughput.csv.
func LoadHelixPublished(dir string) ([]Published, error) {
	path := filepath.Join(dir, "results", "headline_decode_throughput.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	var out []Published
	for _, r := range rows {
		if r["kind"] != "simulation" {
			continue
		}
		v, err := num(r, "decode_tokens_per_s", path)
		if err != nil {
			return nil, err
		}
		out = append(out, Published{r["section"], r["setup"], r["model"], r["mode"], r["method"], v, r["source"]})
	}
	return out, nil
}

func modelWire(dir, model string) (ModelWire, error) {
	path := filepath.Join(dir, "profiles", "models.csv")
	rows, err := readCSV(path)
	if err != nil {
		return ModelWire{}, err
	}
	for _, r := range rows {
		if r["model"] != model {
			continue
		}
		l, err := num(r, "num_layers", path)
		if err != nil {
			return ModelWire{}, err
		}
		tb, err := num(r, "token_size_bytes", path)
		if err != nil {
			return ModelWire{}, err
		}
		ab, err := num(r, "activation_bytes_per_token", path)
		if err != nil {
			return ModelWire{}, err
		}
		return ModelWire{Layers: int(l), TokenBytes: tb, ActivationBytes: ab}, nil
	}
	return ModelWire{}, fmt.Errorf("%w: %s: no model %q", ErrBadData, path, model)
}

// LoadHelixCluster builds the cluster of one placement: its nodes with
// their profiles and caps, and only the links the placement uses. It also
// returns each node's typical throughput for the given machine mix (0
// where Helix defines none), which weights the MaxFlow scheduler.
func LoadHelixCluster(dir, model, placement, machines string) (Cluster, []float64, error) {
	wire, err := modelWire(dir, model)
	if err != nil {
		return Cluster{}, nil, err
	}
	c := Cluster{Model: wire}
	base := filepath.Join(dir, "placements", placement)
	prow, err := readCSV(filepath.Join(base, "placement.csv"))
	if err != nil {
		return Cluster{}, nil, err
	}
	typ, err := readCSV(filepath.Join(dir, "profiles", "typical_throughput.csv"))
	if err != nil {
		return Cluster{}, nil, err
	}
	profiles := map[string]Profile{}
	index := map[string]int{"source": Source, "sink": Sink}
	var typical []float64
	ppath := filepath.Join(base, "placement.csv")
	for _, r := range prow {
		gpu := strings.ToLower(r["gpu"])
		p, ok := profiles[gpu]
		if !ok {
			if p, err = LoadProfile(dir, model, gpu); err != nil {
				return Cluster{}, nil, err
			}
			profiles[gpu] = p
		}
		var v [6]float64
		for i, col := range []string{"first_layer", "end_layer", "kv_cache_capacity_token_layers", "nic_in_bytes_per_s", "nic_out_bytes_per_s", "num_layers"} {
			if v[i], err = num(r, col, ppath); err != nil {
				return Cluster{}, nil, err
			}
		}
		caps, err := LoadCaps(dir, model, gpu, int(v[5]))
		if err != nil {
			return Cluster{}, nil, err
		}
		index[r["node"]] = len(c.Nodes)
		c.Nodes = append(c.Nodes, NodeSpec{
			Name: r["node"], GPU: r["gpu"], First: int(v[0]), End: int(v[1]), Timer: p, Caps: caps,
			KVCapacity: int64(v[2]), NICIn: v[3], NICOut: v[4],
		})
		t := 0.0
		for _, tr := range typ {
			if tr["model"] == model && tr["machine_num_dict"] == machines && tr["gpu"] == r["gpu"] && tr["num_layers_on_node"] == r["num_layers"] {
				t, _ = strconv.ParseFloat(tr["typical_tokens_per_s"], 64)
			}
		}
		typical = append(typical, t)
	}
	lpath := filepath.Join(base, "links_used.csv")
	lrow, err := readCSV(lpath)
	if err != nil {
		return Cluster{}, nil, err
	}
	for _, r := range lrow {
		from, ok1 := index[r["from"]]
		to, ok2 := index[r["to"]]
		if !ok1 || !ok2 {
			return Cluster{}, nil, fmt.Errorf("%w: %s: link %s→%s names an unknown node", ErrBadData, lpath, r["from"], r["to"])
		}
		bw, err := num(r, "bandwidth_bytes_per_s", lpath)
		if err != nil {
			return Cluster{}, nil, err
		}
		lat, err := num(r, "latency_s", lpath)
		if err != nil {
			return Cluster{}, nil, err
		}
		c.Links = append(c.Links, LinkSpec{From: from, To: to, Bandwidth: bw, Latency: lat})
	}
	return c, typical, c.Validate()
}

// Request is one query of a workload: arrival time and lengths.
type Request struct {
	At            float64
	Input, Output int
}

// LoadHelixStream reads trace/streams/online_rate<R>_seed0.csv, the exact
// request stream Helix's generator produces for that rate.
func LoadHelixStream(dir string, rate float64) ([]Request, error) {
	path := filepath.Join(dir, "trace", "streams", fmt.Sprintf("online_rate%s_seed0.csv", strconv.FormatFloat(rate, 'f', -1, 64)))
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	return requests(rows, path, "arrival_s")
}

// LoadHelixOfflineLengths reads the (input, output) sequence Helix's
// offline feeder draws.
func LoadHelixOfflineLengths(dir string) ([]Request, error) {
	path := filepath.Join(dir, "trace", "streams", "offline_lengths_seed0.csv")
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	return requests(rows, path, "")
}

func requests(rows []map[string]string, path, atCol string) ([]Request, error) {
	out := make([]Request, 0, len(rows))
	for _, r := range rows {
		var q Request
		var err error
		if atCol != "" {
			if q.At, err = num(r, atCol, path); err != nil {
				return nil, err
			}
		}
		in, err := num(r, "input_tokens", path)
		if err != nil {
			return nil, err
		}
		o, err := num(r, "output_tokens", path)
		if err != nil {
			return nil, err
		}
		q.Input, q.Output = int(in), int(o)
		out = append(out, q)
	}
	return out, nil
}

// Result is what one replay or run measured.
type Result struct {
	DecodeTokS     float64 // decode iterations back in the window ÷ its length (Helix's metric)
	GoodputTokS    float64 // output tokens of queries completed in the window ÷ its length
	TTFTp50        float64 // s
	TTFTp99        float64
	TPOTp50        float64
	TPOTp99        float64
	Issued         int
	Completed      int
	Failed         int
	FailedByCause  map[string]int // requests failed for good, by why (the Fail* names)
	FailedWithPath int            // of those, failed while every layer was served
	BrokenByCause  map[string]int // attempts broken (then replayed or failed), by cause
	Events         uint64
	KVOverflows    int
	OverCapBatches int
	Series         []float64 // decode tokens per SeriesBin seconds
	SeriesBin      float64
}

func (s *Sim) result() Result {
	w := s.win.End - s.win.Start
	st := s.stats
	r := Result{
		DecodeTokS: float64(st.decodeTokens) / w, GoodputTokS: float64(st.goodTokens) / w,
		TTFTp50: percentile(st.ttft, 0.5), TTFTp99: percentile(st.ttft, 0.99),
		TPOTp50: percentile(st.tpot, 0.5), TPOTp99: percentile(st.tpot, 0.99),
		Issued: st.issued, Completed: st.completed, Failed: st.failed, Events: s.fired,
		FailedByCause: map[string]int{}, FailedWithPath: st.failedWithPath, BrokenByCause: map[string]int{},
		KVOverflows: st.kvOverflow, OverCapBatches: st.overCap,
		Series: st.series.counts, SeriesBin: st.series.bin,
	}
	for k, v := range st.failedBy {
		r.FailedByCause[k] = v
	}
	for c, v := range st.breaks {
		if v > 0 {
			r.BrokenByCause[cause(c).String()] = v
		}
	}
	return r
}

// ReplayHelix runs one of Helix's simulations with our engine.
func ReplayHelix(dir string, run HelixRun, seed uint64) (Result, error) {
	c, typical, err := LoadHelixCluster(dir, run.Model, run.Placement, run.Machines)
	if err != nil {
		return Result{}, err
	}
	offline := run.Mode == "offline"
	win := Window{Start: 0, End: run.Measure}
	if offline {
		win = Window{Start: run.WarmUp, End: run.WarmUp + run.Measure}
	}
	s, err := newSim(c, nil, win)
	if err != nil {
		return Result{}, err
	}
	s.stats.series.bin = 30
	var mf *maxflowSched
	switch run.Scheduler {
	case "maxflow":
		mf, _ = newMaxflow(s, typical, run.KVHWM, run.KVRatio, offline)
		s.sched = mf
	case "swarm":
		s.sched = newSwarm(s)
	case "random":
		s.sched = &randomSched{rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	default:
		return Result{}, fmt.Errorf("%w: scheduler %q", ErrBadData, run.Scheduler)
	}
	if offline {
		lens, err := LoadHelixOfflineLengths(dir)
		if err != nil {
			return Result{}, err
		}
		next := 0
		feed := func() {
			if next >= len(lens) {
				return
			}
			r := lens[next]
			next++
			s.issue(r.Input, r.Output, s.now)
		}
		later := func() { s.schedule(&event{at: s.now + 0.1, kind: evFeed, fn: feed}) }
		for i := range run.InitialQueries {
			s.schedule(&event{at: 0.1 * float64(i), kind: evFeed, fn: feed})
		}
		if mf != nil {
			// Helix's MaxFlow feeder: after a prompt or a query completes,
			// one more query if the expected KV bottleneck is low enough.
			react := func(*query) {
				if mf.bottleneck(s) <= run.FeedHWM {
					later()
				}
			}
			s.onPrompt, s.onDone = react, react
		} else {
			s.onDone = func(*query) { later() }
		}
	} else {
		stream, err := LoadHelixStream(dir, run.Rate)
		if err != nil {
			return Result{}, err
		}
		for _, r := range stream {
			if r.At > win.End {
				break
			}
			s.schedule(&event{at: r.At, kind: evArrive, q: &query{input: r.Input, output: r.Output}})
		}
	}
	s.run(win.End)
	return s.result(), nil
}
