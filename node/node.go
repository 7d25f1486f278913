package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/pbnjay/memory"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// Node is one running Strata node: a swarm host, its consensus replica
// (unless it runs on a static map), the layers it serves with their
// scheduler, and the entry role that drives generations.
type Node struct {
	cfg    config
	log    *zap.Logger
	host   *swarm.Host
	cons   atomic.Pointer[consensus.Consensus] // nil on a static map and while starting
	model  *model
	hw     layers.Hardware
	svc    *stageService
	warm   *warmer
	router *routing.Router
	self   peer.ID

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	entry    registry
	suspects sync.Map // peer.ID → time.Time of the last failure seen
	loading  atomic.Int32
	draining atomic.Bool
	notice   atomic.Pointer[layers.LayerMap]
	counters counters

	genMu     sync.RWMutex // Generate's wg.Add against Close's wg.Wait
	closeOnce sync.Once
	closeErr  error
}

// New starts a node: it opens the model, starts the swarm host, the
// scheduler and (without WithStaticMap) the consensus member, which
// joins the swarm and, as the leader plans, has the node load its
// layers. New returns once the node runs; ctx bounds the start.
func New(ctx context.Context, opts ...Option) (*Node, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.log
	var simHW layers.Hardware
	if cfg.simModel != "" {
		simHW = *cfg.hw
	}
	m, err := openModel(cfg.modelPath, cfg.simModel, simHW, cfg.threads)
	if err != nil {
		return nil, err
	}
	if cfg.static != nil && cfg.static.Layers != m.info.Layers {
		return nil, fmt.Errorf("%w: static map of %d layers for a %d-layer model", ErrConfig, cfg.static.Layers, m.info.Layers)
	}
	hw, err := nodeHardware(ctx, &cfg, m, log)
	if err != nil {
		return nil, err
	}
	budget := int64(hw.MemoryBytes * (1 - DefaultMemoryReserve))
	router, err := routing.New(append([]routing.Option{routing.WithModel(m.spec)}, cfg.routerOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: router: %w", ErrConfig, err)
	}

	sopts := []swarm.Option{swarm.WithLogger(log.Named("swarm")), swarm.WithModel(modelScope(m.info))}
	if cfg.dataDir != "" {
		sopts = append(sopts, swarm.WithDataDir(cfg.dataDir))
	}
	if len(cfg.bootstrap) > 0 {
		sopts = append(sopts, swarm.WithBootstrapPeers(cfg.bootstrap...))
	}
	h, err := swarm.New(ctx, append(sopts, cfg.swarmOpts...)...)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: log.With(zap.String("node", shortID(h.ID()))), host: h, model: m, hw: hw, router: router, self: h.ID()}
	n.entry.gens = map[SessionID]*attemptReg{}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.svc = &stageService{ctx: n.ctx, self: n.self, info: m.info, wireF16: cfg.wireF16, acts: h, entry: &n.entry,
		counters: &n.counters, log: n.log}
	n.svc.out = newOutbox(n.ctx, n.svc.send, n.log.Named("outbox"))
	n.svc.sched = newScheduler(schedConfig{self: h.ID(), model: m.info, hash: m.hash, memBudget: budget,
		maxBatch: cfg.maxBatch, maxQueue: cfg.maxQueue, idleTimeout: cfg.idleTimeout, queueTimeout: cfg.queueTimeout,
		log: n.log.Named("sched")}, n.svc.out)
	n.warm = &warmer{model: m, sched: n.svc.sched, maxLayers: cfg.maxLayers, loadDelay: cfg.loadDelay, loading: &n.loading,
		publish: n.publishStatus, log: n.log}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.svc.sched.run(n.ctx) }()

	h.HandleControl(func(ctx context.Context, from peer.ID, req []byte) ([]byte, error) {
		if consensus.IsControlRequest(req) {
			if c := n.cons.Load(); c != nil {
				return c.HandleControl(ctx, from, req)
			}
			return nil, fmt.Errorf("%w: no consensus here", ErrNotServing)
		}
		return nil, fmt.Errorf("%w: unknown control request", ErrBadFrame)
	})
	h.HandleActivations(n.svc.onFrame)
	h.OnMapNotice(n.onMapNotice)
	n.publishStatus()

	if cfg.static != nil {
		if r, ok := cfg.static.Range(n.self.String()); ok {
			if err := n.warm.Load(ctx, cfg.static.Epoch, r); err != nil {
				n.Close()
				return nil, err
			}
		}
	} else {
		copts := []consensus.Option{
			consensus.WithHost(h.Libp2p()),
			consensus.WithLogger(log.Named("consensus"), hclog.Warn),
			consensus.WithModel(m.spec, m.info.Fingerprint),
			consensus.WithCapabilities(consensus.Capabilities{Hardware: hw, Region: cfg.region, MaxLayers: cfg.maxLayers}),
			consensus.WithStageLoader(n.warm),
			consensus.WithPublisher(h, consensus.DefaultRepublish),
			consensus.WithControl(h),
			consensus.WithLiveness(consensus.LivenessFunc(n.deadSince), consensus.DefaultDeadGrace),
		}
		if cfg.dataDir != "" {
			copts = append(copts, consensus.WithDataDir(cfg.dataDir))
		}
		if len(cfg.bootstrap) > 0 {
			copts = append(copts, consensus.WithBootstrap(cfg.bootstrap...))
		}
		c, err := consensus.New(ctx, append(copts, cfg.consOpts...)...)
		if err != nil {
			n.Close()
			return nil, err
		}
		n.cons.Store(c)
	}
	n.wg.Add(2)
	go n.statusLoop()
	go n.watchPeers()
	n.log.Info("node started", zap.String("model", m.info.Name), zap.Bool("simulated", m.info.Simulated),
		zap.Int("layers", m.info.Layers), zap.String("hardware", hw.Name), zap.Int("max_layers", cfg.maxLayers),
		zap.Int64("memory", int64(hw.MemoryBytes)), zap.Bool("static_map", cfg.static != nil))
	return n, nil
}

