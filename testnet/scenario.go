package testnet

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/config"
)

// Scenario is one scenario file: the network, the model, the nodes, the
// load, the timeline of events and what the run must show.
type Scenario struct {
	Name        string      `yaml:"name"`
	Description string      `yaml:"description"`
	Network     NetworkSpec `yaml:"network"`
	Model       ModelSpec   `yaml:"model"`
	Nodes       []NodeSpec  `yaml:"nodes"`
	Load        LoadSpec    `yaml:"load"`
	Events      []EventSpec `yaml:"events"`
	// Public makes the swarm public, joined by name (public.go).
	Public *PublicSpec `yaml:"public"`
	// Nemesis draws faults from a seeded generator (nemesis.go); they
	// join Events.
	Nemesis *NemesisSpec `yaml:"nemesis"`
	// VerifyRate is the swarm's spot-check rate, replicated: the founder
	// commits it (--swarm-verify-rate), and every entry without its own
	// verify_rate follows it (nil: the founder's default).
	VerifyRate *float64 `yaml:"verify_rate"`
	// Duration is how long the load runs, from the moment every initial
	// node serves; event times count from the same moment.
	Duration time.Duration `yaml:"duration"`
	// ReadyTimeout bounds the wait for the initial nodes to serve (60s).
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	Expect       Expect        `yaml:"expect"`
	// Monitor runs strata monitor at the end of the load and holds its
	// report to the nodes' own views (monitor.go).
	Monitor bool `yaml:"monitor"`
}

// ModelSpec is the model every node serves: a random-weight model the
// runner generates with the engine's generator (Layers, Dim, Seed), or a
// built-in one SIMULATED (SimModel, with a GPU on every node).
type ModelSpec struct {
	Layers  int    `yaml:"layers"`
	Dim     int    `yaml:"dim"`
	Heads   int    `yaml:"heads"`    // 4
	KVHeads int    `yaml:"kv_heads"` // 2
	FFN     int    `yaml:"ffn"`      // 5/2 of Dim
	Seed    uint64 `yaml:"seed"`
	// Arch is the generated model's architecture (llama); Experts > 0
	// makes it a mixture of experts, ExpertsUsed a token, each ExpertFFN
	// wide (qwen3moe; llama's experts are FFN wide).
	Arch        string `yaml:"arch"`
	Experts     int    `yaml:"experts"`
	ExpertsUsed int    `yaml:"experts_used"`
	ExpertFFN   int    `yaml:"expert_ffn"`
	// DType is the weights' type as `strata model gen --dtype` takes it:
	// f32 (the default), f16, q8_0, …, or the q4_k_m, q5_k_m and
	// mxfp4_moe mixes.
	DType string `yaml:"dtype"`
	// SlidingWindow is gemma's and gpt-oss's local layers' window (0:
	// the generator's default), so that generations can outgrow it.
	SlidingWindow int    `yaml:"sliding_window"`
	SimModel      string `yaml:"sim_model"`
	// Threads is each node's engine goroutines (1).
	Threads int `yaml:"threads"`
}

// NodeSpec is one node.
type NodeSpec struct {
	Name      string `yaml:"name"`
	MaxLayers int    `yaml:"max_layers"`
	// Memory caps the node's weights and KV cache (--memory), such as
	// 4MiB: a small cap makes KV room, and the entry's queue, matter.
	Memory string  `yaml:"memory"`
	GPU    string  `yaml:"gpu"`
	Region string  `yaml:"region"`
	NAT    NATKind `yaml:"nat"`
	Rate   string  `yaml:"rate"`
	// Late nodes start only at a join event.
	Late bool `yaml:"late"`
	// VerifyRate is the node's spot-check rate as an entry (nil: the
	// node's default); Fault makes it lie, "MODE:EVERY" such as
	// "flip:50" (faults.go; needs a binary built with -tags faultinject).
	VerifyRate *float64 `yaml:"verify_rate"`
	Fault      string   `yaml:"fault"`
	// Fetch: the node has no model file; it joins with the model's
	// fingerprint (--model-id) and fetches its layers from peers.
	Fetch bool `yaml:"fetch"`
	// UploadRate caps what a node with the file sends to fetching peers
	// (--upload-rate, such as 20MiB).
	UploadRate string `yaml:"upload_rate"`
	// Steal turns the node's work stealing on (--steal).
	Steal bool `yaml:"steal"`
	// Engine computes the node's layers (--engine): go, ggml or auto;
	// "": the binary's default (go). ggml needs a binary built with make
	// build-ggml (testnet run --bin bin/strata-ggml).
	Engine string `yaml:"engine"`
	// FairAdmission: nil leaves the node's default (on); false turns
	// swarm-wide oldest-first admission off (--fair-admission=false).
	FairAdmission *bool `yaml:"fair_admission"`
	// Wire is how the node sends hidden states to its next hops (--wire:
	// f32, f16, q8 or auto; "": the node's default, f32). Outputs on f16
	// or q8 may differ from the reference: set expect.mismatched.
	Wire string `yaml:"wire"`
	// Steward: the founder of a public swarm signs this node in as a
	// steward (--stewards), one of the only voters.
	Steward bool `yaml:"steward"`
}

