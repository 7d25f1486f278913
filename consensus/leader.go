package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/layers"
)

// The leader loop carries out Decide's actions (decide.go): it gathers
// the input, executes the one action Decide returns, and repeats until
// Decide has nothing to do; then it sleeps until the state changes or a
// tick passes.

// leader owns the leader loop and what it remembers within a term, and
// answers the requests members send the leader (request). It runs on
// every member and acts only while Raft says this member leads.
type leader struct {
	*base          // fields only: base has no methods to promote
	member *member // this node's join and founding stewards, for the input

	// stepMu is held by the loop while it decides and acts, and by Close
	// when it stops the loop (closing), so that no configuration change
	// is in flight while Close hands over.
	stepMu  sync.Mutex
	closing bool

	mem       LeaderState // owned by the loop (under stepMu)
	published time.Time   // the loop's last map notice
}

// stop ends the loop's acting: once it returns, no step is in flight and
// none follows.
func (l *leader) stop() {
	l.stepMu.Lock()
	l.closing = true
	l.stepMu.Unlock()
}

func (l *leader) loop() {
	defer l.wg.Done()
	t := time.NewTicker(l.cfg.tick)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		case <-l.kickL:
		}
		if !l.once() {
			return
		}
	}
}

// once is one wake of the leader loop; false once Close stopped it.
func (l *leader) once() bool {
	l.stepMu.Lock()
	defer l.stepMu.Unlock()
	if l.closing {
		return false
	}
	if !l.rn.isLeader() {
		l.mem = LeaderState{}
		return true
	}
	if l.mem.since.IsZero() {
		l.mem = NewLeaderState(time.Now())
		l.log.Infow("leading", "term", l.rn.raft.CurrentTerm())
	}
	if r := l.cfg.republish; r > 0 && time.Since(l.published) >= r {
		if m := l.fsm.current().Committed(); m.Layers > 0 {
			l.publish(m)
		}
	}
	for range 32 {
		acted, err := l.step(time.Now())
		if err != nil {
			if l.ctx.Err() == nil {
				l.log.Infow("leader step", "error", err)
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
func (l *leader) closeAsVoter(timeout time.Duration) bool {
	t := time.NewTicker(l.cfg.tick)
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
		if l.rn.isLeader() && time.Since(tried) >= l.cfg.election {
			in, err := l.input(time.Now())
			d := decision{in: &in, st: l.mem}
			if err == nil && d.settled("", "") {
				tried = time.Now()
				handed = l.rn.handOver() || handed
			}
		}
		if _, id := l.rn.raft.LeaderWithID(); id != "" && id != raft.ServerID(l.id.String()) {
			return true
		}
		select {
		case <-deadline:
			if l.rn.isLeader() {
				var lagging []string
				if in, err := l.input(time.Now()); err == nil {
					for _, sv := range in.Servers {
						if sv.Lagging {
							lagging = append(lagging, sv.ID)
						}
					}
				}
				l.log.Warnw("closing while leading: a voter lacks the latest configuration, or every handover failed",
					"waited", timeout, "lagging", lagging, "handed_over", handed, "term", l.rn.raft.CurrentTerm())
				return l.rn.handOver()
			}
			_, leader := l.rn.raft.LeaderWithID()
			l.log.Warnw("closing with no other member leading", "waited", timeout, "handed_over", handed, "leader", leader, "term", l.rn.raft.CurrentTerm())
			return handed
		case <-t.C:
		case <-l.kickL:
		}
	}
}

// input gathers what Decide reads: the state, Raft's
// configuration, liveness and speeds as plain data.
func (l *leader) input(now time.Time) (LeaderInput, error) {
	term := l.rn.raft.CurrentTerm()
	cf := l.rn.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return LeaderInput{}, err
	}
	cfIndex, err := l.rn.cfScan.latest(l.rn.st.logs, term)
	if err != nil {
		return LeaderInput{}, err
	}
	in := LeaderInput{
		Self:      l.id.String(),
		Leaving:   l.leaving.Load(),
		State:     l.fsm.current(),
		DeadSince: map[string]time.Time{},
		Speeds:    map[string]float64{},
		Now:       now,
		Config: LeaderConfig{
			Model: l.cfg.model, Planner: l.cfg.planner, CostParams: l.cfg.costParams,
			DeadGrace: l.cfg.deadGrace, StableAfter: l.cfg.stableAfter, MaxVoters: l.cfg.maxVoters,
			Warmup: l.cfg.warmup, LaggardPenalty: l.cfg.laggardPenalty,
			RebalanceEvery: l.cfg.rebalanceEvery, RebalanceOpts: l.cfg.rebalanceOpts,
			TrustChecks: l.cfg.trustChecks,
		},
	}
	if !in.State.Stewards().Empty() {
		in.Vouches = vouchesOf(l.cfg.vouches)
	}
	if _, banned := in.State.Banned(in.Self, now); !in.State.IsMember(in.Self) && !banned {
		in.Join = l.member.joinEvent()
	}
	if len(l.cfg.manifest) > 0 {
		in.Manifest = ManifestPublished{Fingerprint: l.cfg.fingerprint, Manifest: l.cfg.manifest}
		in.ManifestParts = l.cfg.manifestParts
	}
	if l.cfg.hasVerifyRate {
		in.SwarmConfig = &SwarmConfigSet{VerifyRate: l.cfg.verifyRate}
	}
	if n := l.cfg.sessionTokens; n > 0 {
		in.SessionTokens = &SessionTokensSet{Tokens: n}
	}
	in.Stewards = l.member.foundingStewards(in.State, now)
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
		if since, dead := l.live.DeadSince(p); dead && id != in.Self {
			in.DeadSince[id] = since
		}
		if l.cfg.speeds != nil {
			if v, ok := l.cfg.speeds.Speed(p); ok {
				in.Speeds[id] = v // the leader's own too
			}
		}
		if l.cfg.fetch != nil {
			if v, ok := l.cfg.fetch.FetchRate(p); ok && v > 0 {
				if in.FetchRates == nil {
					in.FetchRates = map[string]float64{}
				}
				in.FetchRates[id] = v
			}
		}
	}
	for _, sv := range cf.Configuration().Servers {
		lag := sv.ID != raft.ServerID(in.Self) && !l.cfg.ignoreLag && l.rn.prog.matched(term, sv.ID) < cfIndex
		in.Servers = append(in.Servers, RaftServer{ID: string(sv.ID), Voter: sv.Suffrage == raft.Voter, Lagging: lag})
		look(string(sv.ID))
	}
	for _, m := range in.State.Members() {
		look(m.ID)
	}
	return in, nil
}

// step decides once and carries the action out. It reports whether
// it acted, so that the loop decides again at once.
func (l *leader) step(now time.Time) (bool, error) {
	in, err := l.input(now)
	if err != nil {
		return false, err
	}
	a, next, err := Decide(in, l.mem)
	l.mem = next
	if err != nil || a == nil {
		return false, err
	}
	return l.execute(a, in.State)
}

// execute carries out one action of Decide against Raft.
func (l *leader) execute(a Action, before State) (bool, error) {
	rt := l.cfg.rpcTimeout
	switch a := a.(type) {
	case Append:
		return l.executeAppend(a, before)
	case AddNonvoter:
		l.log.Infow("adding non-voter", "peer", a.ID)
		return true, l.rn.configChange(l.rn.raft.AddNonvoter(raft.ServerID(a.ID), raft.ServerAddress(a.ID), 0, rt))
	case AddVoter:
		l.log.Infow("promoting voter", "peer", a.ID)
		return true, l.rn.configChange(l.rn.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.ID), 0, rt))
	case RemoveServer:
		l.log.Infow("removing server", "peer", a.ID)
		return true, l.rn.configChange(l.rn.raft.RemoveServer(raft.ServerID(a.ID), 0, rt))
	case Demote:
		l.log.Infow("demoting voter", "peer", a.ID)
		return true, l.rn.configChange(l.rn.raft.DemoteVoter(raft.ServerID(a.ID), 0, rt))
	case TransferLeadership:
		l.log.Infow("drained: handing over leadership")
		if err := l.rn.wait(l.rn.raft.LeadershipTransfer()); err != nil {
			return false, fmt.Errorf("leadership transfer: %w", err)
		}
		return false, nil // no longer the leader: stop deciding
	}
	return false, fmt.Errorf("consensus: unknown leader action %T", a)
}

