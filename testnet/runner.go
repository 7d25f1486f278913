package testnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stratanet/strata/engine"
)

// Option configures Run.
type Option func(*options) error

type options struct {
	bin    string
	runDir string
	net    Network
	log    io.Writer
}

// WithBinary runs the nodes from this strata binary (default: the
// running executable).
func WithBinary(path string) Option {
	return func(o *options) error {
		abs, err := filepath.Abs(path)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("binary: %w", err)
		}
		o.bin = abs
		return nil
	}
}

// WithRunDir keeps the run's model, data dirs, logs and report in dir
// (default: a new directory under the system's temporary directory).
func WithRunDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return errors.New("run dir: empty")
		}
		o.runDir = dir
		return nil
	}
}

// WithNetwork runs on nw instead of the network the scenario names; Run
// still calls its Setup and Close.
func WithNetwork(nw Network) Option {
	return func(o *options) error { o.net = nw; return nil }
}

// WithProgress writes a line per step of the run (start, events, end).
func WithProgress(w io.Writer) Option {
	return func(o *options) error { o.log = w; return nil }
}

// sample is one poll of a live node's /v1/swarm.
type sample struct {
	At     time.Duration // since the load began
	Node   string        // the node asked
	Epoch  uint64
	Leader string // node name ("" when none is known)
	Covers bool   // the committed map covers every layer
	// Healthy: it covers every layer on nodes the runner has not stopped.
	Healthy bool
	Stages  []string // "name[start,end)"
	// For the history checker: the node's process life, the map's hash,
	// and when the poll was sent and answered.
	Life         int
	Hash         string
	Call, Return time.Time
}

// eventRun is what happened at one event.
type eventRun struct {
	EventSpec
	Node string        // the node acted on (kill_leader: the leader found)
	At   time.Duration // when it was carried out, since the load began
	Err  string        // it could not be carried out
	// Skipped: a nemesis fault whose target did not exist (no leader
	// known), or the undoing of such a fault; not a failure of the run.
	Skipped string
	Exited  time.Duration // leave: when the process exited (0: not seen)
	// Done is when the action took effect (a pick polls the map first);
	// a map polled before it says nothing about the recovery.
	Done time.Duration
}

// run is the state of one scenario run.
type run struct {
	sc      *Scenario
	o       options
	c       *cluster
	hc      *http.Client
	t0      time.Time
	mu      sync.Mutex
	samples []sample
	ready   map[*proc]bool
	next    int        // round robin over entry nodes
	rng     *rand.Rand // run-time picks (a hop to pause), under mu
	// joins are the measured joins by name of a public swarm, by
	// watchers that joinCtx ends and joinWG waits for.
	joins      []JoinReport
	joinCtx    context.Context
	joinCancel context.CancelFunc
	joinWG     sync.WaitGroup
}

// watchJoins measures p's current start's join, in the background, when
// the swarm is public.
func (r *run) watchJoins(p *proc) {
	if r.sc.Public == nil {
		return
	}
	r.joinWG.Go(func() { r.watchJoin(r.joinCtx, p) })
}

func (r *run) logf(format string, args ...any) {
	if r.o.log == nil {
		return
	}
	at := ""
	if !r.t0.IsZero() {
		at = fmt.Sprintf("t=%5.1fs ", time.Since(r.t0).Seconds())
	}
	fmt.Fprintf(r.o.log, "%s%s\n", at, fmt.Sprintf(format, args...))
}