// LoadSpec is the client load: requests arrive as a Poisson process at
// Rate per second and are served by at most Clients concurrent clients
// (an arrival waits for a free client).
type LoadSpec struct {
	Clients int     `yaml:"clients"`
	Rate    float64 `yaml:"rate"`
	// Prompts distinct prompts of PromptWords words each, drawn from a
	// generator seeded with Seed; each request asks for MaxTokens tokens,
	// greedy (temperature 0).
	Prompts     int    `yaml:"prompts"`
	PromptWords int    `yaml:"prompt_words"`
	MaxTokens   int    `yaml:"max_tokens"`
	Seed        uint64 `yaml:"seed"`
	// Endpoint is "completions" (the default) or "chat".
	Endpoint string `yaml:"endpoint"`
	// Timeout bounds one request (60s).
	Timeout time.Duration `yaml:"timeout"`
	// Phases change the arrival rate over the run: each holds its rate
	// for its duration, in order from the start of the load; past the
	// last, its rate holds. None: Rate throughout.
	Phases []PhaseSpec `yaml:"phases"`
	// Hot names a node that gets HotShare of the requests as their entry
	// (the others share the rest in turn): a skewed load, as behind a
	// load balancer that prefers one node.
	Hot      string  `yaml:"hot"`
	HotShare float64 `yaml:"hot_share"`
	// QueueTimeout is each request's queue_timeout (0: the node's
	// default).
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// Capacity, when set, is measured before the timed load (see
	// CapacitySpec); phases may then give their rate as a multiple of it.
	Capacity *CapacitySpec `yaml:"capacity"`
}

// PhaseSpec is one phase of the load: Rate requests per second for For,
// or Times the measured capacity (load.capacity).
type PhaseSpec struct {
	For   time.Duration `yaml:"for"`
	Rate  float64       `yaml:"rate"`
	Times float64       `yaml:"times"`
}

// rateAt is the arrival rate at t since the load began.
func (l LoadSpec) rateAt(t time.Duration) float64 {
	var end time.Duration
	for _, p := range l.Phases {
		end += p.For
		if t < end {
			return p.Rate
		}
	}
	if n := len(l.Phases); n > 0 {
		return l.Phases[n-1].Rate
	}
	return l.Rate
}

// Event actions.
const (
	ActJoin       = "join"        // start a late node
	ActKill       = "kill"        // SIGKILL a node
	ActLeave      = "leave"       // SIGTERM a node: a graceful drain
	ActKillLeader = "kill_leader" // SIGKILL the Raft leader
	ActRejoin     = "rejoin"      // restart a stopped node with its data dir
	ActPartition  = "partition"   // cut traffic between groups of nodes
	ActHeal       = "heal"        // undo the partition
	ActPause      = "pause"       // SIGSTOP a node
	ActResume     = "resume"      // SIGCONT the node paused most recently
	ActDegrade    = "degrade"     // drop (Loss) or delay (Delay) a node's packets
	ActRestore    = "restore"     // undo a node's degrade
)

// Picks of EventSpec.Pick.
const (
	PickRedundant = "redundant"
	PickSole      = "sole"
	// PickLeader (pause) is the Raft leader, PickHop a stage holder that
	// does not lead.
	PickLeader = "leader"
	PickHop    = "hop"
)

