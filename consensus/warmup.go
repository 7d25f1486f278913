package consensus

import (
	"context"
	"errors"
	"maps"
	"slices"
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

func (c *Consensus) memberLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	ms := &memberState{addrs: map[string][]string{}, voters: map[peer.ID]bool{}}
	joined := make(chan error, 1)
	for {
		select {
		case <-c.ctx.Done():
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
				c.joinErr.Store(&err)
				c.log.Errorw("join refused", "error", err)
			}
		case <-t.C:
		case <-c.kickM:
		}
		s := c.fsm.current()
		c.syncAddrs(s, ms)
		c.protectVoters(ms)
		c.ensureJoined(s, ms, joined)
		c.ensureStewards(s, ms)
		c.warmup(s, ms)
	}
}

// ensureJoined sends one join request at a time while this node is not a
// member, unless it leaves or was refused for good.
func (c *Consensus) ensureJoined(s State, ms *memberState, done chan<- error) {
	if ms.joining || c.leaving.Load() || c.joinErr.Load() != nil {
		return
	}
	// A member that has not heard from a leader for long may have been
	// removed while cut off: it asks again (a no-op for a member). So does
	// one restarted from its data dir, once: its state may be stale, the
	// leader may have removed it meanwhile, and its addresses may have
	// changed.
	lost := !c.IsLeader() && time.Since(c.raft.LastContact()) > 20*c.cfg.election+c.cfg.deadGrace
	if s.IsMember(c.id.String()) && !lost && ms.joined {
		return
	}
	ms.joining = true
	ev := c.joinEvent()
	c.wg.Add(1) // the member loop holds the group open: Add is safe
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, 4*c.cfg.rpcTimeout)
		defer cancel()
		err := c.request(ctx, ev)
		if err != nil && c.ctx.Err() == nil {
			c.log.Debugw("join request", "error", err)
		}
		done <- err
	}()
}

func (c *Consensus) joinEvent() NodeJoined {
	var addrs []string
	for _, a := range c.h.Addrs() {
		if s := a.String(); len(s) <= MaxAddrLen && len(addrs) < MaxAddrs {
			addrs = append(addrs, s)
		}
	}
	return NodeJoined{Node: c.id.String(), Caps: c.cfg.caps, Fingerprint: c.cfg.fingerprint, Addrs: addrs}
}

// syncAddrs puts members' addresses into the peerstore, so that any
// member can dial any other for elections, and into the address book.
func (c *Consensus) syncAddrs(s State, ms *memberState) {
	book := addrBook{}
	changed := false
	for _, m := range s.Members() {
		if m.ID == c.id.String() {
			continue
		}
		book[m.ID] = m.Addrs
		if slices.Equal(ms.addrs[m.ID], m.Addrs) {
			continue
		}
		changed = true
		ms.addrs[m.ID] = m.Addrs
		if p, err := peer.Decode(m.ID); err == nil {
			c.h.AddAddrs(p, parseAddrs(m.Addrs))
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
	c.mu.Lock()
	prev := c.book
	next := maps.Clone(book)
	c.book = next
	c.mu.Unlock()
	if err := c.st.saveAddrBook(next, prev); err != nil {
		c.log.Warnw("address book", "error", err)
	}
}

// protectVoters keeps the connection manager from trimming connections
// to Raft voters.
func (c *Consensus) protectVoters(ms *memberState) {
	servers, err := c.Servers()
	if err != nil {
		return
	}
	now := map[peer.ID]bool{}
	for _, s := range servers {
		if s.Voter && s.ID != c.id {
			now[s.ID] = true
			if !ms.voters[s.ID] {
				c.h.Protect(s.ID, proto.TagVoter)
			}
		}
	}
	for id := range ms.voters {
		if !now[id] {
			c.h.Unprotect(id, proto.TagVoter)
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
func (c *Consensus) warmup(s State, ms *memberState) {
	step := DecideWarmup(c.id.String(), s, ms.loading, ms.released)
	if step.Cancel {
		ms.cancel()
		ms.cancel = nil
		ms.loading = Load{}
	}
	if want := step.Start; want != (Load{}) {
		ctx, cancel := context.WithCancel(c.ctx)
		ms.loading, ms.cancel = want, cancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.load(ctx, want, true)
		}()
	}
	rel := step.Release
	if rel == (Load{}) {
		return
	}
	ms.released = rel
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.rpcTimeout)
	defer cancel()
	if err := c.cfg.loader.Release(ctx, rel.Epoch, rel.Range); err != nil {
		c.log.Warnw("release", "epoch", rel.Epoch, "keep", rel.Range, "error", err)
	}
	if ms.restore != nil {
		ms.restore()
		ms.restore = nil
	}
	if !rel.Range.Empty() {
		rctx, rcancel := context.WithCancel(c.ctx)
		ms.restore = rcancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.load(rctx, rel, false)
		}()
	}
}

// load has the loader load k, retrying until it succeeds or ctx ends,
// then (if ready) reports StageReady for a pending map's range.
func (c *Consensus) load(ctx context.Context, k Load, ready bool) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.cfg.loader.Load(ctx, k.Epoch, k.Range)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Warnw("load failed; retrying", "epoch", k.Epoch, "range", k.Range, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*c.cfg.tick, 10*time.Second)):
		}
	}
	c.log.Debugw("loaded", "epoch", k.Epoch, "range", k.Range, "took", time.Since(start))
	if !ready {
		return
	}
	err := c.request(ctx, StageReady{Node: c.id.String(), Epoch: k.Epoch, Range: k.Range})
	if err != nil && !errors.Is(err, ErrStale) && ctx.Err() == nil {
		c.log.Warnw("stage ready", "epoch", k.Epoch, "error", err)
	}
}

// WaitJoined blocks until this node is a member, or its join was refused
// for good (ErrFingerprint, ...).
func (c *Consensus) WaitJoined(ctx context.Context) error {
	self := c.id.String()
	_, err := c.WaitFor(ctx, func(s State) bool { return s.IsMember(self) || c.joinErr.Load() != nil })
	if p := c.joinErr.Load(); p != nil {
		return *p
	}
	return err
}
