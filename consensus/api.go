package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/layers"
	"go.uber.org/zap"
)

// Consensus is one member's replica of the swarm's state, and, while it
// leads, the leader loop. Reads are local and never block.
//
// It is the wiring and the public surface; each part owns one thing:
// raftNode (raftnode.go) Raft and its configuration, feed (feed.go) the
// subscriptions to the state, leader (leader.go) the leader loop that
// carries out Decide, member (warmup.go) this node's own part (joining,
// addresses, warmup, its founding stewards), and ctl (rpc.go) the
// requests members send the leader.
type Consensus struct {
	*base  // fields only: base has no methods to promote
	feed   *feed
	lead   *leader
	member *member
	ctl    *ctl

	closeOnce sync.Once
	// For tests: Close began as the leader, and handed leadership over.
	closedLeading, handedOver bool
	closeErr                  error
}

// base is what the parts of a member share: its identity and
// configuration, the replicated state, the Raft shell and the lifetime
// of its goroutines. It has no methods; each part embeds it for these
// fields and owns its own state.
type base struct {
	cfg  config
	h    Network
	id   peer.ID
	log  *zap.SugaredLogger
	fsm  *fsm
	rn   *raftNode
	live Liveness

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kickM  chan struct{} // wakes the member loop
	kickL  chan struct{} // wakes the leader loop

	leaving atomic.Bool
}

// Change is one step of the replicated state, as Watch delivers it.
type Change struct {
	Index  uint64 // the Raft log index (0 after a snapshot restore)
	Record Record // the event folded in; Event is nil after a restore
	State  State  // the state after it
}

// Server is a Raft server in the latest configuration.
type Server struct {
	ID    peer.ID
	Voter bool
}