// EventSpec is one event of the timeline.
type EventSpec struct {
	At     time.Duration `yaml:"at"`
	Action string        `yaml:"action"`
	// Node names the node (join, kill, leave; rejoin defaults to the
	// node stopped most recently and not yet restarted).
	Node string `yaml:"node"`
	// Pick chooses the node of a kill or leave from the committed map at
	// the event instead of Node: "redundant" is a running node whose
	// layers all have another running holder (its loss leaves every
	// layer served), "sole" one that alone holds some layer.
	Pick string `yaml:"pick"`
	// Groups are the partition's sides, by node name.
	Groups [][]string `yaml:"groups"`
	// Loss and Delay are a degrade's share of packets dropped and extra
	// one-way delay, to and from the node.
	Loss  float64       `yaml:"loss"`
	Delay time.Duration `yaml:"delay"`
	// Fault is the nemesis fault kind this event starts or undoes.
	Fault string `yaml:"fault"`
}

// Expect is what the run must show; a nil field is not checked.
type Expect struct {
	Failed     *int `yaml:"failed"`     // at most this many failed requests
	Mismatched *int `yaml:"mismatched"` // at most this many outputs differing from the reference
	MinOK      *int `yaml:"min_ok"`     // at least this many requests succeeded
	// Recovered: every event recovered before the next event or the end.
	Recovered *bool `yaml:"recovered"`
	// MaxRecovery bounds every event's recovery time.
	MaxRecovery time.Duration `yaml:"max_recovery"`
	// MaxWaitRatio bounds the hot entry's p99 queue wait by this many
	// times the largest p99 of the other entries (each taken as at least
	// MinWait, so that idle entries' near-zero waits do not make any wait
	// a violation).
	MaxWaitRatio float64       `yaml:"max_wait_ratio"`
	MinWait      time.Duration `yaml:"min_wait"`
	// Evicted: every faulty node was evicted (left out of a polled
	// committed map). MismatchedAfterEviction bounds the outputs that
	// differ from the reference among requests started after the last
	// eviction; MaxEviction bounds each eviction's time from the start of
	// the load.
	Evicted                 *bool         `yaml:"evicted"`
	MismatchedAfterEviction *int          `yaml:"mismatched_after_eviction"`
	MaxEviction             time.Duration `yaml:"max_eviction"`
	// Evicted false: no node left the map without an event, and no entry
	// had a fault accepted (an honest swarm). MaxMismatches bounds the
	// spot-check mismatches over all entries.
	MaxMismatches *int `yaml:"max_mismatches"`
	// MaxDetectionSteps bounds the steps of the faulty node's work that
	// every entry verified until the first mismatch (of all hops' work
	// when no node is faulty), MaxDetection its time from the start of
	// the load; either needs a mismatch to be found.
	MaxDetectionSteps *int          `yaml:"max_detection_steps"`
	MaxDetection      time.Duration `yaml:"max_detection"`
	// MaxWrongTokensAfterEviction bounds the delivered tokens that differ
	// from the oracle's and reached the client after the last eviction.
	MaxWrongTokensAfterEviction *int `yaml:"max_wrong_tokens_after_eviction"`
	// Linearizable: the committed maps form one linearizable history
	// (history.go). CleanRequests: no request was wrong, duplicated or
	// lost, and none failed outside a nemesis fault (nemesis.go).
	Linearizable  *bool `yaml:"linearizable"`
	CleanRequests *bool `yaml:"clean_requests"`
	// Overloaded: the load did overload the swarm: the hot entry (any
	// entry without one) queued, its p99 queue wait at least MinWait
	// (capacity.go).
	Overloaded *bool `yaml:"overloaded"`
	// MaxJoin bounds each start of a node of a public swarm, initial or
	// rejoin, from the process's start until it is a member, having
	// found the swarm by name (public.go).
	MaxJoin time.Duration `yaml:"max_join"`
}

// ErrScenario wraps every validation error; the message names the field.
var ErrScenario = errors.New("invalid scenario")

