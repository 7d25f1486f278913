package consensus

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/stratanet/strata/layers"
)

// The leader's policy is one pure function, Decide: it reads the
// replicated state, Raft's servers, liveness and the clock as plain data,
// and returns at most one action as data. The leader loop (leader.go)
// only gathers the input and carries the action out; a simulator or a
// test calls Decide directly. Decide looks at the state and picks the
// first thing to do, in this order:
//
//  1. append its own NodeJoined if it is not a member yet, then the
//     model's manifest if it holds the file and the state has none;
//  2. bring Raft's configuration in line with the members: add new
//     members as non-voters, remove departed servers;
//  3. append NodeLeft for members dead past the grace period;
//  4. bring the voter set in line with chooseVoters;
//  5. tend the pending warmup: when a node of it left, propose it again
//     repaired without that node (same epoch and deadline, so the
//     nodes already ready stay ready); commit it when every stage is
//     ready; abandon it when it cannot be repaired or the deadline
//     passed;
//  6. let drained members go: NodeLeft once no map places them (a
//     drained leader hands leadership over first);
//  7. plan: the first map, a repair of departed or draining nodes (a
//     repair of departed ones rebalanced at once when layers says that
//     pays), placement of new members, or a rebalance when layers says
//     it pays.
//
// A new leader starts from NewLeaderState and the replicated state alone,
// so it resumes a pending warmup where the old one left it.

// RaftServer is a Raft server as the leader's decision sees it.
type RaftServer struct {
	ID    string
	Voter bool // false: a non-voter
	// Lagging: the server has not acknowledged the latest configuration
	// to this leader (never the leader itself).
	Lagging bool
}

// LeaderConfig is the policy a leader decides by.
type LeaderConfig struct {
	Model      layers.ModelSpec
	Planner    layers.Planner
	CostParams layers.CostParams
	// DeadGrace: how long a member may be dead before it is removed.
	DeadGrace time.Duration
	// StableAfter: how long a member must have been a member before it
	// may vote.
	StableAfter time.Duration
	MaxVoters   int
	// Warmup: how long a proposed map has to become ready.
	Warmup time.Duration
	// LaggardPenalty: how long a node that missed a warmup deadline is
	// left out of plans.
	LaggardPenalty time.Duration
	// RebalanceEvery: how often to ask layers whether a rebalance pays
	// (0: never).
	RebalanceEvery time.Duration
	RebalanceOpts  layers.RebalanceOptions
	// TrustChecks is K, the verified checks after which a member counts
	// fully in placement, in a swarm with stewards (0:
	// DefaultTrustChecks); trust.go.
	TrustChecks int
}

// LeaderInput is everything one decision reads.
type LeaderInput struct {
	Self    string     // the leader's node ID
	Leaving bool       // the leader is leaving: it does not rejoin
	Join    NodeJoined // the leader's own join, appended while it is no member
	State   State
	Servers []RaftServer // Raft's configuration
	// DeadSince holds the peers that liveness calls dead, with the time
	// since when. The zero time means dead for ever (an ID that is no
	// peer ID). The leader itself is never dead.
	DeadSince map[string]time.Time
	// Speeds are measured speeds by node (layers.Node.Speed); absent or
	// non-positive: none measured.
	Speeds map[string]float64
	Now    time.Time
	Config LeaderConfig

	// Manifest is the leader's own manifest, when it holds the model's
	// file (empty otherwise); appended while the state has none, in one
	// record when it fits MaxManifestLen, else in parts.
	Manifest ManifestPublished
	// ManifestParts is Manifest split by SplitManifest, when it is larger
	// than one record (nil: Decide splits it itself).
	ManifestParts []ManifestPart
	// SwarmConfig is the leader's own swarm configuration (nil: none),
	// appended while the state has none (swarmconfig.go).
	SwarmConfig *SwarmConfigSet
	// SessionTokens is the leader's own planner session length (nil:
	// none), appended while the state has none. Plans use the state's
	// (State.PlanParams) in place of Config.CostParams.SessionTokens.
	SessionTokens *SessionTokensSet
	// Stewards is the founder's signed steward set (nil: none), appended
	// while the state has none (stewards.go). The leader loop offers it
	// only when the fold admits it.
	Stewards *StewardsSet
	// FetchRates are the fetch rates (bytes/s) of the members that have
	// no model file and fetch their layers from peers
	// (layers.RebalanceOptions.FetchRates).
	FetchRates map[string]float64
	// Vouches are the members' counts of spot checks they saw others
	// pass (trust.go): in a swarm with stewards, a member's weight in
	// placement grows with them, and no layer is left to members short
	// of TrustChecks alone while those that have them can hold the model.
	Vouches []Vouch
}