func (l *leader) executeAppend(a Append, before State) (bool, error) {
	switch e := a.Event.(type) {
	case MapProposed:
		l.log.Infow("proposing", "epoch", e.Map.Epoch, "reason", e.Reason, "stages", e.Map.Stages, "note", a.Why)
	case MapCommitted:
	default:
		l.log.Infow("leader appends", "event", e.Kind(), "why", a.Why)
	}
	err := l.rn.apply(a.Event)
	switch e := a.Event.(type) {
	case MapProposed:
		if errors.Is(err, ErrUnknownMember) {
			return false, nil // raced with a departure: the next step re-plans
		}
	case MapCommitted:
		if err == nil {
			p, _ := before.Pending()
			l.log.Infow("committed", "epoch", e.Epoch, "warmup", a.Why)
			l.publish(p.Map)
		}
	}
	return err == nil, err
}

// publish gossips a committed map, off the loop.
func (l *leader) publish(m layers.LayerMap) {
	if l.cfg.publisher == nil {
		return
	}
	l.published = time.Now()
	data, err := m.MarshalBinary()
	if err != nil {
		l.log.Warnw("map notice", "epoch", m.Epoch, "error", err)
		return
	}
	l.wg.Add(1) // the leader loop holds the group open: Add is safe
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(l.ctx, l.cfg.rpcTimeout)
		defer cancel()
		if err := l.cfg.publisher.PublishMapNotice(ctx, data); err != nil && ctx.Err() == nil {
			l.log.Warnw("map notice", "epoch", m.Epoch, "error", err)
		}
	}()
}

