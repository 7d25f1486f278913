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
type Consensus struct {
	cfg   config
	h     Network
	id    peer.ID
	log   *zap.SugaredLogger
	raft  *raft.Raft
	trans *raft.NetworkTransport
	prog  *progressTransport // trans, recording what followers acknowledged
	// cfScan finds the latest configuration's index in the log (the
	// leader loop's, and Close's once the loop stopped).
	cfScan configScan
	sl     *streamLayer
	fsm    *fsm
	st     *stores
	live   Liveness

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kickM  chan struct{} // wakes the member loop
	kickL  chan struct{} // wakes the leader loop

	mu       sync.Mutex
	watchers map[int]chan Change
	nextW    int
	book     addrBook

	leaving   atomic.Bool
	joinErr   atomic.Pointer[error] // a join refused for good
	closeOnce sync.Once
	// For tests: Close began as the leader, and handed leadership over.
	closedLeading, handedOver bool
	closeErr                  error

	// stepMu is held by the leader loop while it decides and acts, and
	// by Close when it stops the loop (closing), so that no
	// configuration change is in flight while Close hands over.
	stepMu  sync.Mutex
	closing bool

	lead      LeaderState // owned by the leader loop (under stepMu)
	published time.Time   // the leader loop's last map notice
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
	c := &Consensus{
		cfg:      cfg,
		h:        cfg.host,
		id:       cfg.host.ID(),
		log:      cfg.log.Sugar().With("node", shortID(cfg.host.ID())),
		fsm:      newFSM(),
		kickM:    make(chan struct{}, 1),
		kickL:    make(chan struct{}, 1),
		watchers: map[int]chan Change{},
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.live = cfg.liveness
	if c.live == nil {
		c.live = newConnLiveness(cfg.host)
	}
	if c.cfg.loader == nil {
		c.cfg.loader = noLoad{}
	}
	c.fsm.onApply = c.applied
	c.fsm.onReset = c.restored

	hlog := newHclog(cfg.log.Named("raft").With(zap.String("node", shortID(c.id))), cfg.raftLevel)
	st, err := openStores(cfg.dataDir, hlog)
	if err != nil {
		return nil, err
	}
	c.st = st
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
	c.book = book

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
	sl := newStreamLayer(c.h)
	c.sl = sl
	c.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  sl,
		MaxPool: 3,
		Timeout: max(2*cfg.heartbeat, time.Second),
		Logger:  hlog.Named("transport"),
	})
	c.prog = newProgressTransport(c.trans, func() { kick(c.kickL) })
	c.prog.fault = cfg.raftFault
	has, err := raft.HasExistingState(st.logs, st.stable, st.snaps)
	if err != nil {
		_ = c.closeTransport()
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
			if err := raft.BootstrapCluster(rc, st.logs, st.stable, st.snaps, c.trans, raft.Configuration{Servers: servers}); err != nil {
				_ = c.closeTransport()
				return fail(fmt.Errorf("consensus: bootstrap: %w", err))
			}
		}
	}
	r, err := raft.NewRaft(rc, c.fsm, st.logs, st.stable, st.snaps, c.prog)
	if err != nil {
		_ = c.closeTransport()
		return fail(fmt.Errorf("consensus: start raft: %w", err))
	}
	c.raft = r
	if cfg.caller == nil {
		_ = c.h.Handle(proto.Ctl, c.serveControl) // a protocol of ours: never refused
	}
	c.wg.Add(2)
	go c.memberLoop()
	go c.leaderLoop()
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
func (c *Consensus) Leader() (peer.ID, bool) {
	_, id := c.raft.LeaderWithID()
	if id == "" {
		return "", false
	}
	p, err := peer.Decode(string(id))
	return p, err == nil
}

// IsLeader reports whether this member leads.
func (c *Consensus) IsLeader() bool { return c.raft.State() == raft.Leader }

// Servers returns the latest Raft configuration: who votes, who follows.
func (c *Consensus) Servers() ([]Server, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("consensus: configuration: %w", err)
	}
	var out []Server
	for _, s := range f.Configuration().Servers {
		if p, err := peer.Decode(string(s.ID)); err == nil {
			out = append(out, Server{ID: p, Voter: s.Suffrage == raft.Voter})
		}
	}
	return out, nil
}

