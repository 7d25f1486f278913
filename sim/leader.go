package sim

import (
	"fmt"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
)

// Strata's control plane in the simulator is the consensus package's pure
// leader decision, consensus.Decide, folded by consensus.State.Apply: the
// same function and state the real leader loop (consensus/leader.go)
// runs, with none of Raft's goroutines. The simulator plays the parts
// around it: Raft commits (instant, while a majority of voters is up),
// configuration changes, liveness (a peer is dead DeadAfterS after it
// died), elections (a live voter leads ElectionS after the leader died),
// and the members' warmups (a node loads the new layers of a proposal
// while it serves its old range, then reports StageReady; it switches to
// its new range when the map commits).

// The real defaults the leader decides by (consensus.Default*).
const (
	deadGrace      = consensus.DefaultDeadGrace
	stableAfter    = consensus.DefaultStableAfter
	maxVoters      = consensus.DefaultMaxVoters
	warmupTimeout  = consensus.DefaultWarmupTimeout
	laggardPenalty = consensus.DefaultLaggardPenalty
	leaderTick     = consensus.DefaultTick
	// election is how long the swarm is without a leader after the
	// leader dies: Raft's heartbeat timeout plus an election.
	election = consensus.DefaultHeartbeatTimeout + consensus.DefaultElectionTimeout
)

// leader is the control plane's state in a Strata run.
type leader struct {
	cfg       consensus.LeaderConfig
	state     consensus.State
	mem       consensus.LeaderState
	servers   []consensus.RaftServer
	deadSince map[string]time.Time
	self      int  // index of the leading node; -1: none
	kicked    bool // a decision round is scheduled now
	// prepared is the range each node has loaded for the pending map
	// (so that a re-proposal of the same range needs no second load);
	// loadKey the load in progress, kept across a proposal that asks for
	// the same epoch and range (consensus.DecideWarmup's rule).
	prepared []layers.Range
	loadKey  []consensus.Load
	// Decisions counts decisions taken, Stalls rounds without a quorum,
	// Errors decisions that returned an error.
	Decisions, Stalls, Errors int
}

func (w *world) at() time.Time { return w.epoch.Add(time.Duration(w.s.now * float64(time.Second))) }

// startLeader makes the first live machine that is not relayed the
// founding voter and leader; every machine up at the start asks to join.
func (w *world) startLeader(init []int) error {
	l := &leader{self: -1, deadSince: map[string]time.Time{}, prepared: make([]layers.Range, len(w.spec.Nodes)),
		loadKey: make([]consensus.Load, len(w.spec.Nodes))}
	l.cfg = consensus.LeaderConfig{Model: w.model, Planner: layers.NewPlanner(), CostParams: layers.DefaultCostParams(),
		DeadGrace: deadGrace, StableAfter: stableAfter, MaxVoters: maxVoters, Warmup: warmupTimeout,
		LaggardPenalty: laggardPenalty, RebalanceEvery: time.Duration(w.spec.Timing.RebalanceS * float64(time.Second))}
	w.lead = l
	// The founder's swarm configuration is the log's first record, as
	// the real founder's leader appends it before it plans (consensus
	// Decide's step 1c); applied here, it takes no decision of the first
	// round.
	if n, ok := w.planSessionTokens(); ok {
		next, err := l.state.Apply(consensus.Record{At: w.at(), Event: consensus.SessionTokensSet{Tokens: n}})
		if err != nil {
			return fmt.Errorf("sim: the founder's session length: %w", err)
		}
		l.state = next
	}
	for _, i := range init {
		if !w.spec.Nodes[i].Relayed {
			l.self = i
			break
		}
	}
	if l.self < 0 && len(init) > 0 {
		l.self = init[0]
	}
	if l.self >= 0 {
		l.servers = []consensus.RaftServer{{ID: w.spec.Nodes[l.self].ID, Voter: true}}
		l.mem = consensus.NewLeaderState(w.at())
	}
	for _, i := range init {
		w.request(consensus.NodeJoined{Node: w.spec.Nodes[i].ID, Caps: w.caps(i), Fingerprint: "sim:" + w.spec.Model}, i)
	}
	if l.cfg.RebalanceEvery > 0 {
		var tick func()
		tick = func() {
			w.kick()
			w.s.schedule(&event{at: w.s.now + w.spec.Timing.RebalanceS, kind: evCallback, fn: tick})
		}
		w.s.schedule(&event{at: w.spec.Timing.RebalanceS, kind: evCallback, fn: tick})
	}
	return nil
}

func (w *world) caps(i int) consensus.Capabilities {
	n := w.pnodes[i]
	return consensus.Capabilities{Hardware: n.Hardware, Region: n.Region, MaxLayers: n.MaxLayers, Relayed: w.spec.Nodes[i].Relayed}
}

