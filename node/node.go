package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/pbnjay/memory"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/trust"
	"github.com/stratanet/strata/node/weights"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// Node is one running Strata node: a swarm host, its consensus replica
// (unless it runs on a static map), the layers it serves with their
// scheduler, and the entry role that drives generations.
//
// Node itself is wiring: it builds the parts below, connects their seams
// and joins their goroutines on Close. Each role is a type of its own:
// the stage service with its scheduler and outbox (service.go,
// scheduler.go, outbox.go), the entry (entry.go), the path finder
// (view.go), the announcer of the node's own status (status.go), warmup
// (warmup.go, consensus's StageLoader), the liveness adapter, the
// spot checks' view of the swarm (trust.Swarm) and the serving of
// weights to peers (node/weights, wired in weights.go).
type Node struct {
	cfg   config
	log   *zap.Logger
	host  *swarm.Host
	cons  atomic.Pointer[consensus.Consensus] // nil on a static map and while starting
	model *model
	hw    layers.Hardware
	self  peer.ID

	weights *weights.Server   // chunks served to peers, info and manifest answers, fetch rates
	upload  *weights.Governor // the adaptive upload limit; nil: off, or nothing to serve

	svc   *stageService
	trust *trust.Swarm // what the entry's spot checks learn from the swarm
	warm  *warmer
	ann   *announcer
	paths *pathFinder
	entry *entry

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	counters  counters
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
	var m *model
	scope := ModelInfo{Fingerprint: cfg.modelID}
	if cfg.modelID == "" {
		var err error
		if m, err = openModel(cfg.modelPath, cfg.simModel, simHW, cfg.threads); err != nil {
			return nil, err
		}
		if cfg.static != nil && cfg.static.Layers != m.info.Layers {
			return nil, fmt.Errorf("%w: static map of %d layers for a %d-layer model", ErrConfig, cfg.static.Layers, m.info.Layers)
		}
		scope = m.info
	}

	sopts := []swarm.Option{swarm.WithLogger(log.Named("swarm")), swarm.WithModel(modelScope(scope)), swarm.WithModelFingerprint(scope.Fingerprint)}
	if cfg.dataDir != "" {
		sopts = append(sopts, swarm.WithDataDir(cfg.dataDir))
	}
	if len(cfg.bootstrap) > 0 {
		sopts = append(sopts, swarm.WithBootstrapPeers(cfg.bootstrap...))
	}
	if cfg.founding {
		// Signs the public swarm's charter: joiners by name tell it from
		// a rival founded under the same name by this key.
		sopts = append(sopts, swarm.WithFounder())
	}
	h, err := swarm.New(ctx, append(sopts, cfg.swarmOpts...)...)
	if err != nil {
		return nil, err
	}
	// With the peers of any bootstrap list the host resolved.
	cfg.bootstrap = h.Discovery().Bootstrap()
	if h.Discovery().PublicDiscovery() && len(cfg.bootstrap) == 0 && !cfg.founding {
		// Joining by name: the members the public DHT leads to are this
		// node's bootstrap peers, for consensus and for fetching.
		began := time.Now()
		log.Info("looking for the swarm by name on the public DHT", zap.Stringer("key", h.Discovery().PublicRendezvousKey()))
		found, err := h.Discovery().FindSwarm(ctx)
		if err != nil {
			h.Close()
			if errors.Is(err, swarm.ErrRivalFounders) || errors.Is(err, swarm.ErrFounderMismatch) {
				return nil, fmt.Errorf("%w: %w", ErrConfig, err)
			}
			return nil, fmt.Errorf("%w: %w (to found the swarm instead, start with --found)", ErrConfig, err)
		}
		ids := make([]string, len(found))
		for i, ai := range found {
			ids[i] = shortID(ai.ID)
		}
		var founder string
		if ch := h.Charter(); ch != nil {
			founder = ch.Founder.String()
		}
		log.Info("found the swarm by name", zap.Strings("members", ids), zap.String("founder", founder), zap.Duration("took", time.Since(began)))
		cfg.bootstrap = found
	}
	n, err := start(ctx, cfg, h, m)
	if err != nil {
		if n == nil { // else n.Close closed the host
			h.Close()
		}
		return nil, err
	}
	return n, nil
}

