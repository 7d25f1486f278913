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
	w         *world
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

// newLeader is w's control plane, with no leader yet (startLeader).
func newLeader(w *world) *leader {
	l := &leader{w: w, self: -1, deadSince: map[string]time.Time{}, prepared: make([]layers.Range, len(w.spec.Nodes)),
		loadKey: make([]consensus.Load, len(w.spec.Nodes))}
	l.cfg = consensus.LeaderConfig{Model: w.m.model, Planner: layers.NewPlanner(), CostParams: layers.DefaultCostParams(),
		DeadGrace: deadGrace, StableAfter: stableAfter, MaxVoters: maxVoters, Warmup: warmupTimeout,
		LaggardPenalty: laggardPenalty, RebalanceEvery: time.Duration(w.spec.Timing.RebalanceS * float64(time.Second))}
	return l
}

// startLeader makes the first live machine that is not relayed the
// founding voter and leader; every machine up at the start asks to join.
func (l *leader) startLeader(init []int) error {
	// The founder's swarm configuration is the log's first record, as
	// the real founder's leader appends it before it plans (consensus
	// Decide's step 1c); applied here, it takes no decision of the first
	// round.
	if n, ok := planSessionTokens(l.w.spec, l.w.policy); ok {
		next, err := l.state.Apply(consensus.Record{At: l.w.at(), Event: consensus.SessionTokensSet{Tokens: n}})
		if err != nil {
			return fmt.Errorf("sim: the founder's session length: %w", err)
		}
		l.state = next
	}
	for _, i := range init {
		if !l.w.spec.Nodes[i].Relayed {
			l.self = i
			break
		}
	}
	if l.self < 0 && len(init) > 0 {
		l.self = init[0]
	}
	if l.self >= 0 {
		l.servers = []consensus.RaftServer{{ID: l.w.spec.Nodes[l.self].ID, Voter: true}}
		l.mem = consensus.NewLeaderState(l.w.at())
	}
	for _, i := range init {
		l.request(consensus.NodeJoined{Node: l.w.spec.Nodes[i].ID, Caps: l.w.m.caps(i), Fingerprint: "sim:" + l.w.spec.Model}, i)
	}
	if l.cfg.RebalanceEvery > 0 {
		var tick func()
		tick = func() {
			l.kick()
			l.w.s.schedule(&event{at: l.w.s.now + l.w.spec.Timing.RebalanceS, kind: evCallback, fn: tick})
		}
		l.w.s.schedule(&event{at: l.w.spec.Timing.RebalanceS, kind: evCallback, fn: tick})
	}
	return nil
}

// quorum reports whether a majority of the voters is up.
func (l *leader) quorum() bool {
	up, all := 0, 0
	for _, sv := range l.servers {
		if !sv.Voter {
			continue
		}
		all++
		if j, ok := l.w.m.idx[sv.ID]; ok && l.w.ro.up[j] {
			up++
		}
	}
	return all > 0 && 2*up > all
}

// commit folds an event into the replicated state, as a Raft commit
// would, and plays the members' part in it. down: no leader or no
// quorum took it (a member asks again); otherwise ok says whether the
// state admitted it.
func (l *leader) commit(e consensus.Event) (ok, down bool) {
	if l.self < 0 || !l.w.ro.up[l.self] || !l.quorum() {
		return false, true
	}
	before := l.state
	next, err := l.state.Apply(consensus.Record{At: l.w.at(), Event: e})
	if err != nil {
		return false, false
	}
	l.state = next
	switch e := e.(type) {
	case consensus.NodeJoined:
		if i, ok := l.w.m.idx[e.Node]; ok {
			l.w.ro.known[i] = true
		}
		l.kickAt(l.w.s.now + stableAfter.Seconds())
	case consensus.NodeLeft:
		if i, ok := l.w.m.idx[e.Node]; ok {
			l.w.ro.known[i] = false
		}
	case consensus.MapProposed:
		l.warmup(e)
	case consensus.MapCommitted:
		l.cancelLoads()
		l.switchTo(before.Committed(), next.Committed(), before.Committed().Layers == 0)
	case consensus.WarmupAbandoned:
		l.cancelLoads()
		if !e.Until.IsZero() {
			l.kickAt(e.Until.Sub(l.w.epoch).Seconds())
		}
	}
	return true, false
}