// quorum reports whether a majority of the voters is up.
func (w *world) quorum() bool {
	up, all := 0, 0
	for _, sv := range w.lead.servers {
		if !sv.Voter {
			continue
		}
		all++
		if j, ok := w.idx[sv.ID]; ok && w.up[j] {
			up++
		}
	}
	return all > 0 && 2*up > all
}

// commit folds an event into the replicated state, as a Raft commit
// would, and plays the members' part in it. down: no leader or no
// quorum took it (a member asks again); otherwise ok says whether the
// state admitted it.
func (w *world) commit(e consensus.Event) (ok, down bool) {
	l := w.lead
	if l.self < 0 || !w.up[l.self] || !w.quorum() {
		return false, true
	}
	before := l.state
	next, err := l.state.Apply(consensus.Record{At: w.at(), Event: e})
	if err != nil {
		return false, false
	}
	l.state = next
	switch e := e.(type) {
	case consensus.NodeJoined:
		if i, ok := w.idx[e.Node]; ok {
			w.known[i] = true
		}
		w.kickAt(w.s.now + stableAfter.Seconds())
	case consensus.NodeLeft:
		if i, ok := w.idx[e.Node]; ok {
			w.known[i] = false
		}
	case consensus.MapProposed:
		w.warmup(e)
	case consensus.MapCommitted:
		w.cancelLoads()
		w.switchTo(before.Committed(), next.Committed(), before.Committed().Layers == 0)
	case consensus.WarmupAbandoned:
		w.cancelLoads()
		if !e.Until.IsZero() {
			w.kickAt(e.Until.Sub(w.epoch).Seconds())
		}
	}
	return true, false
}

// request is a member's request to the leader (a join, a ready report):
// the leader appends it and decides again. Without a leader the member
// asks again at its next tick, while it is up.
func (w *world) request(e consensus.Event, from int) {
	ok, down := w.commit(e)
	switch {
	case ok:
		w.kick()
	case down:
		w.s.schedule(&event{at: w.s.now + leaderTick.Seconds(), kind: evCallback, fn: func() {
			if w.up[from] {
				w.request(e, from)
			}
		}})
	}
}

// kick schedules a decision round now; kickAt one at t.
func (w *world) kick() {
	if w.lead.kicked {
		return
	}
	w.lead.kicked = true
	w.s.schedule(&event{at: w.s.now, kind: evCallback, fn: w.decideRound})
}

func (w *world) kickAt(t float64) {
	w.s.schedule(&event{at: t, kind: evCallback, fn: w.kick})
}

// decideRound is one pass of the leader loop: up to 32 decisions, each
// carried out at once.
func (w *world) decideRound() {
	l := w.lead
	l.kicked = false
	if l.self < 0 || !w.up[l.self] {
		return
	}
	if !w.quorum() {
		l.Stalls++
		return
	}
	for range 32 {
		in := consensus.LeaderInput{Self: w.spec.Nodes[l.self].ID, State: l.state, Servers: l.servers,
			DeadSince: l.deadSince, Now: w.at(), Config: l.cfg}
		a, mem, err := consensus.Decide(in, l.mem)
		l.mem = mem
		l.Decisions++
		if err != nil {
			l.Errors++
			return
		}
		if a == nil || !w.carryOut(a) {
			return
		}
	}
	// More to do: the real loop goes on at its next tick.
	w.kickAt(w.s.now + leaderTick.Seconds())
}

// carryOut executes one action; false: nothing changed.
func (w *world) carryOut(a consensus.Action) bool {
	l := w.lead
	switch a := a.(type) {
	case consensus.Append:
		ok, _ := w.commit(a.Event)
		return ok
	case consensus.AddNonvoter:
		l.servers = append(l.servers, consensus.RaftServer{ID: a.ID})
	case consensus.AddVoter:
		l.setVoter(a.ID, true)
	case consensus.Demote:
		l.setVoter(a.ID, false)
	case consensus.RemoveServer:
		for k, sv := range l.servers {
			if sv.ID == a.ID {
				l.servers = append(l.servers[:k:k], l.servers[k+1:]...)
				break
			}
		}
	default:
		return false
	}
	return true
}

func (l *leader) setVoter(id string, v bool) {
	for k := range l.servers {
		if l.servers[k].ID == id {
			l.servers[k].Voter = v
			return
		}
	}
	l.servers = append(l.servers, consensus.RaftServer{ID: id, Voter: v})
}