// start builds the node on its host: the model (fetched from peers for a
// node with a model ID only), the roles, and consensus.
func start(ctx context.Context, cfg config, h *swarm.Host, m *model) (*Node, error) {
	log := cfg.log
	if m == nil {
		var err error
		m, err = openRemote(ctx, h, cfg.modelID, filepath.Join(cfg.dataDir, "models"), cfg.bootstrap, cfg.threads, cfg.uploadRate,
			log.With(zap.String("node", shortID(h.ID()))))
		if err != nil {
			return nil, err
		}
	}
	m.eng = cfg.engine
	var man *chunks.Manifest
	if m.path != "" && !cfg.noChunks && cfg.static == nil {
		size := cfg.chunkSize
		if size == 0 {
			size = chunks.DefaultChunkSize
		}
		var err error
		if man, m.manifest, err = weights.FileManifest(m.path, m.info.Fingerprint, cfg.dataDir, size, log); err != nil {
			// Serving still works; only peers cannot fetch from here (a
			// split model's parts, say: a manifest describes one file).
			log.Warn("the model's chunks are not served to peers", zap.String("model", m.path), zap.Error(err))
			man, m.manifest = nil, nil
		}
	}
	hw, err := nodeHardware(ctx, &cfg, m, log)
	if err != nil {
		return nil, err
	}
	budget := int64(hw.MemoryBytes * (1 - DefaultMemoryReserve))
	timer := newPluginTimer(cfg.clock)
	profiles, err := routing.NewProfiles(cfg.sched, append([]routing.Option{routing.WithModel(m.spec), routing.WithObserver(timer)}, cfg.routerOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: scheduler: %w", ErrConfig, err)
	}

	n := &Node{cfg: cfg, log: log.With(zap.String("node", shortID(h.ID()))), host: h, model: m, hw: hw, self: h.ID()}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.weights = weights.NewServer(weights.ServerConfig{Net: h.Streams(), Swarm: consSwarm{&n.cons}, Fingerprint: m.info.Fingerprint,
		Path: m.path, Manifest: m.manifest, Remote: m.fetch, UploadRate: cfg.uploadRate, RequestRate: DefaultChunkRequestRate,
		RequestBurst: DefaultChunkRequestBurst, ChunkReader: cfg.chunkReader})
	n.svc = &stageService{ctx: n.ctx, self: n.self, info: m.info, acts: h.Streams(),
		wire: &wirePicker{mode: cfg.wire, bandwidth: func(p peer.ID) float64 {
			if row, ok := h.Peers().Get(p); ok {
				return row.Bandwidth
			}
			return 0
		}, log: n.log},
		counters: &n.counters, clock: cfg.clock, log: n.log}
	n.svc.out = newOutbox(n.ctx, n.svc.send, n.log.Named("outbox"))
	var batchDone func(time.Duration, int, int)
	if cfg.uploadAdaptive && (man != nil || m.fetch != nil) {
		n.upload = weights.NewGovernor(cfg.clock, cfg.uploadRate, n.weights.Servers, func() int {
			if st := n.svc.sched.status.Load(); st != nil {
				return st.Sessions
			}
			return 0
		}, n.log.Named("upload"))
		batchDone = n.upload.Batch
	}
	n.svc.sched = newScheduler(schedConfig{self: h.ID(), model: m.info, hash: m.hash, memBudget: budget, tok: m.tok,
		maxBatch: cfg.maxBatch, maxQueue: cfg.maxQueue, idleTimeout: cfg.idleTimeout, queueTimeout: cfg.queueTimeout,
		clock: cfg.clock, prefixCache: !cfg.noPrefixCache, log: n.log.Named("sched"), sign: trust.Signer(h.Key()),
		fault: cfg.fault, batchDone: batchDone, signFrames: !cfg.unsignedFrames, wireLossy: cfg.wire == WireF16 || cfg.wire == WireQ8,
		badFrame: func(p peer.ID) { n.counters.badFrame(p) }, tolerant: m.engineName() != engine.EngineGo && m.engineName() != engine.EngineSim,
		engine: m.engineName()}, n.svc.out)
	n.ann = &announcer{self: n.self, layers: m.info.Layers, hw: hw, region: cfg.region, static: cfg.static, cons: &n.cons,
		sched: n.svc.sched, host: h, clock: cfg.clock, every: cfg.statusEvery, log: n.log}
	if e := m.engineName(); e != engine.EngineGo && e != engine.EngineSim {
		n.ann.engine = e
	}
	n.paths = &pathFinder{self: n.self, profiles: profiles, timer: timer, host: h, committed: n.ann.committed, selfState: n.ann.selfState,
		suspectFor: cfg.suspectFor, members: func() []consensus.Member {
			if c := n.cons.Load(); c != nil {
				return c.Members()
			}
			return nil
		},
		// Long enough for the hops' heartbeats to carry what this entry
		// routed through them; past it a record lasts while they do.
		routed: newRoutedPrefixes(routedHeartbeats * h.Beats().HeartbeatInterval())}
	n.trust = &trust.Swarm{Self: n.self, Engine: n.ann.engine, Peers: h.Peers(), Committed: n.ann.committed,
		Replica: func() trust.Replica {
			if c := n.cons.Load(); c != nil {
				return c
			}
			return nil
		}}
	n.entry = newEntry(entryConfig{self: n.self, model: m, stepTimeout: cfg.stepTimeout, repairWait: cfg.repairWait,
		maxReplays: cfg.maxReplays, defaultMaxTokens: cfg.defaultMaxTokens, wire: cfg.wire,
		signedFrames: !cfg.unsignedFrames && !cfg.wire.lossy(),
		maxFrame:     swarm.DefaultMaxActFrame, queueMax: cfg.entryQueueMax, queueTimeout: cfg.entryQueueTimeout,
		verifyRate: cfg.verifyRate, fair: newFairConfig(!cfg.noFair, h.Beats().HeartbeatInterval(), cfg.fairStall),
		clock: cfg.clock, log: n.log},
		entryDeps{route: n.paths.route, routed: n.paths.noteRouted, send: n.svc.send, draining: n.ann.drainingHops, suspect: n.paths.suspect,
			post: func(to peer.ID, m Message) { n.svc.out.post(to, m, nil) }, kv: n.paths.kv, changed: h.Peers().Changed,
			holders: n.trust.Holders, isReproducible: n.trust.Reproducible, report: n.trust.ReportFault, swarmRate: n.trust.VerifyRate,
			heads: func() []peerHead { return peerHeads(h.Peers(), h.ID(), h.Beats().HeartbeatInterval()) },
			profileName: func(p string) string {
				if pr, err := profiles.Profile(p); err == nil {
					return pr.Name()
				}
				return p
			}},
		&n.counters)
	n.svc.entry = n.entry
	n.ann.changed = n.entry.capacityChanged
	n.ann.queue = func() (int, time.Duration) { return n.entry.adm.queued(cfg.clock.Now()) }
	n.ann.tokens = n.counters.tokens.Load
	h.Beats().SetSnapshotSource(func() swarm.SnapshotInfo {
		info := swarm.SnapshotInfo{ModelName: m.info.Name, Fingerprint: m.info.Fingerprint, Layers: m.info.Layers}
		if cm := n.ann.committed(); cm.Layers > 0 {
			info.Map, _ = cm.MarshalBinary() // nil on error: the observer falls back on heartbeats
		}
		return info
	})
	n.ann.vouches = n.entry.work.Vouches
	cover := &coverage{self: n.self, cons: &n.cons, ready: func() error { return n.paths.ready(n.ctx) }, clock: cfg.clock, log: n.log}
	n.paths.noMap, n.paths.uncovered = cover.noMap, cover.uncoveredMap
	n.paths.selfKV = func() kvReport {
		st := n.svc.sched.status.Load()
		if st == nil {
			return kvReport{free: -1}
		}
		return kvReport{free: int(st.FreeKV), sessions: st.Sessions + st.Queue, mark: st}
	}
	n.warm = &warmer{model: m, sched: n.svc.sched, maxLayers: cfg.maxLayers, loadDelay: cfg.loadDelay, loading: &n.ann.loading,
		publish: n.ann.publish, log: n.log}
	if m.fetch != nil {
		m.fetch.Bind(consSwarm{&n.cons}, n.ann.publish) // before anything reads it: consensus starts below
		n.ann.fetch = func() (int64, int64) { p := m.fetch.Progress(); return p.Done, p.Total }
	}
	if man != nil {
		if err := n.weights.Serve(man); err != nil {
			n.Close()
			return n, fmt.Errorf("%w: serving the model's chunks: %w", ErrConfig, err)
		}
	}
	n.wg.Add(1)
	go func() { defer n.wg.Done(); n.svc.sched.run(n.ctx) }()
	if n.upload != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.upload.Run(n.ctx) }()
	}

	h.Streams().HandleControl(func(ctx context.Context, from peer.ID, req []byte) ([]byte, error) {
		if consensus.IsControlRequest(req) {
			if c := n.cons.Load(); c != nil {
				return c.HandleControl(ctx, from, req)
			}
			return nil, fmt.Errorf("%w: no consensus here", ErrNotServing)
		}
		if weights.IsManifestRequest(req) {
			resp, err := n.weights.AnswerManifest(req)
			return resp, weightsErr(err)
		}
		if weights.IsInfoRequest(req) {
			return n.weights.AnswerInfo(), nil
		}
		return nil, fmt.Errorf("%w: unknown control request", ErrBadFrame)
	})
	h.Streams().HandleActivations(n.svc.onFrame)
	if err := h.Streams().Handle(proto.Steal, n.entry.serveSteal); err != nil {
		n.Close()
		return n, err
	}
	if cfg.steal {
		open := func(ctx context.Context, p peer.ID) (*swarm.Stream, error) {
			return h.Streams().Open(ctx, p, proto.Steal)
		}
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.entry.stealLoop(h.Peers(), open, DefaultStealAfter) }()
	}
	h.Beats().OnMapNotice(n.ann.onMapNotice)
	n.ann.publish()

	if cfg.static != nil {
		h.Discovery().AdvertisePublic() // a static map has no join to wait for
		if r, ok := cfg.static.Range(n.self.String()); ok {
			if err := n.warm.Load(ctx, cfg.static.Epoch, r); err != nil {
				n.Close()
				return n, err
			}
		}
	} else {
		copts := []consensus.Option{
			consensus.WithHost(consNet{h}),
			consensus.WithLogger(log.Named("consensus"), hclog.Warn),
			consensus.WithModel(m.spec, m.info.Fingerprint),
			consensus.WithFetchRates(n.weights),
			consensus.WithVouches(consensus.VouchFunc(func() []consensus.Vouch {
				return n.entry.work.LeaderVouches(n.self, h.Peers().Attestations())
			}), cfg.trustChecks),
			consensus.WithCapabilities(consensus.Capabilities{Hardware: hw, Region: cfg.region, MaxLayers: cfg.maxLayers}),
			consensus.WithStageLoader(n.warm),
			consensus.WithPublisher(h.Beats(), consensus.DefaultRepublish),
			consensus.WithControl(h.Streams()),
			consensus.WithLiveness(consensus.LivenessFunc(liveness{h}.deadSince), consensus.DefaultDeadGrace),
		}
		if cfg.dataDir != "" {
			copts = append(copts, consensus.WithDataDir(cfg.dataDir))
		}
		if m.fetch == nil {
			// Only a node that built the manifest from its file publishes
			// it; one that fetched it from a peer does not vouch for it.
			copts = append(copts, consensus.WithManifest(m.manifest))
		}
		if len(cfg.bootstrap) > 0 {
			copts = append(copts, consensus.WithBootstrap(cfg.bootstrap...))
		}
		copts = append(copts, consensus.WithVerifyRate(cfg.swarmVerifyRate))
		if cfg.planSessionTokens > 0 {
			copts = append(copts, consensus.WithPlanSessionTokens(cfg.planSessionTokens))
		}
		if len(cfg.stewards) > 0 {
			copts = append(copts, consensus.WithStewards(cfg.stewards...))
		}
		c, err := consensus.New(ctx, append(copts, cfg.consOpts...)...)
		if err != nil {
			n.Close()
			return n, err
		}
		n.cons.Store(c)
		if h.Discovery().PublicDiscovery() {
			n.wg.Add(1)
			go func() { defer n.wg.Done(); advertiseWhenMember(n.ctx, c, h, n.log) }()
		}
	}
	if cfg.static == nil {
		n.wg.Add(2)
		go func() { defer n.wg.Done(); n.weights.PollRates(n.ctx, max(4*cfg.statusEvery, time.Second)) }()
		go func() { defer n.wg.Done(); cover.watch(n.ctx, max(2*cfg.statusEvery, time.Second)) }()
	}
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.ann.loop(n.ctx) }()
	go func() { defer n.wg.Done(); watchPeers(n.ctx, h.Peers(), n.entry.peerDown) }()
	n.log.Info("node started", zap.String("model", m.info.Name), zap.Bool("simulated", m.info.Simulated),
		zap.Int("layers", m.info.Layers), zap.String("hardware", hw.Name), zap.Int("max_layers", cfg.maxLayers),
		zap.Int64("memory", int64(hw.MemoryBytes)), zap.Bool("static_map", cfg.static != nil))
	return n, nil
}