// Run runs a scenario: it starts the nodes on the scenario's network
// (or WithNetwork's), drives the load and the events, stops every process
// it started, and returns the report, also written as report.md and
// report.json in the run directory. An error means the run could not be
// carried out; a run that went but missed its expectations returns a
// report whose Pass is false.
func Run(ctx context.Context, sc *Scenario, opts ...Option) (rep *Report, err error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.bin == "" {
		if o.bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("testnet: the strata binary: %w", err)
		}
	}
	if o.runDir == "" {
		if o.runDir, err = os.MkdirTemp("", "strata-scenario-"); err != nil {
			return nil, err
		}
	} else {
		// A used run dir holds old identities and Raft state: refuse it
		// rather than delete what an earlier run left.
		if ents, err := os.ReadDir(o.runDir); err == nil && len(ents) > 0 {
			return nil, fmt.Errorf("testnet: run dir %s is not empty", o.runDir)
		}
		if err := os.MkdirAll(o.runDir, 0o755); err != nil {
			return nil, err
		}
	}
	if o.runDir, err = filepath.Abs(o.runDir); err != nil {
		return nil, err
	}
	if o.net == nil {
		switch sc.Network.Mode {
		case ModeNamespaces:
			if o.net, err = NewNamespaces(sc.Network); err != nil {
				return nil, fmt.Errorf("testnet: network: %w", err)
			}
		default:
			o.net = NewLoopback()
		}
	}
	var seed uint64
	if sc.Nemesis != nil {
		seed = sc.Nemesis.Seed
	}
	r := &run{sc: sc, o: o, hc: &http.Client{}, ready: map[*proc]bool{}, rng: rand.New(rand.NewPCG(seed, 0x686f70))}
	r.logf("run directory %s", o.runDir)
	r.joinCtx, r.joinCancel = context.WithCancel(ctx)
	defer r.joinCancel()

	// The model and the reference answers, before any node competes for
	// the CPU.
	modelArgs, modelPath, err := r.model()
	if err != nil {
		return nil, err
	}
	prompts := Prompts(sc.Load.Seed, sc.Load.Prompts, sc.Load.PromptWords)
	refs, err := Reference(ctx, sc.Model, modelPath, sc.Nodes[0].GPU, prompts, sc.Load.Endpoint == "chat", sc.Load.MaxTokens)
	if err != nil {
		return nil, fmt.Errorf("testnet: reference run: %w", err)
	}

	if r.c, err = newCluster(o.net, o.bin, o.runDir, modelArgs, sc.Nodes); err != nil {
		return nil, err
	}
	r.c.swarmRate = sc.VerifyRate
	r.c.public = sc.Public
	if modelPath != "" {
		if r.c.fetchArgs, err = fetchArgs(modelPath, sc.Model.Threads); err != nil {
			return nil, err
		}
	}
	var places []Placement
	for _, n := range sc.Nodes {
		places = append(places, Placement{Name: n.Name, Region: n.Region, NAT: n.NAT, Rate: n.Rate})
	}
	if sc.Public != nil {
		places = append(places, sc.Public.placements()...)
	}
	if err := o.net.Setup(ctx, places); err != nil {
		o.net.Close() //nolint:errcheck // the Setup error says more
		return nil, fmt.Errorf("testnet: network setup: %w", err)
	}
	defer func() {
		r.c.stopAll()
		if cerr := o.net.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("testnet: network close: %w", cerr)
		}
	}()

	if p := sc.Public; p != nil {
		if r.c.stewards, err = r.c.stewardIDs(); err != nil {
			return nil, fmt.Errorf("testnet: %w", err)
		}
		if r.c.dhtAddrs, err = r.c.startDHTServers(ctx, p.DHTServers); err != nil {
			return nil, fmt.Errorf("testnet: public DHT: %w", err)
		}
		r.logf("public DHT stand-ins: %s", strings.Join(r.c.dhtAddrs, " "))
	}
	if err := r.startInitial(ctx); err != nil {
		return nil, err
	}
	modelID, err := r.modelID(ctx)
	if err != nil {
		return nil, err
	}

	var capacity *CapacityReport
	if c := sc.Load.Capacity; c != nil {
		r.logf("measuring the swarm's capacity: %d clients for %v", c.Clients, c.For)
		cl := &load{spec: sc.Load, model: modelID, prompts: prompts, hc: r.hc, pick: r.pick, named: r.named, retry: clientRetry}
		res, rps := cl.measureCapacity(ctx, *c)
		capacity = &CapacityReport{RPS: rps, Requests: len(res)}
		for _, x := range res {
			switch {
			case !x.OK:
				capacity.Failed++
			case x.Text != refs[x.Prompt].Text:
				capacity.Mismatched++
			}
		}
		if rps <= 0 {
			return nil, fmt.Errorf("testnet: capacity: no request completed in %v", c.For)
		}
		sc.Load.Phases = slices.Clone(sc.Load.Phases)
		capacity.Offered = sc.Load.offer(rps)
		r.logf("capacity %.1f requests/s; offering %v", rps, capacity.Offered)
	}

	// The clock starts: load, polling and events.
	r.t0 = time.Now()
	end := r.t0.Add(sc.Duration)
	r.logf("the swarm serves; load for %v", sc.Duration)
	pollCtx, stopPoll := context.WithCancel(ctx)
	var pollWG sync.WaitGroup
	pollWG.Go(func() { r.poll(pollCtx) })

	ld := &load{spec: sc.Load, model: modelID, prompts: prompts, hc: r.hc, pick: r.pick, named: r.named, retry: clientRetry}
	var results []result
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		results = ld.run(ctx, r.t0, end)
	}()

	events := r.timeline(ctx)
	<-loadDone
	stopPoll()
	pollWG.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("testnet: run interrupted: %w", ctx.Err())
	}
	loadEnd := time.Since(r.t0)
	r.logf("load done: %d requests", len(results))
	reach := r.reachability(ctx)
	var mon *MonitorReport
	if sc.Monitor {
		mon = r.monitor(ctx, reach)
	}
	verify := r.verifyStats(ctx)
	r.joinCancel()
	r.joinWG.Wait()

	var crashed []string
	for _, p := range r.c.procs {
		if p.crashed() {
			crashed = append(crashed, p.spec.Name)
		}
	}
	r.mu.Lock()
	samples := append([]sample(nil), r.samples...)
	evs := make([]eventRun, len(events))
	for i, e := range events {
		evs[i] = *e
	}
	r.mu.Unlock()
	rep = buildReport(sc, results, refs, evs, samples, loadEnd, crashed, verify)
	if capacity != nil {
		rep.Capacity = capacity
		if capacity.Mismatched > 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("capacity measurement: %d outputs differ from the reference", capacity.Mismatched))
		}
	}
	rep.Violations = append(rep.Violations, checkOverload(sc, rep)...)
	r.mu.Lock()
	rep.Joins = slices.Clone(r.joins)
	r.mu.Unlock()
	slices.SortStableFunc(rep.Joins, func(a, b JoinReport) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Start, b.Start))
	})
	rep.Violations = append(rep.Violations, checkJoins(sc, rep.Joins)...)
	rep.RunDir, rep.Network = o.runDir, sc.Network.Mode
	r.checkHistory(rep, samples)
	if sc.Nemesis != nil {
		rep.Nemesis = nemesisReport(sc.Nemesis, evs, rep)
		total, longest := leaderless(samples)
		rep.Nemesis.LeaderlessS, rep.Nemesis.LeaderlessMaxS = secs(total), secs(longest)
		rep.Nemesis.History = rep.History
		rep.Nemesis.Requests = checkRequests(rep.Results, refs, faultWindows(evs, rep, loadEnd))
	}
	rep.Violations = append(rep.Violations, checkNemesis(sc.Expect, rep)...)
	if mon != nil {
		rep.Monitor = mon
		rep.Violations = append(rep.Violations, mon.Violations...)
	}
	rep.Pass = len(rep.Violations) == 0
	rep.Reachability = reach
	for _, nr := range reach {
		rep.Stolen += nr.Stolen
	}
	if err := rep.write(o.runDir); err != nil {
		return rep, err
	}
	return rep, nil
}