// LeaderState is what a leader remembers between decisions within one
// term. Decide never modifies the value it is given.
type LeaderState struct {
	since         time.Time            // start of this term as leader
	departed      map[string]time.Time // members this leader saw leave
	joined        map[string]time.Time // members, and when this leader saw them join (noteJoins)
	lastRebalance time.Time
	// benched are members a rebalance took out of the map: joins leave
	// them be, so that the two policies do not undo each other.
	benched map[string]bool
	noPlan  string // the fleet the last failed full plan was for
	// goal is the map a multi-step migration heads for; each step is
	// one proposal and commit.
	goal *goal
}

type goal struct {
	base   uint64 // the epoch the next step starts from
	target layers.LayerMap
	reason string
}

// NewLeaderState is the memory of a term that starts at now.
func NewLeaderState(now time.Time) LeaderState {
	return LeaderState{since: now, lastRebalance: now, departed: map[string]time.Time{}, benched: map[string]bool{}}
}

// decision is one run of Decide: the input, and the state it returns.
type decision struct {
	in *LeaderInput
	st LeaderState
	// The fleet a plan may place, computed once a decision (fleet).
	f         *layers.Fleet
	placeable map[string]bool
	fErr      error
	fDone     bool
	trust     layers.Trust
}

// Decide is the leader's policy: given the input and the memory of this
// term, it returns the one action to take (nil: nothing to do now) and the
// memory for the next decision. It is deterministic and has no side
// effects; an error means the input admits no sane action (a planner
// failure, a gap in a planned map), and st is still the memory to keep.
func Decide(in LeaderInput, st LeaderState) (Action, LeaderState, error) {
	st.departed = maps.Clone(st.departed)
	st.benched = maps.Clone(st.benched)
	if st.departed == nil {
		st.departed = map[string]time.Time{}
	}
	if st.benched == nil {
		st.benched = map[string]bool{}
	}
	st.joined = noteJoins(st.joined, in.State, in.Now)
	d := decision{in: &in, st: st}
	a, err := d.decide()
	return a, d.st, err
}