// warmup: every node that must load new layers for the proposal loads
// them while serving its old range, and reports ready. As
// consensus.DecideWarmup says, a load of the same epoch and range goes
// on; any other load in progress is dropped.
func (w *world) warmup(e consensus.MapProposed) {
	l := w.lead
	p, _ := l.state.Pending()
	w.kickAt(e.Deadline.Sub(w.epoch).Seconds() + 1e-3)
	first := w.committed.Layers == 0
	for i, k := range l.loadKey {
		if k == (consensus.Load{}) {
			continue
		}
		if r, _ := e.Map.Range(w.spec.Nodes[i].ID); (k != consensus.Load{Epoch: e.Map.Epoch, Range: r}) {
			w.loading[i]++
			l.loadKey[i] = consensus.Load{}
		}
	}
	for _, st := range e.Map.Stages {
		if !p.Loads(st.Node) || p.Ready(st.Node) {
			continue
		}
		i := w.idx[st.Node]
		want := consensus.Load{Epoch: e.Map.Epoch, Range: st.Range}
		if !w.up[i] || l.loadKey[i] == want {
			continue
		}
		have := l.prepared[i]
		if w.serving[i] {
			if x := w.rng[i].Intersect(st.Range); x.Len() > have.Intersect(st.Range).Len() {
				have = x
			}
		}
		added := st.Range.Len() - have.Intersect(st.Range).Len()
		if !first {
			w.res.BytesLoaded += float64(added) * w.layerBytes()
		}
		w.loading[i]++
		l.loadKey[i] = want
		gen := w.loading[i]
		dt := float64(added) * w.layerBytes() / w.spec.Timing.DiskBytesPerS
		w.s.schedule(&event{at: w.s.now + dt, kind: evCallback, fn: func() {
			if w.loading[i] != gen || !w.up[i] {
				return
			}
			l.loadKey[i] = consensus.Load{}
			l.prepared[i] = want.Range
			w.request(consensus.StageReady{Node: w.spec.Nodes[i].ID, Epoch: want.Epoch, Range: want.Range}, i)
		}})
	}
}

// cancelLoads drops every warmup load in progress (the pending map
// committed or was abandoned).
func (w *world) cancelLoads() {
	for i, k := range w.lead.loadKey {
		if k != (consensus.Load{}) {
			w.loading[i]++
			w.lead.loadKey[i] = consensus.Load{}
		}
	}
}

// switchTo: a map committed; every node serves its range of it.
func (w *world) switchTo(from, to layers.LayerMap, first bool) {
	w.committed = to
	for i := range w.spec.Nodes {
		id := w.spec.Nodes[i].ID
		r, in := to.Range(id)
		old, was := from.Range(id)
		if in && r == old && w.serving[i] {
			continue
		}
		if was && !first {
			w.res.Moves++
		} else if in && !first {
			w.res.Moves++ // a join
		}
		if !in {
			if w.serving[i] && w.up[i] {
				w.leaveMap(i)
			}
			continue
		}
		if w.up[i] {
			w.loading[i]++
			w.lead.prepared[i] = layers.Range{}
			w.reassign(i, r) // a fresh node, or one still finishing sessions of a range it left
		}
	}
}

// peerDead: liveness calls the machine dead now (its dead-after window
// passed); the leader decides, and again once the grace period is over.
func (w *world) peerDead(i int) {
	if w.up[i] {
		return
	}
	w.lead.deadSince[w.spec.Nodes[i].ID] = w.at()
	w.kick()
	w.kickAt(w.s.now + deadGrace.Seconds())
}

// leaderDied: after the election timeout a live voter leads, with a fresh
// term's memory, if a majority of voters is up.
func (w *world) leaderDied() {
	w.s.schedule(&event{at: w.s.now + election.Seconds(), kind: evCallback, fn: w.elect})
}

func (w *world) elect() {
	l := w.lead
	if l.self >= 0 && w.up[l.self] {
		return
	}
	l.self = -1
	if !w.quorum() {
		return // a voter's return elects one
	}
	for _, sv := range l.servers {
		if j := w.idx[sv.ID]; sv.Voter && w.up[j] {
			l.self = j
			l.mem = consensus.NewLeaderState(w.at())
			w.kick()
			return
		}
	}
}

// strataUp: a restarted machine is seen alive and asks to join (again).
// A member whose dead peer was not yet removed reloads its committed
// range, as a restarted node restores what the map gives it.
func (w *world) strataUp(i int) {
	if !w.up[i] {
		return
	}
	l := w.lead
	id := w.spec.Nodes[i].ID
	delete(l.deadSince, id)
	l.prepared[i] = layers.Range{} // a new process holds nothing
	l.loadKey[i] = consensus.Load{}
	if l.self < 0 || !w.up[l.self] {
		w.elect()
	}
	if r, ok := w.committed.Range(id); ok && l.state.IsMember(id) {
		w.load(i, r, false, false)
	}
	if !l.state.IsMember(id) {
		w.request(consensus.NodeJoined{Node: id, Caps: w.caps(i), Fingerprint: "sim:" + w.spec.Model}, i)
	}
	w.kick()
}
