package consensus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/layers"
)

// The leader loop carries out the placement policy of package layers. Each
// step looks at the state and does at most one thing, in this order:
//
//  1. append its own NodeJoined if it is not a member yet;
//  2. bring Raft's configuration in line with the members: add new
//     members as non-voters, remove departed servers;
//  3. append NodeLeft for members dead past the grace period;
//  4. bring the voter set in line with chooseVoters;
//  5. tend the pending warmup: commit it when every stage is ready,
//     abandon it when a node of it left or the deadline passed;
//  6. let drained members go: NodeLeft once no map places them;
//  7. plan: the first map, a repair of departed or draining nodes,
//     placement of new members, or a rebalance when layers says it pays.
//
// Steps repeat until one does nothing; then the loop sleeps until the
// state changes or a tick passes. A new leader starts from the state
// alone, so it resumes a pending warmup where the old one left it.
type leaderState struct {
	since         time.Time            // start of this term as leader
	departed      map[string]time.Time // members this leader saw leave
	lastRebalance time.Time
	published     time.Time // last map notice
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

func (c *Consensus) leaderLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.kickL:
		}
		if !c.IsLeader() {
			c.lead.since = time.Time{}
			continue
		}
		if c.lead.since.IsZero() {
			c.lead = leaderState{since: time.Now(), departed: map[string]time.Time{}, benched: map[string]bool{}, lastRebalance: time.Now()}
			c.log.Infow("leading", "term", c.raft.CurrentTerm())
		}
		if r := c.cfg.republish; r > 0 && time.Since(c.lead.published) >= r {
			if m := c.fsm.current().Committed(); m.Layers > 0 {
				c.publish(m)
			}
		}
		for range 32 {
			acted, err := c.leaderStep(time.Now())
			if err != nil {
				if c.ctx.Err() == nil {
					c.log.Infow("leader step", "error", err)
				}
				break
			}
			if !acted {
				break
			}
		}
	}
}

// deadFor is how long a peer has been dead, counted from no earlier than
// the start of this leadership: a new leader gives everyone a grace
// period of its own.
func (c *Consensus) deadFor(id string, now time.Time) time.Duration {
	p, err := peer.Decode(id)
	if err != nil {
		return time.Duration(1<<63 - 1)
	}
	if p == c.id {
		return 0
	}
	since, dead := c.live.DeadSince(p)
	if !dead {
		return 0
	}
	if since.Before(c.lead.since) {
		since = c.lead.since
	}
	return max(now.Sub(since), time.Nanosecond)
}

