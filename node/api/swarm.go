package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// The swarm view: what this node knows of the swarm, read from its
// replica, its committed map and its peer table. It is one node's view:
// another node may lag a heartbeat or a commit behind.

type (
	swarmJSON struct {
		Node      string          `json:"node"` // the answering node
		Model     modelJSON       `json:"model"`
		Leader    *string         `json:"leader"`
		Voters    []string        `json:"voters"`
		Epoch     uint64          `json:"epoch"`
		Committed layers.LayerMap `json:"committed"`
		Pending   *pendingJSON    `json:"pending"`
		Members   []memberJSON    `json:"members"`
		// Routable: the answering node can route a full path now; when
		// not, NotReady says why (as /healthz?ready=1 does): no map
		// committed yet and the layers no node can hold, a layer without
		// a live holder, ...
		Routable bool   `json:"routable"`
		NotReady string `json:"not_ready,omitempty"`
		// StaticMap: the node runs on a fixed map, without consensus.
		StaticMap bool `json:"static_map"`
		// NAT is the answering node's reachability diagnosis.
		NAT natJSON `json:"nat"`
		// Config is the swarm's replicated configuration (all null on a
		// static map).
		Config swarmConfigJSON `json:"config"`
	}
	natJSON struct {
		Reachability string   `json:"reachability"` // public, private or unknown (AutoNAT's verdict)
		Forced       bool     `json:"forced"`       // set by configuration, not found out
		Relays       []string `json:"relays"`       // relays holding a slot for this node
		RelayService bool     `json:"relay_service"`
		// RelayRateMBs caps what the node relays for others, MB/s (0:
		// no cap); RelayedMB is what it relayed since start, in MB.
		RelayRateMBs  float64 `json:"relay_rate_mb_per_s"`
		RelayedMB     float64 `json:"relayed_mb"`
		RelayCircuits int64   `json:"relay_circuits"`
		// TCPOnly: no QUIC (swarm key), so hole punches try TCP alone.
		TCPOnly     bool   `json:"tcp_only"`
		Unreachable bool   `json:"unreachable"` // nobody can connect to this node
		Advice      string `json:"advice"`
	}
	pendingJSON struct {
		Map      layers.LayerMap `json:"map"`
		Since    time.Time       `json:"since"`
		Deadline time.Time       `json:"deadline"`
		Reason   string          `json:"reason"`
		Waiting  []string        `json:"waiting"` // members not ready yet
	}
	memberJSON struct {
		ID         string   `json:"id"`
		Self       bool     `json:"self"`
		Member     bool     `json:"member"` // in the replicated state (else only seen in the peer table)
		Voter      bool     `json:"voter"`
		Multiaddrs []string `json:"multiaddrs"`
		// State is what the node announces: joining, warming, serving or
		// draining ("" when no heartbeat was heard yet).
		State     string `json:"state"`
		Draining  bool   `json:"draining"`
		Liveness  string `json:"liveness"` // the peer table's verdict; "self" for this node
		Connected bool   `json:"connected"`
		Relayed   bool   `json:"relayed"`
		// Link is how this node is connected to the member: direct,
		// hole-punched, relayed, or "" when not connected.
		Link  string  `json:"link"`
		RTTMs float64 `json:"rtt_ms"`
		// LinkMBs is the bandwidth measured by probes on a relayed link,
		// in MB/s; 0 when not measured.
		LinkMBs float64 `json:"link_mb_per_s,omitempty"`
		// Simulated: the member serves the simulated engine. A swarm
		// serves one model (its rendezvous is scoped by the model's
		// fingerprint), so this is the same for every member.
		Simulated bool `json:"simulated"`
		// Engine computes the member's layers: "go" (the pure-Go,
		// bit-reproducible engine), "sim", or another backend with its
		// device, e.g. "ggml-CUDA0", which is not bit-reproducible
		// across devices or batch sizes; "" until a heartbeat is heard.
		Engine       string                  `json:"engine"`
		Capabilities *consensus.Capabilities `json:"capabilities"`
		Committed    *layers.Range           `json:"committed_range"`
		Pending      *layers.Range           `json:"pending_range"`
		Load         *loadJSON               `json:"load"`
		// Fetch is a member's fetch of weights from peers: the answering
		// node's own in full; another's, from its heartbeats, only while
		// it fetches (done and total bytes).
		Fetch *fetchJSON `json:"fetch,omitempty"`
	}
	fetchJSON struct {
		// DoneBytes of TotalBytes: the fetch in progress (TotalBytes 0:
		// none).
		DoneBytes  int64 `json:"done_bytes"`
		TotalBytes int64 `json:"total_bytes"`
		// FetchedBytes since the node started; HoldersDropped: holders
		// dropped for a bad chunk or a stall.
		FetchedBytes   int64 `json:"fetched_bytes"`
		HoldersDropped int64 `json:"holders_dropped"`
	}
	// loadJSON is a member's load from its latest heartbeat (this node's
	// own: now).
	loadJSON struct {
		Epoch          uint64       `json:"epoch"`
		Range          layers.Range `json:"range"`
		QueueDepth     int          `json:"queue_depth"`
		ActiveSessions int          `json:"active_sessions"`
		FreeKV         int64        `json:"free_kv_tokens"`
		LayerLatencyMs float64      `json:"layer_latency_ms"`
		Region         string       `json:"region,omitempty"`
		AgeMs          float64      `json:"age_ms"` // since it was heard
		// EntryQueue is how many requests wait in the member's entry
		// queue for a path with room, EntryWaitMs how long the oldest
		// has: the swarm's load table.
		EntryQueue  int     `json:"entry_queue"`
		EntryWaitMs float64 `json:"entry_wait_ms"`
		// Stolen and StolenFrom count work stealing (this node only):
		// requests it took from peers' queues, and peers took from its.
		Stolen     uint64 `json:"stolen,omitempty"`
		StolenFrom uint64 `json:"stolen_from,omitempty"`
	}
)

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func rangePtr(m layers.LayerMap, id string) *layers.Range {
	if r, ok := m.Range(id); ok {
		return &r
	}
	return nil
}

