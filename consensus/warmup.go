package consensus

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/layers"
)

// The member loop runs on every member. It asks to join until the state
// lists this node, keeps the peerstore and the address book in step with
// the members' addresses, and carries out this node's part of a warmup:
// it has the StageLoader load the node's range of the pending map, then
// reports StageReady to the leader; after a commit it has the loader
// release what the node no longer serves.

type loadKey struct {
	epoch uint64
	r     layers.Range
}

type memberState struct {
	joining  bool
	joined   bool // a join request of this run was accepted
	loading  loadKey
	cancel   context.CancelFunc
	released loadKey
	restore  context.CancelFunc // the load of the committed range (see warmup)
	addrs    map[string][]string
	voters   map[peer.ID]bool // protected in the connection manager
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
			c.h.Peerstore().AddAddrs(p, parseAddrs(m.Addrs), peerstore.PermanentAddrTTL)
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
				c.h.ConnManager().Protect(s.ID, proto.TagVoter)
			}
		}
	}
	for id := range ms.voters {
		if !now[id] {
			c.h.ConnManager().Unprotect(id, proto.TagVoter)
		}
	}
	ms.voters = now
}

// warmup starts, cancels and reports this node's loads, and releases.
func (c *Consensus) warmup(s State, ms *memberState) {
	self := c.id.String()
	p, pending := s.Pending()
	want := loadKey{}
	if pending && p.Loads(self) && !p.Ready(self) {
		r, _ := p.Map.Range(self)
		want = loadKey{epoch: p.Map.Epoch, r: r}
	}
	if ms.loading != want && ms.cancel != nil {
		ms.cancel()
		ms.cancel = nil
		ms.loading = loadKey{}
	}
	if want != (loadKey{}) && ms.loading != want {
		ctx, cancel := context.WithCancel(c.ctx)
		ms.loading, ms.cancel = want, cancel
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.load(ctx, want, true)
		}()
	}
	committed := s.Committed()
	if pending || committed.Layers == 0 {
		return
	}
	keep, _ := committed.Range(self)
	rel := loadKey{epoch: committed.Epoch, r: keep}
	if rel == ms.released {
		return
	}
	ms.released = rel
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.rpcTimeout)
	defer cancel()
	if err := c.cfg.loader.Release(ctx, rel.epoch, keep); err != nil {
		c.log.Warnw("release", "epoch", rel.epoch, "keep", keep, "error", err)
	}
	// A node restarted from its data dir finds itself in the committed
	// map without its layers: it loads them again (a no-op for a node
	// that holds them). Nothing is reported, as the map counts them
	// already; the node announces it serves once they are in.
	if ms.restore != nil {
		ms.restore()
		ms.restore = nil
	}
	if !keep.Empty() {
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
func (c *Consensus) load(ctx context.Context, k loadKey, ready bool) {
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := c.cfg.loader.Load(ctx, k.epoch, k.r)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Warnw("load failed; retrying", "epoch", k.epoch, "range", k.r, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Duration(attempt)*c.cfg.tick, 10*time.Second)):
		}
	}
	c.log.Debugw("loaded", "epoch", k.epoch, "range", k.r, "took", time.Since(start))
	if !ready {
		return
	}
	err := c.request(ctx, StageReady{Node: c.id.String(), Epoch: k.epoch, Range: k.r})
	if err != nil && !errors.Is(err, ErrStale) && ctx.Err() == nil {
		c.log.Warnw("stage ready", "epoch", k.epoch, "error", err)
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