// nodeHardware is what the node declares: the simulated device, a
// declared one, or one measured on the model (cached in the data dir).
// A memory cap replaces the device's memory.
func nodeHardware(ctx context.Context, cfg *config, m *model, log *zap.Logger) (layers.Hardware, error) {
	var hw layers.Hardware
	if cfg.hw != nil {
		hw = *cfg.hw
	} else {
		mem := int64(memory.TotalMemory() / 2)
		if cfg.memory > 0 {
			mem = cfg.memory
		}
		var err error
		if hw, err = measureHardware(ctx, m, mem, cfg.dataDir, log); err != nil {
			return hw, err
		}
	}
	if cfg.memory > 0 {
		hw.MemoryBytes = float64(cfg.memory)
	}
	if hw.MemoryBytes <= 0 {
		hw.MemoryBytes = float64(memory.TotalMemory() / 2)
	}
	if err := hw.Validate(); err != nil {
		return hw, fmt.Errorf("%w: hardware: %w", ErrConfig, err)
	}
	return hw, nil
}

// modelScope names the model in the rendezvous key.
func modelScope(in ModelInfo) string {
	fp := in.Fingerprint
	if len(fp) > 24 {
		fp = fp[len(fp)-24:]
	}
	return fp
}

func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// maxFrame is the largest activation frame peers accept.
func (n *Node) maxFrame() int { return swarm.DefaultMaxActFrame }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.self }

// Host is the node's swarm host.
func (n *Node) Host() *swarm.Host { return n.host }

// Consensus is the node's consensus member (nil on a static map).
func (n *Node) Consensus() *consensus.Consensus { return n.cons.Load() }

// Model describes the model the node serves.
func (n *Node) Model() ModelInfo { return n.model.info }

// Hardware is what the node declared or measured.
func (n *Node) Hardware() layers.Hardware { return n.hw }

// Committed is the map the entry routes on: the static map, or the
// latest committed one this node knows of (its replica, or a newer map
// notice from the leader).
func (n *Node) Committed() layers.LayerMap {
	if n.cfg.static != nil {
		return *n.cfg.static
	}
	var m layers.LayerMap
	if c := n.cons.Load(); c != nil {
		m = c.Committed()
	}
	if nm := n.notice.Load(); nm != nil && nm.Epoch > m.Epoch {
		return *nm
	}
	return m
}

// holds reports whether every layer of r is loaded.
func (n *Node) holds(r layers.Range) bool {
	held := n.svc.sched.status.Load().Held
	for l := r.Start; l < r.End; l++ {
		if l >= len(held) || !held[l] {
			return false
		}
	}
	return true
}

// Held returns the layers this node has loaded and serves, as a range
// (empty when none; the loaded layers are contiguous in practice, and the
// range spans them).
func (n *Node) Held() layers.Range {
	st := n.svc.sched.status.Load()
	r := layers.Range{}
	for l, h := range st.Held {
		if h {
			if r.Empty() {
				r.Start = l
			}
			r.End = l + 1
		}
	}
	return r
}

// Ready reports whether this node can route a full path now: nil, or an
// error wrapping ErrNoCapacity (for a health check).
func (n *Node) Ready() error {
	if n.ctx.Err() != nil {
		return ErrClosed
	}
	if _, err := n.route(routeReq{prompt: 1, max: 1}); err != nil {
		return fmt.Errorf("%w: %w", ErrNoCapacity, err)
	}
	return nil
}