// model writes the generated model into the run dir, or names the
// simulated one, and returns the node flags that serve it.
func (r *run) model() (args []string, path string, err error) {
	m := r.sc.Model
	if m.SimModel != "" {
		return []string{"--sim-model", m.SimModel, "--threads", fmt.Sprint(m.Threads)}, "", nil
	}
	c, err := m.genConfig()
	if err != nil {
		return nil, "", fmt.Errorf("testnet: model: %w", err)
	}
	path = filepath.Join(r.o.runDir, "model.gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		return nil, "", fmt.Errorf("testnet: model: %w", err)
	}
	return []string{"--model", path, "--threads", fmt.Sprint(m.Threads)}, path, nil
}

// genConfig is the generator's configuration of the model.
func (m ModelSpec) genConfig() (engine.GenConfig, error) {
	c := engine.DefaultGenConfig()
	c.Layers, c.Dim, c.Heads, c.KVHeads, c.FFN, c.Seed = m.Layers, m.Dim, m.Heads, m.KVHeads, m.FFN, m.Seed
	c.Experts, c.ExpertsUsed, c.ExpertFFN = m.Experts, m.ExpertsUsed, m.ExpertFFN
	c.SlidingWindow = m.SlidingWindow
	if m.Arch != "" {
		c.Arch = m.Arch
	}
	switch m.DType {
	case "":
	case "q4_k_m", "q5_k_m", "mxfp4_moe":
		c.Mix = m.DType
	default:
		t, err := engine.ParseDType(m.DType)
		if err != nil {
			return c, err
		}
		c.DType = t
	}
	return c, nil
}

