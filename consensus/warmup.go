package consensus

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/layers"
)

// The member loop runs on every member. It asks to join until the state
// lists this node, keeps the peerstore and the address book in step with
// the members' addresses, and carries out this node's part of a warmup:
// it has the StageLoader load the node's range of the pending map, then
// reports StageReady to the leader; after a commit it has the loader
// release what the node no longer serves.

// member owns this node's own part of the swarm: the member loop, its
// join (and a join refused for good), the members' addresses in the
// peerstore and the address book, the protection of its connections to
// voters, its loads and releases, and the steward set it signs as the
// founder (stewards.go).
type member struct {
	*base      // fields only: base has no methods to promote
	ctl   *ctl // requests to the leader

	joinErr atomic.Pointer[error] // a join refused for good
	book    addrBook              // the address book as last saved (the loop's)
}

type memberState struct {
	joining  bool
	joined   bool // a join request of this run was accepted
	loading  Load
	cancel   context.CancelFunc
	released Load
	restore  context.CancelFunc // the load of the committed range (see warmup)
	addrs    map[string][]string
	voters   map[peer.ID]bool // protected in the connection manager
	// stewardsAt: when this founder last asked the leader to append its
	// steward set (stewards.go).
	stewardsAt time.Time
}

func (m *member) loop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.tick)
	defer t.Stop()
	ms := &memberState{addrs: map[string][]string{}, voters: map[peer.ID]bool{}}
	joined := make(chan error, 1)
	for {
		select {
		case <-m.ctx.Done():
			if ms.cancel != nil {
				ms.cancel()
			}
			if ms.restore != nil {
				ms.restore()
			}
			return
		case err := <-joined:
			ms.joining = false
			ms.joined = ms.joined || err == nil
			if err != nil && !retryable(err) {
				m.joinErr.Store(&err)
				m.log.Errorw("join refused", "error", err)
			}
		case <-t.C:
		case <-m.kickM:
		}
		s := m.fsm.current()
		m.syncAddrs(s, ms)
		m.protectVoters(ms)
		m.ensureJoined(s, ms, joined)
		m.ensureStewards(s, ms)
		m.warmup(s, ms)
	}
}

// ensureJoined sends one join request at a time while this node is not a
// member, unless it leaves or was refused for good.
func (m *member) ensureJoined(s State, ms *memberState, done chan<- error) {
	if ms.joining || m.leaving.Load() || m.joinErr.Load() != nil {
		return
	}
	// A member that has not heard from a leader for long may have been
	// removed while cut off: it asks again (a no-op for a member). So does
	// one restarted from its data dir, once: its state may be stale, the
	// leader may have removed it meanwhile, and its addresses may have
	// changed.
	lost := !m.rn.isLeader() && time.Since(m.rn.raft.LastContact()) > 20*m.cfg.election+m.cfg.deadGrace
	if s.IsMember(m.id.String()) && !lost && ms.joined {
		return
	}
	ms.joining = true
	ev := m.joinEvent()
	m.wg.Add(1) // the member loop holds the group open: Add is safe
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, 4*m.cfg.rpcTimeout)
		defer cancel()
		err := m.ctl.request(ctx, ev)
		if err != nil && m.ctx.Err() == nil {
			m.log.Debugw("join request", "error", err)
		}
		done <- err
	}()
}

func (m *member) joinEvent() NodeJoined {
	var addrs []string
	for _, a := range m.h.Addrs() {
		if s := a.String(); len(s) <= MaxAddrLen && len(addrs) < MaxAddrs {
			addrs = append(addrs, s)
		}
	}
	return NodeJoined{Node: m.id.String(), Caps: m.cfg.caps, Fingerprint: m.cfg.fingerprint, Addrs: addrs}
}

// syncAddrs puts members' addresses into the peerstore, so that any
// member can dial any other for elections, and into the address book.
func (m *member) syncAddrs(s State, ms *memberState) {
	book := addrBook{}
	changed := false
	for _, mem := range s.Members() {
		if mem.ID == m.id.String() {
			continue
		}
		book[mem.ID] = mem.Addrs
		if slices.Equal(ms.addrs[mem.ID], mem.Addrs) {
			continue
		}
		changed = true
		ms.addrs[mem.ID] = mem.Addrs
		if p, err := peer.Decode(mem.ID); err == nil {
			m.h.AddAddrs(p, parseAddrs(mem.Addrs))
		}
	}
	if !changed && len(book) == len(ms.addrs) {
		return
	}
	for id := range ms.addrs {
		if _, ok := book[id]; !ok {
			delete(ms.addrs, id)
		}
	}
	// Keep the addresses of departed voters the book knew: the log may
	// still name them. The book only grows by members, bounded.
	prev := m.book
	next := maps.Clone(book)
	m.book = next
	if err := m.rn.st.saveAddrBook(next, prev); err != nil {
		m.log.Warnw("address book", "error", err)
	}
}