// LoadScenario reads and validates a scenario file.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := ParseScenario(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ParseScenario decodes a scenario strictly (unknown keys are errors),
// fills in defaults and validates it.
func ParseScenario(b []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty file", ErrScenario)
		}
		return nil, fmt.Errorf("%w: %w", ErrScenario, err)
	}
	s.defaults()
	if n := s.Nemesis; n != nil {
		if err := n.validate(s.Network.Mode); err != nil {
			return nil, err
		}
		var names []string
		for _, nd := range s.Nodes {
			if !nd.Late {
				names = append(names, nd.Name)
			}
		}
		s.Events = append(s.Events, NemesisEvents(*n, names, s.Duration)...)
		slices.SortStableFunc(s.Events, func(a, b EventSpec) int { return cmp.Compare(a.At, b.At) })
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Scenario) defaults() {
	if s.Nemesis != nil {
		s.Nemesis.defaults()
	}
	if s.Network.Mode == "" {
		s.Network.Mode = ModeLoopback
	}
	if s.ReadyTimeout == 0 {
		s.ReadyTimeout = time.Minute
	}
	m := &s.Model
	if m.SimModel == "" {
		if m.Heads == 0 {
			m.Heads = 4
		}
		if m.KVHeads == 0 {
			m.KVHeads = 2
		}
		if m.FFN == 0 {
			m.FFN = m.Dim * 5 / 2
		}
	}
	if m.Threads == 0 {
		m.Threads = 1
	}
	l := &s.Load
	if l.Clients == 0 {
		l.Clients = 1
	}
	if l.Prompts == 0 {
		l.Prompts = 8
	}
	if l.PromptWords == 0 {
		l.PromptWords = 6
	}
	if l.MaxTokens == 0 {
		l.MaxTokens = 16
	}
	if l.Endpoint == "" {
		l.Endpoint = "completions"
	}
	if l.Timeout == 0 {
		l.Timeout = time.Minute
	}
}

func bad(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrScenario, field, fmt.Sprintf(format, args...))
}