// request handles a member's request on the leader.
func (l *leader) request(_ context.Context, ev Event) error {
	s := l.fsm.current()
	switch e := ev.(type) {
	case NodeJoined:
		// The founder's join is the swarm's first record, and its steward
		// set (if it names one) comes before anyone else's join: the first
		// set is the senior member's to sign (stewards.go), and a stranger
		// whose request arrived first would otherwise be it.
		if self := l.id.String(); e.Node != self {
			if s.Len() == 0 {
				return fmt.Errorf("%w: the founder has not joined yet", ErrNoLeader)
			}
			if l.member.foundingStewards(s, time.Now()) != nil {
				return fmt.Errorf("%w: the founder has not named its stewards yet", ErrNoLeader)
			}
		}
		if m, ok := s.Member(e.Node); ok && !m.Draining && sameJoin(m, e) {
			return nil
		}
		if err := l.rn.apply(e); err != nil {
			return err
		}
		kick(l.kickL)
		return nil
	case NodeDraining:
		if m, ok := s.Member(e.Node); ok && m.Draining {
			return nil
		}
		err := l.rn.apply(e)
		kick(l.kickL)
		return err
	case StageReady:
		err := l.rn.apply(e)
		kick(l.kickL)
		return err
	case NodeFaulted:
		return l.faultReport(e)
	case StewardsSet:
		if e.Seq == s.Stewards().Seq() && slices.Equal(e.Stewards, s.Stewards().List()) {
			return nil // appended already: a retried request
		}
		err := l.rn.apply(e) // the fold checks the signature
		kick(l.kickL)
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