func (c *Consensus) leaderStep(now time.Time) (bool, error) {
	s := c.fsm.current()
	self := c.id.String()
	grace := c.cfg.deadGrace

	// 1. The leader is a member.
	if !s.IsMember(self) && !c.leaving.Load() {
		return true, c.apply(c.joinEvent())
	}

	// 2. Raft's configuration follows the members.
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return false, err
	}
	servers := cf.Configuration().Servers
	suffrage := map[string]raft.ServerSuffrage{}
	for _, sv := range servers {
		suffrage[string(sv.ID)] = sv.Suffrage
	}
	for _, m := range s.Members() {
		if _, ok := suffrage[m.ID]; !ok && m.ID != self {
			c.log.Infow("adding non-voter", "peer", m.ID)
			return true, c.configChange(c.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.ID), 0, c.cfg.rpcTimeout))
		}
	}
	for _, sv := range servers {
		id := string(sv.ID)
		if id == self || s.IsMember(id) {
			continue
		}
		if _, left := c.lead.departed[id]; left || c.deadFor(id, now) >= grace {
			c.log.Infow("removing server", "peer", id)
			return true, c.configChange(c.raft.RemoveServer(sv.ID, 0, c.cfg.rpcTimeout))
		}
	}

	for id := range c.lead.departed {
		if _, server := suffrage[id]; !server && !s.IsMember(id) {
			delete(c.lead.departed, id)
		}
	}
	for id := range c.lead.benched {
		if !s.IsMember(id) {
			delete(c.lead.benched, id)
		}
	}

	// 3. Dead members leave.
	for _, m := range s.Members() {
		if m.ID != self && c.deadFor(m.ID, now) >= grace {
			c.log.Infow("member dead", "peer", m.ID, "for", c.deadFor(m.ID, now))
			c.lead.departed[m.ID] = now
			return true, c.apply(NodeLeft{Node: m.ID, Reason: LeftDead})
		}
	}

	// 4. The voter set.
	var cands []voterCand
	for _, sv := range servers {
		id := string(sv.ID)
		vc := voterCand{ID: id, Voter: sv.Suffrage == raft.Voter}
		if m, ok := s.Member(id); ok {
			vc.JoinedAt = m.JoinedAt
			vc.Eligible = !m.Caps.Relayed && !m.Draining && now.Sub(m.JoinedAt) >= c.cfg.stableAfter
		} else {
			vc.Eligible = vc.Voter // an initial voter that has not joined yet
		}
		if d := c.deadFor(id, now); (vc.Voter && d >= grace) || (!vc.Voter && d > 0) {
			vc.Eligible = false
		}
		cands = append(cands, vc)
	}
	me, _ := s.Member(self)
	want := chooseVoters(cands, self, me.Draining, c.cfg.maxVoters)
	for _, id := range want {
		if suffrage[id] != raft.Voter {
			c.log.Infow("promoting voter", "peer", id)
			return true, c.configChange(c.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(id), 0, c.cfg.rpcTimeout))
		}
	}
	for _, sv := range servers {
		id := string(sv.ID)
		if sv.Suffrage == raft.Voter && id != self && !contains(want, id) {
			c.log.Infow("demoting voter", "peer", id)
			return true, c.configChange(c.raft.DemoteVoter(sv.ID, 0, c.cfg.rpcTimeout))
		}
	}

	// 5. The pending warmup.
	if p, ok := s.Pending(); ok {
		return c.tendWarmup(s, p, now)
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
		if m.ID == self && c.otherVoters(servers) {
			c.log.Infow("drained: handing over leadership")
			if err := c.raft.LeadershipTransfer().Error(); err != nil {
				return false, fmt.Errorf("leadership transfer: %w", err)
			}
			return false, nil
		}
		c.lead.departed[m.ID] = now
		return true, c.apply(NodeLeft{Node: m.ID, Reason: LeftGracefully})
	}

	// 7. Plan.
	return c.plan(s, now)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (c *Consensus) otherVoters(servers []raft.Server) bool {
	for _, sv := range servers {
		if sv.Suffrage == raft.Voter && string(sv.ID) != c.id.String() {
			return true
		}
	}
	return false
}

func (c *Consensus) configChange(f raft.IndexFuture) error {
	if err := f.Error(); err != nil {
		return fmt.Errorf("raft configuration change: %w", err)
	}
	return nil
}

// tendWarmup commits the pending map once every stage is ready, or
// abandons it when a node of it left or the deadline passed.
func (c *Consensus) tendWarmup(s State, p Pending, now time.Time) (bool, error) {
	epoch := p.Map.Epoch
	for _, st := range p.Map.Stages {
		if !s.IsMember(st.Node) {
			return true, c.apply(WarmupAbandoned{Epoch: epoch, Reason: fmt.Sprintf("%s left", st.Node)})
		}
	}
	if p.AllReady() {
		if err := c.apply(MapCommitted{Epoch: epoch}); err != nil {
			return false, err
		}
		c.log.Infow("committed", "epoch", epoch, "warmup", now.Sub(p.Since).Round(time.Millisecond), "reason", p.Reason)
		c.publish(p.Map)
		return true, nil
	}
	if !p.Deadline.IsZero() && now.After(p.Deadline) {
		lag := p.Waiting()
		c.log.Infow("warmup deadline passed", "epoch", epoch, "laggards", lag)
		return true, c.apply(WarmupAbandoned{Epoch: epoch, Laggards: lag, Until: now.Add(c.cfg.laggardPenalty),
			Reason: fmt.Sprintf("%d node(s) not ready by the deadline", len(lag))})
	}
	return false, nil
}