// New starts a member on the host. With Raft state in the data dir it
// resumes from it; otherwise it founds a swarm (no bootstrap peers), or
// starts from the initial voter set, or waits to be added by the leader
// after its join request. New returns once Raft runs; ctx bounds the
// start only.
func New(ctx context.Context, opts ...Option) (*Consensus, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b := &base{
		cfg:   cfg,
		h:     cfg.host,
		id:    cfg.host.ID(),
		log:   cfg.log.Sugar().With("node", shortID(cfg.host.ID())),
		fsm:   newFSM(),
		kickM: make(chan struct{}, 1),
		kickL: make(chan struct{}, 1),
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.live = cfg.liveness
	if b.live == nil {
		b.live = newConnLiveness(cfg.host)
	}
	if b.cfg.loader == nil {
		b.cfg.loader = noLoad{}
	}
	c := &Consensus{base: b, feed: newFeed(b.log, b.kickM, b.kickL)}
	c.fsm.onApply = c.feed.applied
	c.fsm.onReset = c.feed.restored

	hlog := newHclog(cfg.log.Named("raft").With(zap.String("node", shortID(c.id))), cfg.raftLevel)
	st, err := openStores(cfg.dataDir, hlog)
	if err != nil {
		return nil, err
	}
	rn := &raftNode{st: st, self: c.id, fsm: c.fsm, log: c.log, timeout: cfg.rpcTimeout, ctx: c.ctx}
	c.rn = rn
	fail := func(err error) (*Consensus, error) {
		c.cancel()
		_ = st.close()
		return nil, err
	}
	// Addresses before elections: the bootstrap peers', then those the
	// data dir remembers.
	for _, b := range cfg.bootstrap {
		if b.ID != c.id {
			c.h.AddAddrs(b.ID, b.Addrs)
		}
	}
	book, err := st.loadAddrBook()
	if err != nil {
		c.log.Warnw("address book unreadable; starting without it", "error", err)
	}
	for id, addrs := range book {
		if p, err := peer.Decode(id); err == nil && p != c.id {
			c.h.AddAddrs(p, parseAddrs(addrs))
		}
	}
	c.ctl = &ctl{base: b}
	c.member = &member{base: b, ctl: c.ctl, book: book}
	c.lead = &leader{base: b, member: c.member}
	c.ctl.lead = c.lead

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.id.String())
	rc.HeartbeatTimeout = cfg.heartbeat
	rc.ElectionTimeout = cfg.election
	rc.LeaderLeaseTimeout = cfg.heartbeat / 2
	rc.CommitTimeout = min(50*time.Millisecond, cfg.heartbeat/4)
	rc.ShutdownOnRemove = false // a member evicted by mistake may join again
	rc.Logger = hlog
	rc.NoLegacyTelemetry = true
	if err := raft.ValidateConfig(rc); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrConfig, err))
	}
	rn.sl = newStreamLayer(c.h)
	rn.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  rn.sl,
		MaxPool: 3,
		Timeout: max(2*cfg.heartbeat, time.Second),
		Logger:  hlog.Named("transport"),
	})
	rn.prog = newProgressTransport(rn.trans, func() { kick(c.kickL) })
	rn.prog.fault = cfg.raftFault
	has, err := raft.HasExistingState(st.logs, st.stable, st.snaps)
	if err != nil {
		_ = rn.closeTransport()
		return fail(fmt.Errorf("consensus: raft state: %w", err))
	}
	if !has {
		var servers []raft.Server
		switch {
		case len(cfg.initial) > 0:
			for _, id := range cfg.initial {
				servers = append(servers, raft.Server{ID: raft.ServerID(id.String()), Address: raft.ServerAddress(id.String())})
			}
		case len(cfg.bootstrap) == 0:
			servers = []raft.Server{{ID: rc.LocalID, Address: raft.ServerAddress(rc.LocalID)}}
		}
		if len(servers) > 0 {
			if err := raft.BootstrapCluster(rc, st.logs, st.stable, st.snaps, rn.trans, raft.Configuration{Servers: servers}); err != nil {
				_ = rn.closeTransport()
				return fail(fmt.Errorf("consensus: bootstrap: %w", err))
			}
		}
	}
	r, err := raft.NewRaft(rc, c.fsm, st.logs, st.stable, st.snaps, rn.prog)
	if err != nil {
		_ = rn.closeTransport()
		return fail(fmt.Errorf("consensus: start raft: %w", err))
	}
	rn.raft = r
	if cfg.caller == nil {
		_ = c.h.Handle(proto.Ctl, c.ctl.serveControl) // a protocol of ours: never refused
	}
	c.wg.Add(2)
	go c.member.loop()
	go c.lead.loop()
	return c, nil
}

func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// ID is this member's peer ID.
func (c *Consensus) ID() peer.ID { return c.id }

// State returns the local replica of the state.
func (c *Consensus) State() State { return c.fsm.current() }

// Committed returns the committed map (Layers == 0 before the first).
func (c *Consensus) Committed() layers.LayerMap { return c.fsm.current().Committed() }

// Pending returns the map in warmup, if any.
func (c *Consensus) Pending() (Pending, bool) { return c.fsm.current().Pending() }

// Members returns the members, sorted by ID.
func (c *Consensus) Members() []Member { return c.fsm.current().Members() }

// Leader returns the leader this member knows of.
func (c *Consensus) Leader() (peer.ID, bool) { return c.rn.leader() }

// IsLeader reports whether this member leads.
func (c *Consensus) IsLeader() bool { return c.rn.isLeader() }

// Servers returns the latest Raft configuration: who votes, who follows.
func (c *Consensus) Servers() ([]Server, error) { return c.rn.servers() }

// Watch delivers every change of the local state, in log order, from now
// on. A subscriber that falls buf changes behind misses changes (each
// Change carries the whole state, so the latest one is enough). stop
// ends the subscription and closes the channel.
func (c *Consensus) Watch(buf int) (changes <-chan Change, stop func()) { return c.feed.watch(buf) }

// WaitFor blocks until cond holds on the local state, and returns that
// state.
func (c *Consensus) WaitFor(ctx context.Context, cond func(State) bool) (State, error) {
	ch, stop := c.Watch(16)
	defer stop()
	t := time.NewTicker(c.cfg.tick)
	defer t.Stop()
	for {
		if s := c.State(); cond(s) {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return c.State(), ctx.Err()
		case <-c.ctx.Done():
			return c.State(), ErrClosed
		case <-ch:
		case <-t.C:
		}
	}
}