// views serves the node's read-only views: its model, its swarm and its
// scheduling configuration.
type views struct {
	b       Backend
	started time.Time // the models' creation time
}

func (s views) swarmView() swarmJSON {
	now := time.Now()
	self := s.b.ID()
	model := s.b.Model()
	committed := s.b.Committed()
	v := swarmJSON{Node: self.String(), Model: s.modelJSON(), Epoch: committed.Epoch, Committed: committed,
		Voters: []string{}, Members: []memberJSON{}}
	if v.Committed.Stages == nil {
		v.Committed.Stages = []layers.Stage{}
	}
	byID := map[string]*memberJSON{}
	add := func(id string) *memberJSON {
		if m, ok := byID[id]; ok {
			return m
		}
		m := &memberJSON{ID: id, Multiaddrs: []string{}, Simulated: model.Simulated, Committed: rangePtr(committed, id)}
		byID[id] = m
		return m
	}
	snap := s.b.Swarm()
	v.Routable = snap.RouteErr == nil
	if snap.RouteErr != nil {
		v.NotReady = message(snap.RouteErr)
	}
	pending, hasPending := snap.Pending, snap.HasPending
	if snap.Static {
		v.StaticMap = true
	} else {
		if snap.Leader != "" {
			ls := snap.Leader.String()
			v.Leader = &ls
		}
		for _, id := range snap.Voters {
			v.Voters = append(v.Voters, id.String())
		}
		slices.Sort(v.Voters)
		if hasPending {
			v.Pending = &pendingJSON{Map: pending.Map, Since: pending.Since, Deadline: pending.Deadline, Reason: pending.Reason,
				Waiting: append([]string{}, pending.Waiting()...)}
		}
		if snap.HasVerifyRate {
			r := snap.VerifyRate
			v.Config.VerifyRate = &r
		}
		if snap.HasSessionTokens {
			n := snap.SessionTokens
			v.Config.PlanSessionTokens = &n
		}
		v.Config.Stewards = snap.Stewards
		for _, mem := range snap.Members {
			m := add(mem.ID)
			m.Member = true
			m.Draining = mem.Draining
			caps := mem.Caps
			m.Capabilities = &caps
			m.Multiaddrs = append(m.Multiaddrs, mem.Addrs...)
		}
	}
	for _, st := range committed.Stages {
		m := add(st.Node)
		// A static map's nodes are its members; a node of a committed
		// map that is no member any more left the swarm (its layers wait
		// for a repair).
		m.Member = m.Member || snap.Static
	}
	for _, id := range v.Voters {
		add(id).Voter = true
	}

	nat := snap.NAT
	v.NAT = natJSON{Reachability: nat.Reachability, Forced: nat.Forced, Relays: []string{}, RelayService: nat.RelayService,
		Unreachable: nat.Unreachable, Advice: nat.Advice, RelayRateMBs: nat.Relaying.Rate / 1e6,
		RelayedMB: float64(nat.Relaying.Bytes) / 1e6, RelayCircuits: nat.Relaying.Circuits, TCPOnly: nat.TCPOnly}
	for _, r := range nat.Relays {
		v.NAT.Relays = append(v.NAT.Relays, r.String())
	}

	// This node, from what it announces now.
	me := add(self.String())
	me.Self, me.Liveness, me.Connected = true, "self", true
	if len(me.Multiaddrs) == 0 {
		for _, a := range snap.Addrs {
			me.Multiaddrs = append(me.Multiaddrs, a.String())
		}
	}
	if me.Capabilities == nil {
		me.Capabilities = &consensus.Capabilities{Hardware: snap.Hardware}
	}
	st := snap.Self
	me.State = st.State.String()
	me.Engine = engineLabel(st.Engine, model.Simulated)
	if f := snap.Fetch; f != (node.FetchProgress{}) {
		me.Fetch = &fetchJSON{DoneBytes: f.Done, TotalBytes: f.Total, FetchedBytes: f.Fetched, HoldersDropped: f.Dropped}
	}
	me.Load = &loadJSON{Epoch: st.Epoch, Range: snap.Held, QueueDepth: st.QueueDepth, ActiveSessions: st.ActiveSessions,
		FreeKV: st.FreeKV, LayerLatencyMs: ms(st.LayerLatency), Region: st.Region,
		EntryQueue: st.EntryQueue, EntryWaitMs: ms(st.EntryWait)}
	if m := s.b.Metrics(); m.Stolen != 0 || m.StolenFrom != 0 {
		me.Load.Stolen, me.Load.StolenFrom = m.Stolen, m.StolenFrom
	}

	// Everyone else, from the peer table.
	for _, p := range snap.Peers {
		m := add(p.ID.String())
		m.Liveness, m.Connected, m.Relayed, m.Link, m.RTTMs = p.Liveness.String(), p.Connected, p.Relayed, string(p.Link), ms(p.RTT)
		m.LinkMBs = p.Bandwidth / 1e6
		if len(m.Multiaddrs) == 0 {
			for _, a := range p.Addrs {
				m.Multiaddrs = append(m.Multiaddrs, a.String())
			}
		}
		if hb := p.Heartbeat; hb != nil {
			m.State = hb.State.String()
			m.Engine = engineLabel(hb.Engine, model.Simulated)
			m.Draining = m.Draining || hb.State == swarm.StateDraining
			m.Load = &loadJSON{Epoch: hb.Epoch, Range: layers.Range{Start: hb.RangeStart, End: hb.RangeEnd},
				QueueDepth: hb.QueueDepth, ActiveSessions: hb.ActiveSessions, FreeKV: hb.FreeKV,
				LayerLatencyMs: ms(hb.LayerLatency), Region: hb.Region, AgeMs: ms(now.Sub(p.HeardAt)),
				EntryQueue: hb.EntryQueue, EntryWaitMs: ms(hb.EntryWait)}
			if hb.FetchTotal > 0 {
				m.Fetch = &fetchJSON{DoneBytes: hb.FetchDone, TotalBytes: hb.FetchTotal}
			}
		}
	}
	for id, m := range byID {
		if m.Liveness == "" {
			m.Liveness = "unknown" // a member this node holds no row for
		}
		if hasPending {
			if r, ok := pending.Map.Range(id); ok {
				m.Pending = &r
			}
		}
		v.Members = append(v.Members, *m)
	}
	slices.SortFunc(v.Members, func(a, b memberJSON) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return v
}

func (s views) handleSwarm(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.swarmView())
}