// publish gossips a committed map, off the loop.
func (c *Consensus) publish(m layers.LayerMap) {
	if c.cfg.publisher == nil {
		return
	}
	c.lead.published = time.Now()
	data, err := m.MarshalBinary()
	if err != nil {
		c.log.Warnw("map notice", "epoch", m.Epoch, "error", err)
		return
	}
	c.wg.Add(1) // the leader loop holds the group open: Add is safe
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.rpcTimeout)
		defer cancel()
		if err := c.cfg.publisher.PublishMapNotice(ctx, data); err != nil && ctx.Err() == nil {
			c.log.Warnw("map notice", "epoch", m.Epoch, "error", err)
		}
	}()
}

// fleet is the members a plan may place: not draining, not laggards, not
// dead, with their measured speeds.
func (c *Consensus) fleet(s State, now time.Time) (*layers.Fleet, map[string]bool, error) {
	var nodes []layers.Node
	ok := map[string]bool{}
	for _, m := range s.Members() {
		if m.Draining || now.Before(m.LaggardUntil) || c.deadFor(m.ID, now) > 0 {
			continue
		}
		n := layers.Node{ID: m.ID, Hardware: m.Caps.Hardware, Region: m.Caps.Region, MaxLayers: m.Caps.MaxLayers}
		if c.cfg.speeds != nil {
			if p, err := peer.Decode(m.ID); err == nil {
				if v, ok := c.cfg.speeds.Speed(p); ok && v > 0 {
					n.Speed = v
				}
			}
		}
		nodes = append(nodes, n)
		ok[m.ID] = true
	}
	f, err := layers.NewFleet(c.cfg.model, nodes, c.cfg.costParams)
	return f, ok, err
}

// plan proposes the next map, if there is one to propose.
func (c *Consensus) plan(s State, now time.Time) (bool, error) {
	f, placeable, err := c.fleet(s, now)
	if err != nil {
		return false, err
	}
	if f.Len() == 0 {
		return false, nil
	}
	committed := s.Committed()
	pl := c.cfg.planner
	if committed.Layers == 0 {
		plan, err := c.full(s, f, 1)
		if err != nil {
			return false, nil // not enough capacity yet: wait for members
		}
		return c.propose(committed, plan.Map, "first map")
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
			plan, ferr := c.full(s, f, committed.Epoch+1)
			if ferr != nil {
				return false, nil // no covering map: keep the committed one
			}
			c.lead.goal = nil
			return c.propose(committed, plan.Map, fmt.Sprintf("re-plan after %v left", gone))
		}
		target = next
	}
	if len(gone) > 0 {
		c.lead.goal = nil
		return c.propose(committed, target, fmt.Sprintf("repair after %v left", gone))
	}
	// A migration in steps goes on.
	if g := c.lead.goal; g != nil {
		c.lead.goal = nil
		if g.base == committed.Epoch && allPlaceable(g.target, placeable) {
			return c.stepwise(f, committed, g.target, g.reason)
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
			plan, ferr := c.full(s, f, committed.Epoch+1)
			if ferr != nil {
				return false, nil // nowhere to go: the node stays until capacity comes
			}
			return c.stepwise(f, committed, plan.Map, fmt.Sprintf("re-plan without draining %v", draining))
		}
		target = next
	}
	if len(draining) > 0 {
		return c.stepwise(f, committed, target, fmt.Sprintf("drain of %v", draining))
	}
	// New members: place each where it adds the most.
	var joined []string
	for _, pr := range f.Profiles {
		id := pr.Node.ID
		if _, in := target.Range(id); in || c.lead.benched[id] {
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
		return c.stepwise(f, committed, target, fmt.Sprintf("join of %v", joined))
	}
	// Rebalance when layers says it pays, and only on a settled swarm.
	every := c.cfg.rebalanceEvery
	if every <= 0 || now.Sub(c.lead.lastRebalance) < every {
		return false, nil
	}
	c.lead.lastRebalance = now
	for _, id := range committed.Nodes() {
		if !placeable[id] {
			return false, nil
		}
	}
	rb, err := pl.Rebalance(f, committed, c.cfg.rebalanceOpts)
	if err != nil {
		return false, err
	}
	if !rb.Move {
		c.log.Debugw("no rebalance", "reason", rb.Reason)
		return false, nil
	}
	for _, id := range committed.Nodes() {
		if _, in := rb.To.Range(id); !in {
			c.lead.benched[id] = true
		}
	}
	return c.stepwise(f, committed, rb.To, "rebalance: "+rb.Reason)
}