// Leave leaves the swarm gracefully: the member announces that it
// drains, the leader moves its layers to others (make before break) and
// appends NodeLeft, and the member then closes. If ctx ends first, Leave
// closes anyway and the others remove it once it is dead past the grace
// period.
func (c *Consensus) Leave(ctx context.Context) error {
	c.leaving.Store(true)
	err := c.ctl.request(ctx, NodeDraining{Node: c.id.String()})
	if errors.Is(err, ErrStale) { // already draining
		err = nil
	}
	if errors.Is(err, ErrUnknownMember) { // not a member: nothing to leave
		return c.Close()
	}
	if err == nil {
		t := time.NewTicker(c.cfg.tick)
		defer t.Stop()
		asked := time.Now()
		for err == nil && !c.departed() {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-c.ctx.Done():
				err = ErrClosed
			case <-t.C:
			case <-c.kickM:
			}
			// The leader may remove this server before it hears that the
			// drain's map and its NodeLeft committed (hashicorp/raft stops
			// replicating to a removed server at once): then its own
			// state never says it left. So it asks again now and then;
			// once it has left, the leader answers that it is no member.
			if err == nil && time.Since(asked) >= 2*c.cfg.election {
				asked = time.Now()
				actx, cancel := context.WithTimeout(ctx, c.cfg.rpcTimeout)
				left := errors.Is(c.ctl.request(actx, NodeDraining{Node: c.id.String()}), ErrUnknownMember)
				cancel()
				if left {
					break
				}
			}
		}
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("consensus: leave: %w", err)
	}
	return nil
}

// departed reports whether a leaving member may close: it is no longer a
// member or a Raft server, or it is drained (the committed map has
// nothing on it) and no longer votes, so that closing takes nothing from
// the map or from the quorum. The last case matters because the member
// may never hear of its NodeLeft and removal: hashicorp/raft stops
// replicating to a removed server at once, and its last round to it can
// be lost when it races the removal.
func (c *Consensus) departed() bool {
	s, self := c.State(), c.id.String()
	m, member := s.Member(self)
	server, voter := c.rn.suffrage(c.id)
	if !member || !server {
		return true
	}
	_, placed := s.Committed().Range(self)
	return m.Draining && !placed && !c.IsLeader() && !voter
}

// Close stops the member: a voter first makes sure another member leads
// (closeAsVoter, at most the RPC timeout): a leader hands leadership
// over once every live voter holds the latest configuration; then Raft
// shuts down and the stores close.
// The member stays in the swarm's state until it is removed as dead (or
// left with Leave).
func (c *Consensus) Close() error {
	c.closeOnce.Do(func() {
		c.lead.stop() // the leader loop acts no more
		c.closedLeading = c.IsLeader()
		if _, voter := c.rn.suffrage(c.id); voter {
			// A follower waits no longer than an election or two takes,
			// so that a swarm shutting down whole does not wait long.
			wait := c.cfg.rpcTimeout
			if !c.closedLeading {
				wait = min(wait, 4*c.cfg.election)
			}
			c.handedOver = c.lead.closeAsVoter(wait)
		}
		c.cancel()
		if c.cfg.caller == nil {
			_ = c.h.Handle(proto.Ctl, nil)
		}
		var errs []error
		if err := c.rn.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
		c.wg.Wait()
		if err := c.rn.closeTransport(); err != nil {
			errs = append(errs, err)
		}
		if err := c.rn.st.close(); err != nil {
			errs = append(errs, err)
		}
		c.feed.closeAll()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// noLoad is the loader of a node with nothing to load.
type noLoad struct{}

func (noLoad) Load(context.Context, uint64, layers.Range) error    { return nil }
func (noLoad) Release(context.Context, uint64, layers.Range) error { return nil }