// advertiseWhenMember starts providing the public rendezvous once this
// node is a member of the swarm, so that joiners by name are led to
// members, which can take their join, rather than to other joiners.
func advertiseWhenMember(ctx context.Context, c *consensus.Consensus, h *swarm.Host, log *zap.Logger) {
	changes, stop := c.Watch(4)
	defer stop()
	for !c.State().IsMember(h.ID().String()) {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
	log.Info("member of the public swarm: providing its rendezvous")
	h.Discovery().AdvertisePublic()
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
		if m.eng != nil && m.eng.Memory > 0 {
			mem = m.eng.Memory // the device's, where the layers live
		}
		if cfg.memory > 0 {
			mem = cfg.memory
		}
		bench := m
		if m.fetch != nil {
			// No weights yet: measure on a generated stand-in of the
			// model's shape.
			var err error
			if bench, err = standIn(m.fetch, cfg.threads); err != nil {
				return hw, err
			}
			bench.eng = m.eng
		}
		var err error
		if hw, err = measureHardware(ctx, bench, mem, cfg.dataDir, log); err != nil {
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

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.self }

// AddrInfo is the node's ID and addresses: what another node dials or
// bootstraps from.
func (n *Node) AddrInfo() peer.AddrInfo { return n.host.AddrInfo() }

// Connect dials a peer.
func (n *Node) Connect(ctx context.Context, ai peer.AddrInfo) error { return n.host.Connect(ctx, ai) }

// Model describes the model the node serves.
func (n *Node) Model() ModelInfo { return n.model.info }

// CountTokens is the length of req's prompt as Generate would tokenize
// it, without generating (Anthropic's count_tokens).
func (n *Node) CountTokens(req Request) (int, error) {
	p, err := n.model.prompt(req)
	return len(p), err
}

// Committed is the map the entry routes on: the static map, or the
// latest committed one this node knows of (its replica, or a newer map
// notice from the leader).
func (n *Node) Committed() layers.LayerMap { return n.ann.committed() }

// Generate starts a generation and returns its stream. A request that
// finds no path with KV room waits in the entry's queue (Request.
// QueueTimeout, WithEntryQueue) and Generate returns once it is admitted.
// A request that cannot start fails here: ErrBadRequest, ErrUnknownModel,
// ErrPromptTooLong, or ErrNoCapacity (wrapping ErrQueueTimeout or
// ErrQueueFull) when it could not be admitted.
func (n *Node) Generate(ctx context.Context, req Request) (*Stream, error) {
	return n.entry.generate(ctx, req)
}

// WaitReady blocks until this node can route a full path. Routing reads
// the peer table and the committed map, which change without an event
// the node could wait on as one, so it looks again every 20 ms.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := n.paths.route(routeReq{prompt: 1, max: 1}); err == nil {
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
		n.host.Streams().HandleActivations(nil)
		n.entry.stop()
		n.cancel()
		n.weights.Close()
		errs = append(errs, n.host.Close())
		n.entry.wait()
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
		n.entry.stop()
		n.cancel()
		n.weights.Close()
		if c := n.cons.Load(); c != nil {
			c.Close()
		}
		n.entry.wait()
		n.wg.Wait()
		n.svc.out.close()
		n.log.Info("node killed")
	})
}

// RendezvousKey is the DHT key under which the members of swarm name
// serving the model of fingerprint fp advertise themselves: what an
// observer (strata monitor) looks up to find them.
func RendezvousKey(name, fp string) string {
	return swarm.Rendezvous(name, modelScope(ModelInfo{Fingerprint: fp}))
}