func (d *decision) decide() (Action, error) {
	in, s, now := d.in, d.in.State, d.in.Now
	self, grace := in.Self, in.Config.DeadGrace

	// 1. The leader is a member. One evicted for a fault cannot rejoin
	// until its ban ends, and a node proven to lie must not lead: it hands
	// over to another voter, which repairs the map without it. (Before,
	// it appended an empty join for ever and the map kept it.)
	if !s.IsMember(self) && !in.Leaving {
		if _, banned := s.Banned(self, now); !banned {
			return Append{Event: in.Join, Why: "the leader joins"}, nil
		}
		if d.otherVoters() {
			return d.handOver(), nil
		}
		// The only voter: nobody else can lead; it goes on as one leaving.
	}
	// 1a. The founder names the stewards first of all: the first set is
	// the senior member's to sign (stewards.go).
	if in.Stewards != nil && s.Stewards().Empty() && s.IsMember(self) {
		return Append{Event: *in.Stewards, Why: "the founder names the swarm's stewards"}, nil
	}
	// 1b. The swarm learns its model's manifest from a leader that holds
	// the file: the founder, unless it had none.
	if a := d.publishManifest(); a != nil {
		return a, nil
	}
	// 1c. The swarm gets its configuration from the first leader that has
	// one: the founder.
	if in.SwarmConfig != nil && !s.config.hasRate {
		return Append{Event: *in.SwarmConfig, Why: "the leader sets the swarm's configuration"}, nil
	}
	if in.SessionTokens != nil && !s.config.hasSessionTokens {
		return Append{Event: *in.SessionTokens, Why: "the leader sets the swarm's planner session length"}, nil
	}

	// 2. Dead members leave.
	for _, m := range s.Members() {
		if m.ID != self && d.deadFor(m.ID) >= grace {
			d.st.departed[m.ID] = now
			return Append{Event: NodeLeft{Node: m.ID, Reason: LeftDead}, Why: fmt.Sprintf("dead for %v", d.deadFor(m.ID))}, nil
		}
	}

	// 2a. A committed map that lost a holder is mended before Raft's
	// configuration catches up: its layers are unserved until the repair
	// commits, while removing the server and refilling the voters only
	// restore fault tolerance, and can go on during the warmup. (On a
	// flapping leadership each commit ahead of the repair can cost a term.)
	if d.lostHolder() {
		if a := d.mendFirst(); a != nil {
			return a, nil
		}
	}

	// 3. Raft's configuration follows the members.
	servers := map[string]bool{} // ID: voter
	for _, sv := range in.Servers {
		servers[sv.ID] = sv.Voter
	}
	for _, m := range s.Members() {
		if _, ok := servers[m.ID]; !ok && m.ID != self {
			return AddNonvoter{ID: m.ID}, nil
		}
	}
	for _, sv := range in.Servers {
		if sv.ID == self || s.IsMember(sv.ID) {
			continue
		}
		if _, left := d.st.departed[sv.ID]; (left || d.deadFor(sv.ID) >= grace) && (!sv.Voter || d.settled("", sv.ID)) {
			return RemoveServer{ID: sv.ID}, nil
		}
	}
	for id := range d.st.departed {
		if _, server := servers[id]; !server && !s.IsMember(id) {
			delete(d.st.departed, id)
		}
	}
	for id := range d.st.benched {
		if !s.IsMember(id) {
			delete(d.st.benched, id)
		}
	}

	// 4. The voter set.
	var cands []voterCand
	for _, sv := range in.Servers {
		vc := voterCand{ID: sv.ID, Voter: sv.Voter}
		if m, ok := s.Member(sv.ID); ok {
			vc.JoinedAt = m.JoinedAt
			vc.Eligible = !m.Caps.Relayed && !m.Draining && now.Sub(m.JoinedAt) >= in.Config.StableAfter
		} else {
			vc.Eligible = vc.Voter // an initial voter that has not joined yet
		}
		// With stewards, only they vote: a Sybil crowd cannot elect.
		vc.Eligible = vc.Eligible && s.Stewards().mayVote(sv.ID)
		if dead := d.deadFor(sv.ID); (vc.Voter && dead >= grace) || (!vc.Voter && dead > 0) {
			vc.Eligible = false
		}
		cands = append(cands, vc)
	}
	me, _ := s.Member(self)
	// A leader that is no steward steps aside once a steward can vote; while
	// none can, it stays the one voter, since someone must lead.
	stepAside := !s.Stewards().mayVote(self) && slices.ContainsFunc(cands, func(c voterCand) bool { return c.ID != self && c.Eligible })
	want := chooseVoters(cands, self, me.Draining || stepAside, in.Config.MaxVoters)
	for _, id := range want {
		if !servers[id] && d.settled(id, "") {
			return AddVoter{ID: id}, nil
		}
	}
	for _, sv := range in.Servers {
		if sv.Voter && sv.ID != self && !contains(want, sv.ID) && d.settled("", sv.ID) {
			return Demote{ID: sv.ID}, nil
		}
	}
	if stepAside && d.votersAre(want) {
		if a := d.handOver(); a != nil {
			return a, nil
		}
	}

	// 5. The pending warmup.
	if p, ok := s.Pending(); ok {
		if a := d.repairPending(p); a != nil {
			return a, nil
		}
		return d.tendWarmup(p), nil
	}

	// 6. Drained members go.
	committed := s.Committed()
	for _, m := range s.Members() {
		if !m.Draining {
			continue
		}
		if _, placed := committed.Range(m.ID); placed {
			continue
		}
		if m.ID == self && d.otherVoters() {
			return d.handOver(), nil
		}
		d.st.departed[m.ID] = now
		return Append{Event: NodeLeft{Node: m.ID, Reason: LeftGracefully}, Why: "drained"}, nil
	}

	// 7. Plan.
	return d.plan()
}