type healthJSON struct {
	Status     string       `json:"status"` // ok, draining or closing
	Node       string       `json:"node"`
	Model      string       `json:"model"`
	Epoch      uint64       `json:"epoch"`
	MapCovers  bool         `json:"map_covers"`
	Routable   bool         `json:"routable"`
	NotReady   string       `json:"not_ready,omitempty"` // why ?ready=1 says no
	LayersHeld layers.Range `json:"layers_held"`
	Peers      int          `json:"live_peers"`
	InFlight   int          `json:"generations_in_flight"`
}

// handleHealth answers 200 while the server takes generations and 503
// while it drains or closes. With ?ready=1 it also answers 503 until the
// node can route a full path on its own view (a committed map covering
// every layer, whose hops it has heard from and that serve), for load
// balancers that should skip a node still joining and for `strata status
// --wait`: a map that covers every layer is not enough, since the hops of
// a fresh map may not have sent this node a heartbeat yet, and a request
// then found no path.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	m := s.b.Committed()
	snap := s.b.Swarm()
	live := 0
	for _, p := range snap.Peers {
		if p.Liveness == swarm.Alive {
			live++
		}
	}
	h := healthJSON{Status: "ok", Node: s.b.ID().String(), Model: s.b.Model().Name, Epoch: m.Epoch,
		MapCovers: m.Layers > 0 && m.Covers(), Routable: snap.RouteErr == nil, LayersHeld: snap.Held, Peers: live, InFlight: s.InFlight()}
	status := http.StatusOK
	s.mu.Lock()
	switch {
	case s.closed:
		h.Status, status = "closing", http.StatusServiceUnavailable
	case s.draining:
		h.Status, status = "draining", http.StatusServiceUnavailable
	}
	s.mu.Unlock()
	if status == http.StatusOK && r.URL.Query().Get("ready") != "" && (!h.MapCovers || !h.Routable) {
		h.Status, status = "not_ready", http.StatusServiceUnavailable
		h.NotReady = "the committed map does not cover every layer"
		if snap.RouteErr != nil {
			h.NotReady = message(snap.RouteErr)
		}
	}
	if status != http.StatusOK {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, h)
}

// schedulerJSON is GET /v1/swarm/scheduler: the effective scheduling
// configuration, defaults filled in, and the plugin names a configuration
// may use.
type schedulerJSON struct {
	routing.SchedulerConfig
	Filters []string `json:"filters"`
	Scorers []string `json:"scorers"`
	Pickers []string `json:"pickers"`
}

func (s views) handleScheduler(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, schedulerJSON{
		SchedulerConfig: s.b.Swarm().Scheduler,
		Filters:         routing.FilterPlugins(),
		Scorers:         routing.ScorerPlugins(),
		Pickers:         []string{routing.PickBestOfSlack, routing.PickWeightedRandom, routing.PickRoundRobin},
	})
}

// engineLabel is a member's engine from its heartbeat, which names only
// a backend other than the pure-Go engine.
func engineLabel(hb string, simulated bool) string {
	switch {
	case hb != "":
		return hb
	case simulated:
		return engine.EngineSim
	}
	return engine.EngineGo
}