// request is a member's request to the leader (a join, a ready report):
// the leader appends it and decides again. Without a leader the member
// asks again at its next tick, while it is up.
func (l *leader) request(e consensus.Event, from int) {
	ok, down := l.commit(e)
	switch {
	case ok:
		l.kick()
	case down:
		l.w.s.schedule(&event{at: l.w.s.now + leaderTick.Seconds(), kind: evCallback, fn: func() {
			if l.w.ro.up[from] {
				l.request(e, from)
			}
		}})
	}
}

// kick schedules a decision round now; kickAt one at t.
func (l *leader) kick() {
	if l.kicked {
		return
	}
	l.kicked = true
	l.w.s.schedule(&event{at: l.w.s.now, kind: evCallback, fn: l.decideRound})
}

func (l *leader) kickAt(t float64) {
	l.w.s.schedule(&event{at: t, kind: evCallback, fn: l.kick})
}

// decideRound is one pass of the leader loop: up to 32 decisions, each
// carried out at once.
func (l *leader) decideRound() {
	l.kicked = false
	if l.self < 0 || !l.w.ro.up[l.self] {
		return
	}
	if !l.quorum() {
		l.Stalls++
		return
	}
	for range 32 {
		in := consensus.LeaderInput{Self: l.w.spec.Nodes[l.self].ID, State: l.state, Servers: l.servers,
			DeadSince: l.deadSince, Now: l.w.at(), Config: l.cfg}
		a, mem, err := consensus.Decide(in, l.mem)
		l.mem = mem
		l.Decisions++
		if err != nil {
			l.Errors++
			return
		}
		if a == nil || !l.carryOut(a) {
			return
		}
	}
	// More to do: the real loop goes on at its next tick.
	l.kickAt(l.w.s.now + leaderTick.Seconds())
}