// lostHolder reports whether a node of the committed map is no longer a
// member.
func (d *decision) lostHolder() bool {
	s := d.in.State
	for _, st := range s.Committed().Stages {
		if !s.IsMember(st.Node) {
			return true
		}
	}
	return false
}

// mendFirst is the action that brings the committed map's lost layers
// back soonest: mending or committing the pending map, or proposing the
// repair when none is pending; nil when there is none to take now (an
// error of the plan waits for step 7 to report it).
func (d *decision) mendFirst() Action {
	if p, ok := d.in.State.Pending(); ok {
		if a := d.repairPending(p); a != nil {
			return a
		}
		return d.tendWarmup(p)
	}
	if a, err := d.plan(); err == nil && a != nil {
		return a
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// settled reports whether every live voter of the configuration that a
// change would make (adding voter add, or dropping drop; "" for none)
// holds the latest configuration, the leader aside. Voter changes and
// handovers wait for it: hashicorp/raft refuses its vote to a candidate
// that is not a voter in the refusing server's latest configuration, so
// a voter that missed the candidate's promotion, once the leader is
// gone, blocks every election that needs it, for good. Waiting makes
// each change start from a configuration every voter holds. Voters dead
// past the grace period are not waited for: they are being replaced.
func (d *decision) settled(add, drop string) bool {
	for _, sv := range d.in.Servers {
		voter := (sv.Voter || sv.ID == add) && sv.ID != drop
		if voter && sv.Lagging && sv.ID != d.in.Self && d.deadFor(sv.ID) < d.in.Config.DeadGrace {
			return false
		}
	}
	return true
}

// handOver is TransferLeadership once the voters hold the latest
// configuration (settled), and nothing until then.
func (d *decision) handOver() Action {
	if !d.settled("", "") {
		return nil
	}
	return TransferLeadership{}
}

// votersAre reports whether the voters other than the leader are want,
// all of them: a handover then goes to one of want.
func (d *decision) votersAre(want []string) bool {
	n := 0
	for _, sv := range d.in.Servers {
		if !sv.Voter || sv.ID == d.in.Self {
			continue
		}
		if !contains(want, sv.ID) {
			return false
		}
		n++
	}
	return n == len(want) && n > 0
}

func (d *decision) otherVoters() bool {
	for _, sv := range d.in.Servers {
		if sv.Voter && sv.ID != d.in.Self {
			return true
		}
	}
	return false
}

// repairedMark ends the reason of a repaired pending map; a later repair
// replaces it rather than nesting it.
const repairedMark = " (pending repaired after "

// repairPending mends the pending map when nodes of it left: the layers
// they were to serve go to the nodes of the fleet that take them for the
// fewest loaded layers (layers.Repair), and the result is proposed again
// as the same epoch with the same deadline. The fold keeps a node ready
// when its range did not change, so the loads already done count. In a
// large swarm a machine leaves every few seconds; dropping the whole
// warmup on each leave meant no map ever committed. It returns nil,
// leaving the warmup to tendWarmup (which drops it), when no node left,
// the deadline passed, the repaired map cannot cover the layers, or it
// is the committed map (the departed nodes held the only moves).
func (d *decision) repairPending(p Pending) Action {
	s, now := d.in.State, d.in.Now
	var gone []string
	for _, st := range p.Map.Stages {
		if !s.IsMember(st.Node) {
			gone = append(gone, st.Node)
		}
	}
	if len(gone) == 0 || (!p.Deadline.IsZero() && now.After(p.Deadline)) {
		return nil
	}
	f, _, err := d.fleet()
	if err != nil {
		return nil
	}
	target := p.Map
	for _, id := range gone {
		next, _, err := d.in.Config.Planner.Repair(f, target, id)
		if err != nil {
			return nil
		}
		target = next
	}
	target = d.vouch(target)
	target.Epoch = p.Map.Epoch
	committed := s.Committed()
	if !target.Covers() || (committed.Layers != 0 && target.SameStages(committed)) {
		// A gap, or the committed map again (nothing to warm up): drop it.
		return nil
	}
	base, _, _ := strings.Cut(p.Reason, repairedMark)
	reason := fmt.Sprintf("%s%s%v left)", base, repairedMark, gone)
	if len(reason) > MaxReasonLen {
		// Keep the news (who left) rather than the start of the old reason.
		reason = fmt.Sprintf("pending repaired after %v left", gone)
	}
	return Append{Event: MapProposed{Map: target, Deadline: p.Deadline, Reason: truncate(reason, MaxReasonLen)},
		Why: fmt.Sprintf("%v left the pending map", gone)}
}

// tendWarmup commits the pending map once every stage is ready, or
// abandons it when a node of it left or the deadline passed.
func (d *decision) tendWarmup(p Pending) Action {
	s, now := d.in.State, d.in.Now
	epoch := p.Map.Epoch
	for _, st := range p.Map.Stages {
		if !s.IsMember(st.Node) {
			return Append{Event: WarmupAbandoned{Epoch: epoch, Reason: fmt.Sprintf("%s left", st.Node)}}
		}
	}
	if p.AllReady() {
		return Append{Event: MapCommitted{Epoch: epoch}, Why: fmt.Sprintf("warmup of %v: %s", now.Sub(p.Since).Round(time.Millisecond), p.Reason)}
	}
	if !p.Deadline.IsZero() && now.After(p.Deadline) {
		lag := p.Waiting()
		return Append{Event: WarmupAbandoned{Epoch: epoch, Laggards: lag, Until: now.Add(d.in.Config.LaggardPenalty),
			Reason: fmt.Sprintf("%d node(s) not ready by the deadline", len(lag))}}
	}
	return nil
}

// fleet is the members a plan may place: not draining, not laggards, not
// dead, with their measured speeds.
func (d *decision) fleet() (*layers.Fleet, map[string]bool, error) {
	if d.fDone {
		return d.f, d.placeable, d.fErr
	}
	d.fDone = true
	d.trust = d.in.State.Trust(d.in.Vouches, d.in.Config.TrustChecks)
	var nodes []layers.Node
	ok := map[string]bool{}
	for _, m := range d.in.State.Members() {
		if !placeable(m, d.in.Now) || d.deadFor(m.ID) > 0 {
			continue
		}
		n := layers.Node{ID: m.ID, Hardware: m.Caps.Hardware, Region: m.Caps.Region, MaxLayers: m.Caps.MaxLayers}
		if v := d.in.Speeds[m.ID]; v > 0 {
			n.Speed = v
		}
		nodes = append(nodes, n)
		ok[m.ID] = true
	}
	// A member's modelled capacity counts by its verified work.
	nodes = d.trust.Weigh(nodes)
	d.f, d.fErr = layers.NewFleet(d.in.Config.Model, nodes, d.in.State.SwarmConfig().PlanParams(d.in.Config.CostParams))
	d.placeable = ok
	return d.f, d.placeable, d.fErr
}

// vouch gives every layer of target a verified holder when the verified
// members can hold the model (layers.Planner.Vouch); target as it is
// otherwise, and in a swarm without stewards.
func (d *decision) vouch(target layers.LayerMap) layers.LayerMap {
	f, _, err := d.fleet()
	if err != nil || d.trust.Full <= 0 || target.Layers != f.Model.Layers {
		return target
	}
	out, _, err := d.in.Config.Planner.Vouch(f, target, d.trust)
	if err != nil {
		return target
	}
	return out
}

// plan proposes the next map, if there is one to propose.
func (d *decision) plan() (Action, error) {
	s, now := d.in.State, d.in.Now
	f, placeable, err := d.fleet()
	if err != nil {
		return nil, err
	}
	if f.Len() == 0 {
		return nil, nil
	}
	committed := s.Committed()
	pl := d.in.Config.Planner
	if committed.Layers == 0 {
		plan, err := d.full(f, 1)
		if err != nil {
			return nil, nil // not enough capacity yet: wait for members
		}
		return d.propose(committed, plan.Map, "first map")
	}
	// Nodes that left: repair at once (they serve nothing any more).
	target := committed
	var gone []string
	for _, id := range committed.Nodes() {
		if !s.IsMember(id) {
			gone = append(gone, id)
		}
	}
	for _, id := range gone {
		next, _, err := pl.Repair(f, target, id)
		if err != nil {
			// Repair cannot close the gap: plan afresh on who is left.
			plan, ferr := d.full(f, committed.Epoch+1)
			if ferr != nil {
				return nil, nil // no covering map: keep the committed one
			}
			d.st.goal = nil
			return d.propose(committed, plan.Map, fmt.Sprintf("re-plan after %v left", gone))
		}
		target = next
	}
	if len(gone) > 0 {
		d.st.goal = nil
		reason := fmt.Sprintf("repair after %v left", gone)
		// A repair loads the fewest layers, and may leave the node that
		// took the gap as a thin bottleneck of the whole swarm. When the
		// repair costs that much flow, ask layers whether a rebalance of
		// the repaired map pays (the same gain-net-of-migration rule as
		// the periodic one) and take its map instead: the layers of the
		// gap are unserved until the new map commits either way.
		if rb, err := pl.Rebalance(f, target, d.in.Config.RebalanceOpts); err == nil && rb.Move {
			return d.propose(committed, rb.To, reason+", rebalanced: "+rb.Reason)
		}
		return d.propose(committed, target, reason)
	}
	// A migration in steps goes on.
	if g := d.st.goal; g != nil {
		d.st.goal = nil
		if g.base == committed.Epoch && allPlaceable(g.target, placeable) {
			return d.stepwise(f, committed, g.target, g.reason)
		}
	}
	// Draining nodes: their layers move elsewhere while they still serve.
	var draining []string
	for _, id := range committed.Nodes() {
		if m, _ := s.Member(id); m.Draining {
			draining = append(draining, id)
		}
	}
	for _, id := range draining {
		next, _, err := pl.Repair(f, target, id)
		if err != nil {
			plan, ferr := d.full(f, committed.Epoch+1)
			if ferr != nil {
				return nil, nil // nowhere to go: the node stays until capacity comes
			}
			return d.stepwise(f, committed, plan.Map, fmt.Sprintf("re-plan without draining %v", draining))
		}
		target = next
	}
	if len(draining) > 0 {
		return d.stepwise(f, committed, target, fmt.Sprintf("drain of %v", draining))
	}
	// New members: place each where it adds the most.
	var joined []string
	for _, pr := range f.Profiles {
		id := pr.Node.ID
		if _, in := target.Range(id); in || d.st.benched[id] {
			continue
		}
		r, err := pl.Join(f, target, id)
		if err != nil {
			continue
		}
		target = target.With(id, r)
		joined = append(joined, id)
	}
	if len(joined) > 0 {
		return d.stepwise(f, committed, target, fmt.Sprintf("join of %v", joined))
	}
	// Rebalance when layers says it pays, and only on a settled swarm.
	every := d.in.Config.RebalanceEvery
	if every <= 0 || now.Sub(d.st.lastRebalance) < every {
		return nil, nil
	}
	d.st.lastRebalance = now
	for _, id := range committed.Nodes() {
		if !placeable[id] {
			return nil, nil
		}
	}
	ro := d.in.Config.RebalanceOpts
	if len(d.in.FetchRates) > 0 {
		ro.FetchRates = d.in.FetchRates
	}
	rb, err := pl.Rebalance(f, committed, ro)
	if err != nil {
		return nil, err
	}
	if !rb.Move {
		return nil, nil
	}
	for _, id := range committed.Nodes() {
		if _, in := rb.To.Range(id); !in {
			d.st.benched[id] = true
		}
	}
	return d.stepwise(f, committed, rb.To, "rebalance: "+rb.Reason)
}

// full plans afresh. A fleet that could not be covered is not planned
// again until the state or the fleet changes: a full search is the
// costly part of a decision.
func (d *decision) full(f *layers.Fleet, epoch uint64) (layers.Plan, error) {
	key := fmt.Sprint(d.in.State.Applied(), f.Len())
	for _, p := range f.Profiles {
		key += " " + p.Node.ID
	}
	if key == d.st.noPlan {
		return layers.Plan{}, fmt.Errorf("%w: unchanged since the last attempt", layers.ErrNoCoverage)
	}
	plan, err := d.in.Config.Planner.Full(f, epoch)
	if err != nil {
		d.st.noPlan = key
	}
	return plan, err
}

// allPlaceable reports whether every node of a map may still be placed.
func allPlaceable(m layers.LayerMap, placeable map[string]bool) bool {
	for _, st := range m.Stages {
		if !placeable[st.Node] {
			return false
		}
	}
	return true
}

// stepwise moves from committed towards target in the steps that
// layers.OrderMoves gives, so that every layer keeps a node that is not
// reloading it and no node holds more than it can while it warms up. It
// proposes the first step and remembers the goal for the next ones.
func (d *decision) stepwise(f *layers.Fleet, committed, target layers.LayerMap, reason string) (Action, error) {
	target = d.vouch(target)
	steps, err := layers.OrderMoves(f, committed, layers.Diff(f.Model, committed, target))
	if err != nil {
		a, perr := d.propose(committed, target, reason)
		if app, ok := a.(Append); ok {
			app.Why = fmt.Sprintf("no safe order of moves (%v): moving at once", err)
			a = app
		}
		return a, perr
	}
	if len(steps) <= 1 {
		return d.propose(committed, target, reason)
	}
	next := committed
	for _, mv := range steps[0] {
		if mv.To.Empty() {
			next = next.Without(mv.Node)
		} else {
			next = next.With(mv.Node, mv.To)
		}
	}
	d.st.goal = &goal{base: committed.Epoch + 1, target: target, reason: reason}
	return d.propose(committed, next, fmt.Sprintf("%s (first of %d steps)", reason, len(steps)))
}

// propose appends MapProposed for target as the next epoch.
func (d *decision) propose(committed, target layers.LayerMap, reason string) (Action, error) {
	target = d.vouch(target)
	target.Epoch = nextEpoch(committed.Epoch)
	if committed.Layers != 0 && target.SameStages(committed) {
		return nil, nil
	}
	if !target.Covers() {
		return nil, fmt.Errorf("%w: planned map has gaps %v", ErrRejected, target.Gaps())
	}
	return Append{Event: MapProposed{Map: target, Deadline: d.in.Now.Add(d.in.Config.Warmup), Reason: truncate(reason, MaxReasonLen)}}, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// publishManifest appends the leader's manifest while the state has none:
// whole when it fits a record, else its first part the state lacks, one
// part a decision, so that a new leader with the same manifest goes on
// where the last one stopped. A publication of another manifest under way
// is left be: the first one stays, as with whole manifests.
func (d *decision) publishManifest() Action {
	m, s := d.in.Manifest, d.in.State
	if len(m.Manifest) == 0 || s.manifest != nil || m.Fingerprint != s.Fingerprint() {
		return nil
	}
	if len(m.Manifest) <= MaxManifestLen {
		if s.parts != nil && s.parts.digest != sha256.Sum256(m.Manifest) {
			return nil
		}
		return Append{Event: m, Why: "the leader publishes the model's manifest"}
	}
	parts := d.in.ManifestParts
	if parts == nil {
		var err error
		if parts, err = SplitManifest(m.Fingerprint, m.Manifest); err != nil {
			return nil
		}
	}
	if s.parts != nil && (s.parts.digest != parts[0].Digest || s.parts.total != len(parts)) {
		return nil
	}
	for _, p := range parts {
		if !s.HasManifestPart(p.Digest, p.Index) {
			return Append{Event: p, Why: fmt.Sprintf("the leader publishes the model's manifest, part %d of %d", p.Index+1, p.Total)}
		}
	}
	return nil
}