// protectVoters keeps the connection manager from trimming connections
// to Raft voters.
func (m *member) protectVoters(ms *memberState) {
	servers, err := m.rn.servers()
	if err != nil {
		return
	}
	now := map[peer.ID]bool{}
	for _, s := range servers {
		if s.Voter && s.ID != m.id {
			now[s.ID] = true
			if !ms.voters[s.ID] {
				m.h.Protect(s.ID, proto.TagVoter)
			}
		}
	}
	for id := range ms.voters {
		if !now[id] {
			m.h.Unprotect(id, proto.TagVoter)
		}
	}
	ms.voters = now
}

// Load is a range of one epoch's map that a member loads or holds.
type Load struct {
	Epoch uint64
	Range layers.Range
}

// WarmupStep is what a member does about its layers on seeing a state.
// The zero value: nothing.
type WarmupStep struct {
	// Cancel: drop the load in progress (the pending map moved on).
	Cancel bool
	// Start: load this range of the pending map, then report StageReady.
	Start Load
	// Release: a map was committed; release every layer outside
	// Release.Range and load Release.Range again without reporting (a
	// no-op for a node that holds it; a node restarted from its data dir
	// gets its layers back). An empty range: the node serves nothing.
	Release Load
}

// DecideWarmup is the member loop's warmup policy as a pure function:
// given the state, the load in progress and the last release, it says
// what node self should do. Like Decide it only reads its input.
func DecideWarmup(self string, s State, loading, released Load) WarmupStep {
	var step WarmupStep
	p, pending := s.Pending()
	want := Load{}
	if pending && p.Loads(self) && !p.Ready(self) {
		r, _ := p.Map.Range(self)
		want = Load{Epoch: p.Map.Epoch, Range: r}
	}
	step.Cancel = loading != want && loading != Load{}
	if want != (Load{}) && loading != want {
		step.Start = want
	}
	committed := s.Committed()
	if pending || committed.Layers == 0 {
		return step
	}
	keep, _ := committed.Range(self)
	if rel := (Load{Epoch: committed.Epoch, Range: keep}); rel != released {
		step.Release = rel
	}
	return step
}

// warmup carries out DecideWarmup's step: it starts, cancels and reports
// this node's loads, and releases.
func (m *member) warmup(s State, ms *memberState) {
	step := DecideWarmup(m.id.String(), s, ms.loading, ms.released)
	if step.Cancel {
		ms.cancel()
		ms.cancel = nil
		ms.loading = Load{}
	}
	if want := step.Start; want != (Load{}) {
		ctx, cancel := context.WithCancel(m.ctx)
		ms.loading, ms.cancel = want, cancel
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.load(ctx, want, true)
		}()
	}
	rel := step.Release
	if rel == (Load{}) {
		return
	}
	ms.released = rel
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.rpcTimeout)
	defer cancel()
	if err := m.cfg.loader.Release(ctx, rel.Epoch, rel.Range); err != nil {
		m.log.Warnw("release", "epoch", rel.Epoch, "keep", rel.Range, "error", err)
	}
	if ms.restore != nil {
		ms.restore()
		ms.restore = nil
	}
	if !rel.Range.Empty() {
		rctx, rcancel := context.WithCancel(m.ctx)
		ms.restore = rcancel
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.load(rctx, rel, false)
		}()
	}
}

// load has the loader load k, retrying until it succeeds or ctx ends,
// then (if ready) reports StageReady for a pending map's range.
func (m *member) load(ctx context.Context, k Load, ready bool) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := m.cfg.loader.Load(ctx, k.Epoch, k.Range)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		m.log.Warnw("load failed; retrying", "epoch", k.Epoch, "range", k.Range, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*m.cfg.tick, 10*time.Second)):
		}
	}
	m.log.Debugw("loaded", "epoch", k.Epoch, "range", k.Range, "took", time.Since(start))
	if !ready {
		return
	}
	err := m.ctl.request(ctx, StageReady{Node: m.id.String(), Epoch: k.Epoch, Range: k.Range})
	if err != nil && !errors.Is(err, ErrStale) && ctx.Err() == nil {
		m.log.Warnw("stage ready", "epoch", k.Epoch, "error", err)
	}
}

// WaitJoined blocks until this node is a member, or its join was refused
// for good (ErrFingerprint, ...).
func (c *Consensus) WaitJoined(ctx context.Context) error {
	self := c.id.String()
	_, err := c.WaitFor(ctx, func(s State) bool { return s.IsMember(self) || c.member.joinErr.Load() != nil })
	if p := c.member.joinErr.Load(); p != nil {
		return *p
	}
	return err
}