// WaitReady blocks until this node can route a full path.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := n.route(routeReq{prompt: 1, max: 1}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.ctx.Done():
			return ErrClosed
		case <-t.C:
		}
	}
}

// Close stops the node: consensus (a leader hands over first), the host,
// the scheduler and every loaded layer. It does not drain.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		var errs []error
		if c := n.cons.Load(); c != nil {
			errs = append(errs, c.Close())
		}
		n.host.HandleActivations(nil)
		n.genMu.Lock()
		n.cancel()
		n.genMu.Unlock()
		errs = append(errs, n.host.Close())
		n.wg.Wait()
		n.svc.out.close()
		n.closeErr = errors.Join(errs...)
		n.log.Info("node stopped")
	})
	return n.closeErr
}

// Kill stops the node abruptly, as a crash would: the host goes first,
// with no goodbye to anyone, then everything else. For tests.
func (n *Node) Kill() {
	n.closeOnce.Do(func() {
		n.host.Close()
		n.genMu.Lock()
		n.cancel()
		n.genMu.Unlock()
		if c := n.cons.Load(); c != nil {
			c.Close()
		}
		n.wg.Wait()
		n.svc.out.close()
		n.log.Info("node killed")
	})
}

// deadSince adapts the peer table to consensus: a peer is dead when the
// table says so, unless it has opened a connection since. A node that
// restarts asks to rejoin before its first heartbeat arrives; without
// this the leader would take it for dead and remove it again. (A
// connection older than the verdict proves nothing: a hung process
// keeps its sockets open.)
func (n *Node) deadSince(id peer.ID) (time.Time, bool) {
	p, ok := n.host.Peers().Get(id)
	if !ok || p.Liveness != swarm.Dead {
		return time.Time{}, false
	}
	for _, c := range n.host.Libp2p().Network().ConnsToPeer(id) {
		if c.Stat().Opened.After(p.Since) {
			return time.Time{}, false
		}
	}
	return p.Since, true
}

// onMapNotice keeps the leader's latest commit, in case our replica lags.
func (n *Node) onMapNotice(from peer.ID, data []byte) {
	c := n.cons.Load()
	if c == nil {
		return
	}
	if leader, ok := c.Leader(); !ok || leader != from {
		return
	}
	var m layers.LayerMap
	if err := m.UnmarshalBinary(data); err != nil || m.Layers != n.model.info.Layers {
		return
	}
	if old := n.notice.Load(); old == nil || m.Epoch > old.Epoch {
		n.notice.Store(&m)
	}
}

// phase is what this node announces.
func (n *Node) phase() swarm.State {
	switch {
	case n.draining.Load():
		return swarm.StateDraining
	case n.cfg.static != nil:
		return swarm.StateServing
	}
	if r, ok := n.Committed().Range(n.self.String()); ok {
		// A node restarted from its data dir is in the committed map
		// before it has loaded its layers again: until it has, it must
		// not be routed to.
		if !n.holds(r) {
			return swarm.StateJoining
		}
		if n.loading.Load() > 0 {
			return swarm.StateWarming
		}
		return swarm.StateServing
	}
	if n.loading.Load() > 0 {
		return swarm.StateWarming
	}
	if c := n.cons.Load(); c != nil && c.State().IsMember(n.self.String()) && !n.Held().Empty() {
		return swarm.StateServing
	}
	return swarm.StateJoining
}

func (n *Node) publishStatus() {
	st := n.svc.sched.status.Load()
	m := n.Committed()
	r, _ := m.Range(n.self.String())
	s := swarm.Status{RangeStart: r.Start, RangeEnd: r.End, Epoch: m.Epoch, State: n.phase(),
		QueueDepth: st.Queue, ActiveSessions: st.Sessions, FreeKV: st.FreeKV, LayerLatency: st.LayerLatency, Region: n.cfg.region}
	if err := n.host.SetStatus(s); err != nil {
		n.log.Warn("status", zap.Error(err))
	}
}

func (n *Node) statusLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.statusEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			n.publishStatus()
		}
	}
}

// watchPeers turns the peer table's verdicts into failures of the
// generations that use the peer: a peer whose last connection closed, or
// that is dead, fails their current step at once.
func (n *Node) watchPeers() {
	defer n.wg.Done()
	events, stop := n.host.Peers().Watch(1024)
	defer stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Forgotten || (ev.To != swarm.Dead && ev.To != swarm.Suspect) {
				continue
			}
			if ev.To == swarm.Suspect {
				if p, ok := n.host.Peers().Get(ev.Peer); !ok || p.Connected {
					continue // only late: a slow peer is not a dead one
				}
			}
			n.peerDown(ev.Peer, ev.To.String())
		}
	}
}