// fetchArgs are the node flags of a node without the model file: the
// model's fingerprint, which it joins with.
func fetchArgs(path string, threads int) ([]string, error) {
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("testnet: model: %w", err)
	}
	defer fh.Close()
	fp, err := f.Fingerprint()
	if err != nil {
		return nil, fmt.Errorf("testnet: model: %w", err)
	}
	return []string{"--model-id", fp, "--threads", fmt.Sprint(threads)}, nil
}

// startInitial starts the founder, then every other node that is not
// late, and waits until each serves.
func (r *run) startInitial(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, r.sc.ReadyTimeout)
	defer cancel()
	var started []*proc
	for _, p := range r.c.procs {
		if p.spec.Late {
			continue
		}
		if err := r.c.start(rctx, p); err != nil {
			return fmt.Errorf("testnet: %w", err)
		}
		r.watchJoins(p)
		r.logf("started %s: %s", p.spec.Name, p.addr)
		started = append(started, p)
		if len(started) > 1 {
			// One join at a time: the leader places each node knowing the
			// ones before, so the same scenario gives the same map.
			if err := r.joined(rctx, started[0], p); err != nil {
				return fmt.Errorf("testnet: %s did not join within ready_timeout %v: %w", p.spec.Name, r.sc.ReadyTimeout, err)
			}
		}
	}
	for _, p := range started {
		if err := waitReady(rctx, p); err != nil {
			return fmt.Errorf("testnet: %w (within ready_timeout %v)", err, r.sc.ReadyTimeout)
		}
		r.setReady(p, true)
	}
	if err := r.settle(rctx, started); err != nil {
		return fmt.Errorf("testnet: the swarm did not settle within ready_timeout %v: %w", r.sc.ReadyTimeout, err)
	}
	return nil
}

// joined waits until the founder's view shows p as a member holding a
// committed range, or as a member for 3 s with no map change pending (the
// leader may give it nothing).
func (r *run) joined(ctx context.Context, founder, p *proc) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var since time.Time
	for {
		if v, err := founder.swarmView(ctx); err == nil {
			for _, m := range v.Members {
				if m.ID != p.peerID || !m.Member {
					continue
				}
				if m.Committed != nil {
					return nil
				}
				if v.Pending == nil {
					if since.IsZero() {
						since = time.Now()
					} else if time.Since(since) > 3*time.Second {
						return nil
					}
				} else {
					since = time.Time{}
				}
			}
		}
		if p.crashed() {
			return fmt.Errorf("node %s exited; see %s", p.spec.Name, p.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// settle waits until the swarm is done forming: no map change pending,
// every node on the same committed epoch, and each node seeing every
// stage holder alive and serving. A node's /healthz turns ready as soon
// as the map covers every layer, before its peers' heartbeats say they
// serve; the load starts only once the swarm's own routing would find a
// path from every entry.
func (r *run) settle(ctx context.Context, procs []*proc) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	why := ""
	for {
		why = r.unsettled(ctx, procs)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%s)", ctx.Err(), why)
		case <-tick.C:
		}
	}
}