// carryOut executes one action; false: nothing changed.
func (l *leader) carryOut(a consensus.Action) bool {
	switch a := a.(type) {
	case consensus.Append:
		ok, _ := l.commit(a.Event)
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
func (l *leader) warmup(e consensus.MapProposed) {
	p, _ := l.state.Pending()
	l.kickAt(e.Deadline.Sub(l.w.epoch).Seconds() + 1e-3)
	first := l.w.ro.committed.Layers == 0
	for i, k := range l.loadKey {
		if k == (consensus.Load{}) {
			continue
		}
		if r, _ := e.Map.Range(l.w.spec.Nodes[i].ID); (k != consensus.Load{Epoch: e.Map.Epoch, Range: r}) {
			l.w.ro.loading[i]++
			l.loadKey[i] = consensus.Load{}
		}
	}
	for _, st := range e.Map.Stages {
		if !p.Loads(st.Node) || p.Ready(st.Node) {
			continue
		}
		i := l.w.m.idx[st.Node]
		want := consensus.Load{Epoch: e.Map.Epoch, Range: st.Range}
		if !l.w.ro.up[i] || l.loadKey[i] == want {
			continue
		}
		have := l.prepared[i]
		if l.w.ro.serving[i] {
			if x := l.w.ro.rng[i].Intersect(st.Range); x.Len() > have.Intersect(st.Range).Len() {
				have = x
			}
		}
		added := st.Range.Len() - have.Intersect(st.Range).Len()
		if !first {
			l.w.res.BytesLoaded += float64(added) * l.w.m.layerBytes()
		}
		l.w.ro.loading[i]++
		l.loadKey[i] = want
		gen := l.w.ro.loading[i]
		dt := float64(added) * l.w.m.layerBytes() / l.w.spec.Timing.DiskBytesPerS
		l.w.s.schedule(&event{at: l.w.s.now + dt, kind: evCallback, fn: func() {
			if l.w.ro.loading[i] != gen || !l.w.ro.up[i] {
				return
			}
			l.loadKey[i] = consensus.Load{}
			l.prepared[i] = want.Range
			l.request(consensus.StageReady{Node: l.w.spec.Nodes[i].ID, Epoch: want.Epoch, Range: want.Range}, i)
		}})
	}
}

// cancelLoads drops every warmup load in progress (the pending map
// committed or was abandoned).
func (l *leader) cancelLoads() {
	for i, k := range l.loadKey {
		if k != (consensus.Load{}) {
			l.w.ro.loading[i]++
			l.loadKey[i] = consensus.Load{}
		}
	}
}

// switchTo: a map committed; every node serves its range of it.
func (l *leader) switchTo(from, to layers.LayerMap, first bool) {
	l.w.ro.committed = to
	for i := range l.w.spec.Nodes {
		id := l.w.spec.Nodes[i].ID
		r, in := to.Range(id)
		old, was := from.Range(id)
		if in && r == old && l.w.ro.serving[i] {
			continue
		}
		if was && !first {
			l.w.res.Moves++
		} else if in && !first {
			l.w.res.Moves++ // a join
		}
		if !in {
			if l.w.ro.serving[i] && l.w.ro.up[i] {
				l.w.ro.leaveMap(i)
			}
			continue
		}
		if l.w.ro.up[i] {
			l.w.ro.loading[i]++
			l.prepared[i] = layers.Range{}
			l.w.ro.reassign(i, r) // a fresh node, or one still finishing sessions of a range it left
		}
	}
}

// peerDead: liveness calls the machine dead now (its dead-after window
// passed); the leader decides, and again once the grace period is over.
func (l *leader) peerDead(i int) {
	if l.w.ro.up[i] {
		return
	}
	l.deadSince[l.w.spec.Nodes[i].ID] = l.w.at()
	l.kick()
	l.kickAt(l.w.s.now + deadGrace.Seconds())
}

// leaderDied: after the election timeout a live voter leads, with a fresh
// term's memory, if a majority of voters is up.
func (l *leader) leaderDied() {
	l.w.s.schedule(&event{at: l.w.s.now + election.Seconds(), kind: evCallback, fn: l.elect})
}

func (l *leader) elect() {
	if l.self >= 0 && l.w.ro.up[l.self] {
		return
	}
	l.self = -1
	if !l.quorum() {
		return // a voter's return elects one
	}
	for _, sv := range l.servers {
		if j := l.w.m.idx[sv.ID]; sv.Voter && l.w.ro.up[j] {
			l.self = j
			l.mem = consensus.NewLeaderState(l.w.at())
			l.kick()
			return
		}
	}
}

// strataUp: a restarted machine is seen alive and asks to join (again).
// A member whose dead peer was not yet removed reloads its committed
// range, as a restarted node restores what the map gives it.
func (l *leader) strataUp(i int) {
	if !l.w.ro.up[i] {
		return
	}
	id := l.w.spec.Nodes[i].ID
	delete(l.deadSince, id)
	l.prepared[i] = layers.Range{} // a new process holds nothing
	l.loadKey[i] = consensus.Load{}
	if l.self < 0 || !l.w.ro.up[l.self] {
		l.elect()
	}
	if r, ok := l.w.ro.committed.Range(id); ok && l.state.IsMember(id) {
		l.w.ro.load(i, r, false, false)
	}
	if !l.state.IsMember(id) {
		l.request(consensus.NodeJoined{Node: id, Caps: l.w.m.caps(i), Fingerprint: "sim:" + l.w.spec.Model}, i)
	}
	l.kick()
}
