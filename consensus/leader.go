package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/layers"
)

// The leader loop carries out Decide's actions (decide.go): it gathers
// the input, executes the one action Decide returns, and repeats until
// Decide has nothing to do; then it sleeps until the state changes or a
// tick passes.

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
		if !c.leadOnce() {
			return
		}
	}
}

// leadOnce is one wake of the leader loop; false once Close stopped it.
func (c *Consensus) leadOnce() bool {
	c.stepMu.Lock()
	defer c.stepMu.Unlock()
	if c.closing {
		return false
	}
	if !c.IsLeader() {
		c.lead = LeaderState{}
		return true
	}
	if c.lead.since.IsZero() {
		c.lead = NewLeaderState(time.Now())
		c.log.Infow("leading", "term", c.raft.CurrentTerm())
	}
	if r := c.cfg.republish; r > 0 && time.Since(c.published) >= r {
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
	return true
}

// closeAsVoter lets a voter close without stranding the swarm, within
// timeout. While it leads, it waits until every live voter holds the
// latest configuration (decision.settled), so that no voter is left that
// would refuse the new leader its vote, then hands over (handOver). Then,
// or if it does not lead, it stays up, voting and standing in elections,
// until another member leads: a leader that missed its lease on a loaded
// machine may be the only member that can still win (a lagging voter
// catches up only from a leader), and after a handover its own vote may
// be needed. It reports whether it handed over or another member leads;
// the leader loop has stopped by then.
func (c *Consensus) closeAsVoter(timeout time.Duration) bool {
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	deadline := time.After(timeout)
	handed := false
	var tried time.Time
	for {
		// While this member leads it hands over, again an election
		// timeout after each try: on a loaded machine a transfer can fail
		// (its target misses the deadline), or succeed and the closing
		// member, still voting and standing, be elected again (seen: a
		// "successful" transfer, then this member leading at the next
		// term until the deadline). If it leads no more, it waits for
		// the member that does.
		if c.IsLeader() && time.Since(tried) >= c.cfg.election {
			in, err := c.leaderInput(time.Now())
			d := decision{in: &in, st: c.lead}
			if err == nil && d.settled("", "") {
				tried = time.Now()
				handed = c.handOver() || handed
			}
		}
		if _, id := c.raft.LeaderWithID(); id != "" && id != raft.ServerID(c.id.String()) {
			return true
		}
		select {
		case <-deadline:
			if c.IsLeader() {
				var lagging []string
				if in, err := c.leaderInput(time.Now()); err == nil {
					for _, sv := range in.Servers {
						if sv.Lagging {
							lagging = append(lagging, sv.ID)
						}
					}
				}
				c.log.Warnw("closing while leading: a voter lacks the latest configuration, or every handover failed",
					"waited", timeout, "lagging", lagging, "handed_over", handed, "term", c.raft.CurrentTerm())
				return c.handOver()
			}
			_, leader := c.raft.LeaderWithID()
			c.log.Warnw("closing with no other member leading", "waited", timeout, "handed_over", handed, "leader", leader, "term", c.raft.CurrentTerm())
			return handed
		case <-t.C:
		case <-c.kickL:
		}
	}
}

// leaderInput gathers what Decide reads: the state, Raft's
// configuration, liveness and speeds as plain data.
func (c *Consensus) leaderInput(now time.Time) (LeaderInput, error) {
	term := c.raft.CurrentTerm()
	cf := c.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return LeaderInput{}, err
	}
	cfIndex, err := c.cfScan.latest(c.st.logs, term)
	if err != nil {
		return LeaderInput{}, err
	}
	in := LeaderInput{
		Self:      c.id.String(),
		Leaving:   c.leaving.Load(),
		State:     c.fsm.current(),
		DeadSince: map[string]time.Time{},
		Speeds:    map[string]float64{},
		Now:       now,
		Config: LeaderConfig{
			Model: c.cfg.model, Planner: c.cfg.planner, CostParams: c.cfg.costParams,
			DeadGrace: c.cfg.deadGrace, StableAfter: c.cfg.stableAfter, MaxVoters: c.cfg.maxVoters,
			Warmup: c.cfg.warmup, LaggardPenalty: c.cfg.laggardPenalty,
			RebalanceEvery: c.cfg.rebalanceEvery, RebalanceOpts: c.cfg.rebalanceOpts,
			TrustChecks: c.cfg.trustChecks,
		},
	}
	if in.State.HasStewards() {
		in.Vouches = vouchesOf(c.cfg.vouches)
	}
	if _, banned := in.State.Banned(in.Self, now); !in.State.IsMember(in.Self) && !banned {
		in.Join = c.joinEvent()
	}
	if len(c.cfg.manifest) > 0 {
		in.Manifest = ManifestPublished{Fingerprint: c.cfg.fingerprint, Manifest: c.cfg.manifest}
		in.ManifestParts = c.cfg.manifestParts
	}
	if c.cfg.hasVerifyRate {
		in.SwarmConfig = &SwarmConfigSet{VerifyRate: c.cfg.verifyRate}
	}
	if n := c.cfg.sessionTokens; n > 0 {
		in.SessionTokens = &SessionTokensSet{Tokens: n}
	}
	in.Stewards = c.foundingStewards(in.State, now)
	seen := map[string]bool{}
	look := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		p, err := peer.Decode(id)
		if err != nil {
			in.DeadSince[id] = time.Time{} // no peer: dead for ever
			return
		}
		if since, dead := c.live.DeadSince(p); dead && id != in.Self {
			in.DeadSince[id] = since
		}
		if c.cfg.speeds != nil {
			if v, ok := c.cfg.speeds.Speed(p); ok {
				in.Speeds[id] = v // the leader's own too
			}
		}
		if c.cfg.fetch != nil {
			if v, ok := c.cfg.fetch.FetchRate(p); ok && v > 0 {
				if in.FetchRates == nil {
					in.FetchRates = map[string]float64{}
				}
				in.FetchRates[id] = v
			}
		}
	}
	for _, sv := range cf.Configuration().Servers {
		lag := sv.ID != raft.ServerID(in.Self) && !c.cfg.ignoreLag && c.prog.matched(term, sv.ID) < cfIndex
		in.Servers = append(in.Servers, RaftServer{ID: string(sv.ID), Voter: sv.Suffrage == raft.Voter, Lagging: lag})
		look(string(sv.ID))
	}
	for _, m := range in.State.Members() {
		look(m.ID)
	}
	return in, nil
}