// unsettled says why the swarm has not settled ("" when it has).
func (r *run) unsettled(ctx context.Context, procs []*proc) string {
	var epoch uint64
	for i, p := range procs {
		v, err := p.swarmView(ctx)
		if err != nil {
			return err.Error()
		}
		if v.Pending != nil {
			return p.spec.Name + " sees a pending map"
		}
		if i == 0 {
			epoch = v.Committed.Epoch
		} else if v.Committed.Epoch != epoch {
			return fmt.Sprintf("%s is on epoch %d, %s on %d", p.spec.Name, v.Committed.Epoch, procs[0].spec.Name, epoch)
		}
		for _, st := range v.Committed.Stages {
			ok := false
			for _, m := range v.Members {
				if m.ID == st.Node {
					ok = (m.Liveness == "alive" || m.Liveness == "self") && (m.State == "serving" || m.State == "warming")
				}
			}
			if !ok {
				return fmt.Sprintf("%s does not see %s serving", p.spec.Name, r.nameOf(st.Node))
			}
		}
	}
	return ""
}

func (r *run) setReady(p *proc, v bool) {
	r.mu.Lock()
	r.ready[p] = v
	r.mu.Unlock()
}

// pick returns the next entry node in turn: one that runs, that has
// served since its last start, that the runner can reach, and not avoid.
func (r *run) pick(avoid *proc) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.c.procs)
	for k := range n {
		p := r.c.procs[(r.next+k)%n]
		if p != avoid && p.apiURL != "" && r.ready[p] && p.running() {
			r.next = (r.next + k + 1) % n
			return p
		}
	}
	return nil
}

// named returns the node of that name when it could be picked now (it
// runs, has served since its last start and can be reached), else nil.
func (r *run) named(name string) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.c.procs {
		if p.spec.Name == name && p.apiURL != "" && r.ready[p] && p.running() {
			return p
		}
	}
	return nil
}

// modelID asks a node for the model's name, which requests must carry.
func (r *run) modelID(ctx context.Context) (string, error) {
	p := r.pick(nil)
	if p == nil {
		return "", errors.New("testnet: no node to ask for the model")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := p.client.FirstModel(ctx)
	if err != nil {
		return "", fmt.Errorf("testnet: %w", err)
	}
	return m, nil
}

// drainWait bounds the wait for a leaving node to exit.
const drainWait = 2 * time.Minute

// checkHistory parses every node's applied-map lines, adds the polls as
// reads, and runs the history checker.
func (r *run) checkHistory(rep *Report, samples []sample) {
	var ops []MapOp
	for _, p := range r.c.procs {
		p.mu.Lock()
		starts := slices.Clone(p.startedAt)
		p.mu.Unlock()
		if len(starts) == 0 {
			continue
		}
		got, err := parseNodeLog(p.log, p.spec.Name, starts)
		if err != nil {
			rep.HistoryErr = err.Error()
			return
		}
		ops = append(ops, got...)
	}
	applied := len(ops)
	for _, s := range samples {
		if s.Epoch > 0 && s.Life > 0 {
			ops = append(ops, MapOp{Node: s.Node, Life: s.Life, Kind: OpRead, Epoch: s.Epoch, Hash: s.Hash, Call: s.Call, Return: s.Return})
		}
	}
	if applied == 0 {
		rep.HistoryErr = ErrNoHistory.Error()
		return
	}
	v := CheckHistory(ops, historyTimeout)
	rep.History = &v
	r.logf("history: linearizable %v (porcupine %s), %d maps, %d lives, %d applies, %d reads", v.Linearizable, v.Porcupine, v.Maps, v.Lives, v.Applies, v.Reads)
}

// historyTimeout bounds Porcupine's search.
const historyTimeout = 2 * time.Minute