// Watch delivers every change of the local state, in log order, from now
// on. A subscriber that falls buf changes behind misses changes (each
// Change carries the whole state, so the latest one is enough). stop
// ends the subscription and closes the channel.
func (c *Consensus) Watch(buf int) (changes <-chan Change, stop func()) {
	ch := make(chan Change, max(buf, 1))
	c.mu.Lock()
	id := c.nextW
	c.nextW++
	c.watchers[id] = ch
	c.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			c.mu.Lock()
			if _, ok := c.watchers[id]; ok {
				delete(c.watchers, id)
				close(ch)
			}
			c.mu.Unlock()
		})
	}
}

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
	err := c.request(ctx, NodeDraining{Node: c.id.String()})
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
				left := errors.Is(c.request(actx, NodeDraining{Node: c.id.String()}), ErrUnknownMember)
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
	server, voter := c.suffrage(c.id)
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
		c.stepMu.Lock()
		c.closing = true // the leader loop acts no more
		c.stepMu.Unlock()
		c.closedLeading = c.IsLeader()
		if c.isVoter(c.id) {
			// A follower waits no longer than an election or two takes,
			// so that a swarm shutting down whole does not wait long.
			wait := c.cfg.rpcTimeout
			if !c.closedLeading {
				wait = min(wait, 4*c.cfg.election)
			}
			c.handedOver = c.closeAsVoter(wait)
		}
		c.cancel()
		if c.cfg.caller == nil {
			_ = c.h.Handle(proto.Ctl, nil)
		}
		var errs []error
		if err := c.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
		c.wg.Wait()
		if err := c.closeTransport(); err != nil {
			errs = append(errs, err)
		}
		if err := c.st.close(); err != nil {
			errs = append(errs, err)
		}
		c.mu.Lock()
		for id, ch := range c.watchers {
			delete(c.watchers, id)
			close(ch)
		}
		c.mu.Unlock()
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// handOver gives leadership up as the others can take it: by a transfer
// to another voter or, where the others alone would be no majority (two
// voters, as between two promotions), by demoting itself first, so that
// the other voter's own election wins. A transfer alone would leave that
// voter leading a configuration whose majority needs the closed member.
func (c *Consensus) handOver() bool {
	voters := 0
	for _, s := range c.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters == 2 && c.isVoter(c.id) {
		if err := c.raft.DemoteVoter(raft.ServerID(c.id.String()), 0, c.cfg.rpcTimeout).Error(); err != nil {
			c.log.Infow("demoting itself failed", "error", err)
			return false
		}
		return true
	}
	err := c.raft.LeadershipTransfer().Error()
	if err != nil && !errors.Is(err, raft.ErrNotLeader) {
		c.log.Infow("leadership transfer failed", "error", err)
	}
	return err == nil
}

// closeTransport closes raft's transport, then waits (at most 5 s) for
// its handlers of inbound streams, which its Close leaves running.
func (c *Consensus) closeTransport() error {
	err := c.trans.Close()
	c.sl.drain(5 * time.Second)
	return err
}

// applied runs on raft's FSM goroutine after each admitted record.
func (c *Consensus) applied(idx uint64, r Record, s State) {
	if _, ok := r.Event.(MapCommitted); ok {
		c.logMapApplied(idx, s.Committed())
	}
	c.notify(Change{Index: idx, Record: r, State: s})
}

func (c *Consensus) restored(s State) {
	c.logMapRestored(s)
	c.notify(Change{State: s})
}

func (c *Consensus) notify(ch Change) {
	c.mu.Lock()
	for _, w := range c.watchers {
		select {
		case w <- ch:
		default:
		}
	}
	c.mu.Unlock()
	kick(c.kickM)
	kick(c.kickL)
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// apply appends one event as the leader and returns once it is
// committed and folded in here, or the reason it was refused.
func (c *Consensus) apply(ev Event) error {
	r := Record{At: time.Now(), Event: ev}
	if _, err := c.fsm.current().Apply(r); err != nil {
		return err
	}
	b, err := MarshalRecord(r)
	if err != nil {
		return err
	}
	f := c.raft.Apply(b, c.cfg.rpcTimeout)
	if err := c.wait(f); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		if errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return fmt.Errorf("consensus: append %s: %w", ev.Kind(), err)
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	c.log.Debugw("appended", "event", ev.Kind(), "index", f.Index())
	return nil
}

// wait returns f's error, or ErrClosed once the member is closing.
// hashicorp/raft does not answer every future when it shuts down: an
// entry that committed but was not yet applied is dropped with its
// future (the FSM goroutine returns without draining its queue;
// hashicorp/raft#498). A leader loop that waited on such a future alone
// would never end, and a crash (halt: cancel, then Raft's shutdown)
// that waits for the loops would hang with it. Should f never be
// answered, the goroutine that waits on it stays blocked: one per
// future lost at shutdown.
func (c *Consensus) wait(f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// noLoad is the loader of a node with nothing to load.
type noLoad struct{}

func (noLoad) Load(context.Context, uint64, layers.Range) error    { return nil }
func (noLoad) Release(context.Context, uint64, layers.Range) error { return nil }