// leaderStep decides once and carries the action out. It reports whether
// it acted, so that the loop decides again at once.
func (c *Consensus) leaderStep(now time.Time) (bool, error) {
	in, err := c.leaderInput(now)
	if err != nil {
		return false, err
	}
	a, next, err := Decide(in, c.lead)
	c.lead = next
	if err != nil || a == nil {
		return false, err
	}
	return c.execute(a, in.State)
}

// execute carries out one action of Decide against Raft.
func (c *Consensus) execute(a Action, before State) (bool, error) {
	rt := c.cfg.rpcTimeout
	switch a := a.(type) {
	case Append:
		return c.executeAppend(a, before)
	case AddNonvoter:
		c.log.Infow("adding non-voter", "peer", a.ID)
		return true, c.configChange(c.raft.AddNonvoter(raft.ServerID(a.ID), raft.ServerAddress(a.ID), 0, rt))
	case AddVoter:
		c.log.Infow("promoting voter", "peer", a.ID)
		return true, c.configChange(c.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.ID), 0, rt))
	case RemoveServer:
		c.log.Infow("removing server", "peer", a.ID)
		return true, c.configChange(c.raft.RemoveServer(raft.ServerID(a.ID), 0, rt))
	case Demote:
		c.log.Infow("demoting voter", "peer", a.ID)
		return true, c.configChange(c.raft.DemoteVoter(raft.ServerID(a.ID), 0, rt))
	case TransferLeadership:
		c.log.Infow("drained: handing over leadership")
		if err := c.wait(c.raft.LeadershipTransfer()); err != nil {
			return false, fmt.Errorf("leadership transfer: %w", err)
		}
		return false, nil // no longer the leader: stop deciding
	}
	return false, fmt.Errorf("consensus: unknown leader action %T", a)
}

func (c *Consensus) executeAppend(a Append, before State) (bool, error) {
	switch e := a.Event.(type) {
	case MapProposed:
		c.log.Infow("proposing", "epoch", e.Map.Epoch, "reason", e.Reason, "stages", e.Map.Stages, "note", a.Why)
	case MapCommitted:
	default:
		c.log.Infow("leader appends", "event", e.Kind(), "why", a.Why)
	}
	err := c.apply(a.Event)
	switch e := a.Event.(type) {
	case MapProposed:
		if errors.Is(err, ErrUnknownMember) {
			return false, nil // raced with a departure: the next step re-plans
		}
	case MapCommitted:
		if err == nil {
			p, _ := before.Pending()
			c.log.Infow("committed", "epoch", e.Epoch, "warmup", a.Why)
			c.publish(p.Map)
		}
	}
	return err == nil, err
}

// configChange waits for a configuration change (wait: at most until
// the member closes).
func (c *Consensus) configChange(f raft.IndexFuture) error {
	if err := c.wait(f); err != nil {
		return fmt.Errorf("raft configuration change: %w", err)
	}
	return nil
}

// publish gossips a committed map, off the loop.
func (c *Consensus) publish(m layers.LayerMap) {
	if c.cfg.publisher == nil {
		return
	}
	c.published = time.Now()
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

// leaderRequest handles a member's request on the leader.
func (c *Consensus) leaderRequest(_ context.Context, ev Event) error {
	s := c.fsm.current()
	switch e := ev.(type) {
	case NodeJoined:
		// The founder's join is the swarm's first record, and its steward
		// set (if it names one) comes before anyone else's join: the first
		// set is the senior member's to sign (stewards.go), and a stranger
		// whose request arrived first would otherwise be it.
		if self := c.id.String(); e.Node != self {
			if s.Len() == 0 {
				return fmt.Errorf("%w: the founder has not joined yet", ErrNoLeader)
			}
			if c.foundingStewards(s, time.Now()) != nil {
				return fmt.Errorf("%w: the founder has not named its stewards yet", ErrNoLeader)
			}
		}
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
	case NodeFaulted:
		return c.faultReport(e)
	case StewardsSet:
		if e.Seq == s.StewardSeq() && slices.Equal(e.Stewards, s.Stewards()) {
			return nil // appended already: a retried request
		}
		err := c.apply(e) // the fold checks the signature
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