// Validate checks the scenario; each error names the offending field.
func (s *Scenario) Validate() error {
	switch s.Network.Mode {
	case ModeLoopback, ModeNamespaces:
	default:
		return bad("network.mode", "%q is neither %s nor %s", s.Network.Mode, ModeLoopback, ModeNamespaces)
	}
	regions := map[string]bool{}
	for i, r := range s.Network.Regions {
		if r.Name == "" || regions[r.Name] {
			return bad(fmt.Sprintf("network.regions[%d].name", i), "empty or repeated %q", r.Name)
		}
		regions[r.Name] = true
	}
	m := s.Model
	switch {
	case m.SimModel != "" && (m.Layers != 0 || m.Dim != 0):
		return bad("model", "give either sim_model or layers and dim, not both")
	case m.SimModel != "":
		if _, err := layers.Model(m.SimModel); err != nil {
			return bad("model.sim_model", "%v", err)
		}
	case m.Layers < 1 || m.Layers > 256:
		return bad("model.layers", "%d outside 1..256", m.Layers)
	case m.Dim < 8 || m.Dim%m.Heads != 0:
		return bad("model.dim", "%d: at least 8 and a multiple of heads (%d)", m.Dim, m.Heads)
	}
	if m.Threads < 0 {
		return bad("model.threads", "negative")
	}
	if m.SimModel == "" {
		if _, err := m.genConfig(); err != nil {
			return bad("model.dtype", "%v", err)
		}
	}
	if m.SlidingWindow < 0 {
		return bad("model.sliding_window", "negative")
	}
	if len(s.Nodes) == 0 {
		return bad("nodes", "no nodes")
	}
	if r := s.VerifyRate; r != nil && !(*r >= 0 && *r <= 1) {
		return bad("verify_rate", "%v outside [0, 1]", *r)
	}
	names := map[string]bool{}
	initial := 0
	for i, n := range s.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" || names[n.Name] {
			return bad(f+".name", "empty or repeated %q", n.Name)
		}
		names[n.Name] = true
		if n.MaxLayers < 0 {
			return bad(f+".max_layers", "negative")
		}
		if n.Memory != "" {
			if b, err := config.ParseByteSize(n.Memory); err != nil || b <= 0 {
				return bad(f+".memory", "%q: a positive byte count such as 4MiB", n.Memory)
			}
		}
		if m.SimModel != "" {
			if n.GPU == "" {
				return bad(f+".gpu", "a simulated model needs a device on every node")
			}
			if _, err := layers.Device(n.GPU); err != nil {
				return bad(f+".gpu", "%v", err)
			}
		}
		if n.Region != "" && !regions[n.Region] {
			return bad(f+".region", "%q is not in network.regions", n.Region)
		}
		if (n.NAT != NATNone || n.Rate != "" || n.Region != "") && s.Network.Mode != ModeNamespaces {
			return bad(f, "region, nat and rate need network.mode %s", ModeNamespaces)
		}
		if err := validateTrust(f, n); err != nil {
			return err
		}
		if _, err := node.ParseWire(n.Wire); err != nil {
			return bad(f+".wire", "%v", err)
		}
		switch n.Engine {
		case "", "go", "ggml", "auto":
		default:
			return bad(f+".engine", "%q: go, ggml or auto", n.Engine)
		}
		if n.Engine != "" && m.SimModel != "" {
			return bad(f+".engine", "a simulated model has no engine to choose")
		}
		if n.Fetch && m.SimModel != "" {
			return bad(f+".fetch", "a simulated model has no weights to fetch")
		}
		if !n.Late {
			initial++
		}
	}
	if p := s.Public; p != nil {
		if err := p.validate(s, regions); err != nil {
			return err
		}
	}
	for i, n := range s.Nodes {
		if n.Steward && s.Public == nil {
			return bad(fmt.Sprintf("nodes[%d].steward", i), "stewards are named by a public swarm's founder: needs public")
		}
	}
	if s.Expect.MaxJoin < 0 || (s.Expect.MaxJoin > 0 && s.Public == nil) {
		return bad("expect.max_join", "bounds joins by name: positive, and needs public")
	}
	if s.Nodes[0].Fetch {
		return bad("nodes[0].fetch", "the first node founds the swarm: it must hold the model file")
	}
	if initial == 0 {
		return bad("nodes", "every node is late: none founds the swarm")
	}
	if s.Nodes[0].Late {
		return bad("nodes[0].late", "the first node founds the swarm and cannot be late")
	}
	l := s.Load
	switch {
	case l.Clients < 1:
		return bad("load.clients", "%d: at least 1", l.Clients)
	case l.Rate < 0 || (l.Rate == 0 && len(l.Phases) == 0):
		return bad("load.rate", "%v: must be positive (requests per second), or give load.phases", l.Rate)
	case l.Prompts < 1:
		return bad("load.prompts", "%d: at least 1", l.Prompts)
	case l.PromptWords < 1:
		return bad("load.prompt_words", "%d: at least 1", l.PromptWords)
	case l.MaxTokens < 1:
		return bad("load.max_tokens", "%d: at least 1", l.MaxTokens)
	case l.Endpoint != "completions" && l.Endpoint != "chat":
		return bad("load.endpoint", "%q is neither completions nor chat", l.Endpoint)
	case l.Timeout < 0:
		return bad("load.timeout", "negative")
	case l.QueueTimeout < 0:
		return bad("load.queue_timeout", "negative")
	case l.Hot != "" && !names[l.Hot]:
		return bad("load.hot", "no node %q", l.Hot)
	case l.Hot != "" && (l.HotShare <= 0 || l.HotShare > 1):
		return bad("load.hot_share", "%v: in (0, 1]", l.HotShare)
	case l.Hot == "" && l.HotShare != 0:
		return bad("load.hot_share", "needs load.hot")
	}
	for i, p := range l.Phases {
		switch {
		case p.For <= 0 || p.Rate < 0 || p.Times < 0 || (p.Rate > 0) == (p.Times > 0):
			return bad(fmt.Sprintf("load.phases[%d]", i), "for must be positive, and one of rate and times")
		case p.Times > 0 && l.Capacity == nil:
			return bad(fmt.Sprintf("load.phases[%d].times", i), "needs load.capacity, the measurement it multiplies")
		}
	}
	if c := l.Capacity; c != nil && (c.For < 2*time.Second || c.Clients < 1) {
		return bad("load.capacity", "for at least 2s and at least 1 client")
	}
	if s.Duration <= 0 {
		return bad("duration", "must be positive, such as 30s")
	}
	if s.ReadyTimeout < 0 {
		return bad("ready_timeout", "negative")
	}
	var last time.Duration
	for i, e := range s.Events {
		f := fmt.Sprintf("events[%d]", i)
		if e.At < last || e.At > s.Duration {
			return bad(f+".at", "%v: events go in time order within the duration (%v)", e.At, s.Duration)
		}
		last = e.At
		needNode := false
		switch e.Action {
		case ActJoin, ActKill, ActLeave:
			needNode = true
		case ActRejoin, ActKillLeader, ActResume:
		case ActPause:
			needNode = true
		case ActDegrade, ActRestore:
			needNode = true
			if s.Network.Mode != ModeNamespaces {
				return bad(f+".action", "%s needs network.mode %s", e.Action, ModeNamespaces)
			}
			if e.Action == ActDegrade && (e.Loss < 0 || e.Loss >= 1 || e.Delay < 0 || (e.Loss == 0 && e.Delay == 0)) {
				return bad(f, "degrade needs loss in (0, 1) or a positive delay")
			}
		case ActPartition:
			if s.Network.Mode != ModeNamespaces {
				return bad(f+".action", "partition needs network.mode %s", ModeNamespaces)
			}
			if len(e.Groups) < 2 {
				return bad(f+".groups", "a partition needs at least two groups")
			}
			for j, g := range e.Groups {
				for _, name := range g {
					if !names[name] {
						return bad(fmt.Sprintf("%s.groups[%d]", f, j), "no node %q", name)
					}
				}
			}
		case ActHeal:
			if s.Network.Mode != ModeNamespaces {
				return bad(f+".action", "heal needs network.mode %s", ModeNamespaces)
			}
		default:
			return bad(f+".action", "%q is not one of join, kill, leave, kill_leader, rejoin, partition, heal, pause, resume, degrade, restore", e.Action)
		}
		switch {
		case e.Pick != "" && e.Action != ActKill && e.Action != ActLeave && e.Action != ActPause:
			return bad(f+".pick", "only kill, leave and pause pick their node")
		case e.Action == ActPause && e.Pick != "" && e.Pick != PickLeader && e.Pick != PickHop:
			return bad(f+".pick", "%q: a pause picks %s or %s", e.Pick, PickLeader, PickHop)
		case e.Action != ActPause && e.Pick != "" && e.Pick != PickRedundant && e.Pick != PickSole:
			return bad(f+".pick", "%q is neither %s nor %s", e.Pick, PickRedundant, PickSole)
		case e.Pick != "" && e.Node != "":
			return bad(f+".pick", "give node or pick, not both")
		case e.Pick != "":
			needNode = false
		}
		if needNode && e.Node == "" {
			return bad(f+".node", "%s needs a node", e.Action)
		}
		if e.Node != "" && !names[e.Node] {
			return bad(f+".node", "no node %q", e.Node)
		}
		if e.Action == ActJoin && !s.node(e.Node).Late {
			return bad(f+".node", "%s is not late: it starts with the swarm", e.Node)
		}
	}
	x := s.Expect
	for _, c := range []struct {
		name string
		v    *int
	}{{"expect.failed", x.Failed}, {"expect.mismatched", x.Mismatched}, {"expect.min_ok", x.MinOK},
		{"expect.mismatched_after_eviction", x.MismatchedAfterEviction}, {"expect.max_mismatches", x.MaxMismatches},
		{"expect.max_detection_steps", x.MaxDetectionSteps}, {"expect.max_wrong_tokens_after_eviction", x.MaxWrongTokensAfterEviction}} {
		if c.v != nil && *c.v < 0 {
			return bad(c.name, "negative")
		}
	}
	if x.MaxRecovery < 0 {
		return bad("expect.max_recovery", "negative")
	}
	if x.MaxDetection < 0 || x.MaxEviction < 0 {
		return bad("expect.max_detection", "negative max_detection or max_eviction")
	}
	if x.MaxWaitRatio < 0 || x.MinWait < 0 {
		return bad("expect.max_wait_ratio", "negative ratio or min_wait")
	}
	if x.MaxWaitRatio > 0 && l.Hot == "" {
		return bad("expect.max_wait_ratio", "compares the hot entry with the others: needs load.hot")
	}
	return nil
}

func (s *Scenario) node(name string) NodeSpec {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	return NodeSpec{}
}