// full plans afresh. A fleet that could not be covered is not planned
// again until the state or the fleet changes: a full search is the
// costly part of a step.
func (c *Consensus) full(s State, f *layers.Fleet, epoch uint64) (layers.Plan, error) {
	key := fmt.Sprint(s.Applied(), f.Len())
	for _, p := range f.Profiles {
		key += " " + p.Node.ID
	}
	if key == c.lead.noPlan {
		return layers.Plan{}, fmt.Errorf("%w: unchanged since the last attempt", layers.ErrNoCoverage)
	}
	plan, err := c.cfg.planner.Full(f, epoch)
	if err != nil {
		c.lead.noPlan = key
		c.log.Debugw("no covering plan", "members", f.Len(), "error", err)
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
func (c *Consensus) stepwise(f *layers.Fleet, committed, target layers.LayerMap, reason string) (bool, error) {
	steps, err := layers.OrderMoves(f, committed, layers.Diff(f.Model, committed, target))
	if err != nil {
		c.log.Warnw("no safe order of moves; moving at once", "reason", reason, "error", err)
		return c.propose(committed, target, reason)
	}
	if len(steps) <= 1 {
		return c.propose(committed, target, reason)
	}
	next := committed
	for _, mv := range steps[0] {
		if mv.To.Empty() {
			next = next.Without(mv.Node)
		} else {
			next = next.With(mv.Node, mv.To)
		}
	}
	c.lead.goal = &goal{base: committed.Epoch + 1, target: target, reason: reason}
	return c.propose(committed, next, fmt.Sprintf("%s (first of %d steps)", reason, len(steps)))
}

// propose appends MapProposed for target as the next epoch.
func (c *Consensus) propose(committed, target layers.LayerMap, reason string) (bool, error) {
	target.Epoch = committed.Epoch + 1
	if committed.Layers != 0 && target.SameStages(committed) {
		return false, nil
	}
	if !target.Covers() {
		return false, fmt.Errorf("%w: planned map has gaps %v", ErrRejected, target.Gaps())
	}
	c.log.Infow("proposing", "epoch", target.Epoch, "reason", reason, "stages", target.Stages)
	err := c.apply(MapProposed{Map: target, Deadline: time.Now().Add(c.cfg.warmup), Reason: truncate(reason, MaxReasonLen)})
	if errors.Is(err, ErrUnknownMember) {
		return false, nil // raced with a departure: the next step re-plans
	}
	return err == nil, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// leaderRequest handles a member's request on the leader.
func (c *Consensus) leaderRequest(_ context.Context, ev Event) error {
	s := c.fsm.current()
	switch e := ev.(type) {
	case NodeJoined:
		if m, ok := s.Member(e.Node); ok && !m.Draining && sameJoin(m, e) {
			return nil
		}
		if err := c.apply(e); err != nil {
			return err
		}
		kick(c.kickL)
		return nil
	case NodeDraining:
		if m, ok := s.Member(e.Node); ok && m.Draining {
			return nil
		}
		err := c.apply(e)
		kick(c.kickL)
		return err
	case StageReady:
		err := c.apply(e)
		kick(c.kickL)
		return err
	}
	return fmt.Errorf("%w: %s is not a request", ErrForbidden, ev.Kind())
}

func sameJoin(m Member, e NodeJoined) bool {
	if m.Caps != e.Caps || len(m.Addrs) != len(e.Addrs) {
		return false
	}
	for i := range m.Addrs {
		if m.Addrs[i] != e.Addrs[i] {
			return false
		}
	}
	return true
}
