package node

import (
	"fmt"
	"io"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// Defaults.
const (
	DefaultStepTimeout   = 20 * time.Second
	DefaultRepairWait    = 30 * time.Second
	DefaultIdleTimeout   = 2 * time.Minute
	DefaultQueueTimeout  = 30 * time.Second
	DefaultMaxBatch      = 64
	DefaultMaxQueue      = 256
	DefaultEntryQueueMax = 1024
	DefaultMaxReplays    = 16
	DefaultMaxTokens     = 256
	DefaultStatusEvery   = 250 * time.Millisecond
	DefaultSuspectFor    = 10 * time.Second
	DefaultMemoryReserve = 0.10
)

type config struct {
	log        *zap.Logger
	dataDir    string
	modelPath  string
	simModel   string
	modelID    string // node/weights: join by fingerprint, fetch layers from peers
	uploadRate int64  // chunk uploads, bytes/s (0: no limit)
	chunkSize  int64  // of the manifest built from the file
	noChunks   bool   // do not serve the file's chunks
	// chunkReader wraps the file the chunk server reads (tests: a liar).
	chunkReader func(io.ReaderAt) io.ReaderAt
	hw          *layers.Hardware
	maxLayers   int
	memory      int64
	region      string
	threads     int
	engine      *Engine // nil: the pure-Go engine
	static      *layers.LayerMap
	swarmOpts   []swarm.Option
	consOpts    []consensus.Option
	bootstrap   []peer.AddrInfo
	routerOpts  []routing.Option
	sched       routing.SchedulerConfig

	stepTimeout, repairWait, idleTimeout, queueTimeout time.Duration
	statusEvery, suspectFor                            time.Duration
	maxBatch, maxQueue, maxReplays, defaultMaxTokens   int
	entryQueueMax                                      int
	entryQueueTimeout                                  time.Duration
	wire                                               WireMode
	verifyRate                                         float64 // -1: the swarm's
	swarmVerifyRate                                    float64
	planSessionTokens                                  int // 0: none given to the swarm
	trustChecks                                        int // 0: consensus.DefaultTrustChecks
	stewards                                           []string
	founding                                           bool // found a public swarm rather than find it by name
	steal                                              bool
	noFair                                             bool
	fairStall                                          time.Duration // tests: the stall bound (0: the default)
	fault                                              outputFault   // test-only (faultinject.go)
	noPrefixCache                                      bool
	unsignedFrames                                     bool // sigframe.go
	uploadAdaptive                                     bool // limit uploads further while serving (node/weights)
	clock                                              clockwork.Clock
	loadDelay                                          time.Duration // tests: a pause per layer loaded
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func defaultConfig() config {
	return config{
		log:               zap.NewNop(),
		clock:             clockwork.NewRealClock(),
		stepTimeout:       DefaultStepTimeout,
		repairWait:        DefaultRepairWait,
		idleTimeout:       DefaultIdleTimeout,
		queueTimeout:      DefaultQueueTimeout,
		statusEvery:       DefaultStatusEvery,
		suspectFor:        DefaultSuspectFor,
		maxBatch:          DefaultMaxBatch,
		maxQueue:          DefaultMaxQueue,
		entryQueueMax:     DefaultEntryQueueMax,
		entryQueueTimeout: DefaultQueueTimeout,
		maxReplays:        DefaultMaxReplays,
		defaultMaxTokens:  DefaultMaxTokens,
		sched:             routing.DefaultSchedulerConfig(),
		verifyRate:        -1,
		swarmVerifyRate:   DefaultVerifyRate,
		uploadAdaptive:    true,
	}
}

func (c *config) validate() error {
	switch {
	case btoi(c.modelPath != "")+btoi(c.simModel != "")+btoi(c.modelID != "") != 1:
		return fmt.Errorf("%w: exactly one of a model file (WithModelFile), a model ID (WithModelID) and a simulated model (WithSimModel)", ErrConfig)
	case c.modelID != "" && (c.dataDir == "" || c.static != nil):
		return fmt.Errorf("%w: a node that fetches its layers (WithModelID) needs a data dir and consensus (no static map)", ErrConfig)
	case c.chunkSize != 0 && (c.chunkSize < chunks.MinChunkSize || c.chunkSize > chunks.MaxChunkSize):
		return fmt.Errorf("%w: chunk size %d outside [%d, %d]", ErrConfig, c.chunkSize, chunks.MinChunkSize, chunks.MaxChunkSize)
	case c.uploadRate < 0:
		return fmt.Errorf("%w: negative upload rate", ErrConfig)
	case c.simModel != "" && c.hw == nil:
		return fmt.Errorf("%w: a simulated model needs a declared device (WithSimModel's hardware)", ErrConfig)
	case c.maxLayers < 0 || c.memory < 0 || c.threads < 0:
		return fmt.Errorf("%w: negative max layers, memory or threads", ErrConfig)
	case c.stepTimeout <= 0 || c.repairWait < 0 || c.idleTimeout <= 0 || c.queueTimeout <= 0 || c.statusEvery <= 0 || c.suspectFor <= 0:
		return fmt.Errorf("%w: non-positive timing", ErrConfig)
	case c.entryQueueMax <= 0 || c.entryQueueTimeout <= 0:
		return fmt.Errorf("%w: non-positive entry queue bound or timeout", ErrConfig)
	case c.maxBatch <= 0 || c.maxQueue < 0 || c.maxReplays < 0 || c.defaultMaxTokens <= 0:
		return fmt.Errorf("%w: non-positive batch, queue, replay or token limit", ErrConfig)
	case !(c.verifyRate >= 0 && c.verifyRate <= 1) && c.verifyRate != -1:
		return fmt.Errorf("%w: verify rate %v outside [0, 1]", ErrConfig, c.verifyRate)
	case !(c.swarmVerifyRate >= 0 && c.swarmVerifyRate <= 1):
		return fmt.Errorf("%w: swarm verify rate %v outside [0, 1]", ErrConfig, c.swarmVerifyRate)
	case c.planSessionTokens < 0 || c.planSessionTokens > consensus.MaxSessionTokens:
		return fmt.Errorf("%w: plan session tokens %d outside [0, %d]", ErrConfig, c.planSessionTokens, consensus.MaxSessionTokens)
	case c.engine != nil && c.simModel != "":
		return fmt.Errorf("%w: an engine (WithEngine) for a simulated model", ErrConfig)
	case len(c.region) > swarm.MaxRegionLen:
		return fmt.Errorf("%w: region longer than %d bytes", ErrConfig, swarm.MaxRegionLen)
	}
	if c.static != nil {
		if err := c.static.Validate(); err != nil {
			return fmt.Errorf("%w: static map: %w", ErrConfig, err)
		}
	}
	return nil
}

// Option configures New.
type Option func(*config) error

// WithLogger logs through l (default: nothing). See NewLogger.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) error {
		if l != nil {
			c.log = l
		}
		return nil
	}
}

// WithDataDir keeps the identity key, Raft state and the measured
// capabilities in dir. Without it everything is in memory.
func WithDataDir(dir string) Option { return func(c *config) error { c.dataDir = dir; return nil } }

// WithModelFile serves the GGUF model at path with the real engine.
func WithModelFile(path string) Option {
	return func(c *config) error { c.modelPath = path; return nil }
}

// WithModelID joins the swarm serving the model with this fingerprint
// without its file: the node learns the model's manifest from its
// bootstrap peers, and on each placement fetches the tensors of its range
// from the peers that hold the file into a GGUF slice under the data dir
// (which WithModelID requires), then loads it. A restart finds the slice
// and fetches nothing.
func WithModelID(fingerprint string) Option {
	return func(c *config) error { c.modelID = fingerprint; return nil }
}

// WithUploadRate limits what the node sends to peers fetching the
// model's chunks from it, to bytesPerSec in all (default 0: no limit),
// so that uploads leave the link to the inference it serves.
func WithUploadRate(bytesPerSec int64) Option {
	return func(c *config) error { c.uploadRate = bytesPerSec; return nil }
}

// WithAdaptiveUpload turns the adaptive upload limit on (the default) or
// off. While the node serves inference it times its engine batches with
// uploads running against an idle baseline (kept by pausing uploads for
// a moment now and then) and cuts the upload limit when they run more
// than 10% slower, raising it slowly otherwise; it never goes below
// 1 MB/s, nor above WithUploadRate's cap. A node serving nothing uploads
// at the cap.
func WithAdaptiveUpload(on bool) Option {
	return func(c *config) error { c.uploadAdaptive = on; return nil }
}

// WithChunkSize sets the chunk size of the manifest a node with the
// model file builds (default chunks.DefaultChunkSize).
func WithChunkSize(n int64) Option { return func(c *config) error { c.chunkSize = n; return nil } }

// WithoutChunkServer: a node with the model file does not serve its
// chunks to peers, nor publish its manifest.
func WithoutChunkServer() Option { return func(c *config) error { c.noChunks = true; return nil } }

// WithSimModel serves a built-in model (layers.Model) with the simulated
// engine on a declared device. Everything it serves is labelled
// simulated.
func WithSimModel(name string, hw layers.Hardware) Option {
	return func(c *config) error { c.simModel, c.hw = name, &hw; return nil }
}

// WithHardware declares a real-engine node's device instead of measuring
// it at start.
func WithHardware(hw layers.Hardware) Option {
	return func(c *config) error {
		if err := hw.Validate(); err != nil {
			return fmt.Errorf("%w: hardware: %w", ErrConfig, err)
		}
		c.hw = &hw
		return nil
	}
}

// WithMaxLayers caps the layers the node offers (0: no cap beyond
// memory).
func WithMaxLayers(n int) Option { return func(c *config) error { c.maxLayers = n; return nil } }

// WithMemory caps the memory the node uses for weights and KV cache, in
// bytes (0: the device's memory; for a real engine, half the machine's).
func WithMemory(bytes int64) Option { return func(c *config) error { c.memory = bytes; return nil } }

// WithRegion sets the coarse location label heartbeats announce.
func WithRegion(r string) Option { return func(c *config) error { c.region = r; return nil } }

// WithThreads sets the goroutines each engine step uses (default
// GOMAXPROCS). Results are the same at any count.
func WithThreads(n int) Option { return func(c *config) error { c.threads = n; return nil } }

// WithStaticMap serves and routes on a fixed committed map instead of
// running consensus: the node loads its range of m at start. For tests,
// benchmarks and fixed deployments.
func WithStaticMap(m layers.LayerMap) Option {
	return func(c *config) error { c.static = &m; return nil }
}

// WithSwarmOptions passes options to the swarm host the node starts.
func WithSwarmOptions(opts ...swarm.Option) Option {
	return func(c *config) error { c.swarmOpts = append(c.swarmOpts, opts...); return nil }
}

// WithConsensusOptions passes options to the consensus member (timings,
// planner); the node sets the host, model, capabilities, loader,
// publisher, control, liveness and bootstrap itself.
func WithConsensusOptions(opts ...consensus.Option) Option {
	return func(c *config) error { c.consOpts = append(c.consOpts, opts...); return nil }
}

// WithBootstrap names peers to join through (for the swarm and for
// consensus). None founds a swarm.
func WithBootstrap(peers ...peer.AddrInfo) Option {
	return func(c *config) error { c.bootstrap = append(c.bootstrap, peers...); return nil }
}

// WithRouterOptions passes options to the entry's router: every
// scheduling profile's router starts from them, and the profile then sets
// the weights, filters, stale penalty and slack its plugins name.
func WithRouterOptions(opts ...routing.Option) Option {
	return func(c *config) error { c.routerOpts = append(c.routerOpts, opts...); return nil }
}

// WithSchedulerConfig sets the entry's scheduling profiles (default:
// routing.DefaultSchedulerConfig, one profile that routes as the plain
// router does). A request picks one by name (Request.Profile). An invalid
// configuration fails New with an error wrapping ErrConfig that names the
// field.
func WithSchedulerConfig(cfg routing.SchedulerConfig) Option {
	return func(c *config) error { c.sched = cfg; return nil }
}

// WithStepTimeout bounds how long the entry waits for one step's token
// before it gives up on the path and replays (default 20 s). Dead hops
// are usually noticed much sooner, from the peer table and from hops
// that cannot forward.
func WithStepTimeout(d time.Duration) Option {
	return func(c *config) error { c.stepTimeout = d; return nil }
}

// WithRepairWait bounds how long an in-flight generation waits for a
// path when none exists (default 30 s): the leader's repair time.
func WithRepairWait(d time.Duration) Option {
	return func(c *config) error { c.repairWait = d; return nil }
}

// WithIdleTimeout sets when a session nobody steps or closes expires on
// a hop (default 2 min).
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) error { c.idleTimeout = d; return nil }
}

// WithQueue sets the admission queue: how many sessions may wait for KV
// memory (default 256) and for how long (default 30 s).
func WithQueue(n int, wait time.Duration) Option {
	return func(c *config) error { c.maxQueue, c.queueTimeout = n, wait; return nil }
}

// WithEntryQueue sets the entry's admission queue: how many requests may
// wait for a path with KV room (default 1024) and for how long by default
// (30 s; a request may ask for another deadline). Past either, a request
// is refused with ErrNoCapacity and a Retry-After.
func WithEntryQueue(n int, wait time.Duration) Option {
	return func(c *config) error { c.entryQueueMax, c.entryQueueTimeout = n, wait; return nil }
}

// WithMaxBatch caps the steps one engine batch runs (default 64).
func WithMaxBatch(n int) Option { return func(c *config) error { c.maxBatch = n; return nil } }

// WithMaxReplays bounds the replays of one generation (default 16).
func WithMaxReplays(n int) Option { return func(c *config) error { c.maxReplays = n; return nil } }

// WithDefaultMaxTokens sets the output cap of requests that name none
// (default 256).
func WithDefaultMaxTokens(n int) Option {
	return func(c *config) error { c.defaultMaxTokens = n; return nil }
}

// WithStatusInterval sets how often the node refreshes what its
// heartbeats announce (default 250 ms).
func WithStatusInterval(d time.Duration) Option {
	return func(c *config) error { c.statusEvery = d; return nil }
}

// WithSuspectFor sets how long the entry avoids a hop that failed a step
// when nothing newer is heard from it (default 10 s).
func WithSuspectFor(d time.Duration) Option {
	return func(c *config) error { c.suspectFor = d; return nil }
}

// WithWireF16 sends hidden states as float16 (half the bytes; the
// tokens then differ slightly from a single-process run): WithWire(WireF16),
// or WithWire(WireF32) when off.
func WithWireF16(on bool) Option {
	if on {
		return WithWire(WireF16)
	}
	return WithWire(WireF32)
}

// WithWire sets how this node sends hidden states to its next hops
// (wiremode.go): WireF32 (the default, which keeps every split
// bit-identical with a single-process run), WireF16, WireQ8, or WireAuto,
// which picks per next hop from the link's measured bandwidth.
func WithWire(m WireMode) Option {
	return func(c *config) error {
		if _, err := ParseWire(string(m)); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		c.wire = m
		return nil
	}
}

// WithStealing turns work stealing between entries on or off (default
// off): with it, this entry, when it has spare path capacity, takes
// requests that waited in a peer entry's queue at least
// DefaultStealAfter, drives them and streams the tokens back through
// that entry. An entry hands its own queued requests to thieves
// whatever this option says.
func WithStealing(on bool) Option { return func(c *config) error { c.steal = on; return nil } }

// WithFairAdmission turns swarm-wide oldest-first admission on or off
// (default on): with it, this entry holds back its own queue head, a
// new request included, while the load table shows a peer entry whose
// head was queued earlier, so that room freed anywhere goes to the
// oldest request in the swarm (see fair.go for the bounds on a hold).
func WithFairAdmission(on bool) Option { return func(c *config) error { c.noFair = !on; return nil } }

// WithSignedFrames turns signed hops on or off (default on): every
// float32 frame of hidden states this node sends carries its signature
// over what it sent, and frames it receives must carry a valid one
// (docs/trust.md). Every node of a swarm must agree: a node with it on
// refuses the unsigned frames of one with it off.
func WithSignedFrames(on bool) Option {
	return func(c *config) error { c.unsignedFrames = !on; return nil }
}

// WithVerifyRate sets the share of token boundaries at which this
// node's entry spot-checks one hop of a generation's path against a
// second holder (0 turns checks off), overriding the swarm's replicated
// rate. Without it (or with -1) the entry follows the swarm's rate, and
// DefaultVerifyRate while the swarm has none (a static map). See
// docs/trust.md.
func WithVerifyRate(r float64) Option { return func(c *config) error { c.verifyRate = r; return nil } }

// WithSwarmVerifyRate is the verify rate this node gives the swarm when
// it founds one (the leader commits it while the replicated state has
// none; default DefaultVerifyRate). Change it later with
// Node.SetSwarmConfig on the leader.
func WithSwarmVerifyRate(r float64) Option {
	return func(c *config) error { c.swarmVerifyRate = r; return nil }
}

// WithPlanSessionTokens is the mean session length, prompt plus output
// tokens, this node gives the swarm's planner when it founds one: the
// leader then caps each node's rate by the sessions of that length its KV
// memory holds (layers.CostParams.SessionTokens). 0, the default, gives
// none: the planner has no KV cap until an operator sets one with
// Node.SetSwarmConfig on the leader.
func WithPlanSessionTokens(n int) Option {
	return func(c *config) error { c.planSessionTokens = n; return nil }
}

// WithStewards are the peer IDs this node, when it founds the swarm,
// signs into the replicated state as its stewards, the only nodes that
// vote (consensus.WithStewards). None, the default: anyone stable may
// vote, as before stewards.
func WithStewards(ids ...string) Option {
	return func(c *config) error { c.stewards = append([]string(nil), ids...); return nil }
}

// WithFounding makes a node of a public swarm (swarm.WithPublicDHT) with
// no bootstrap peers found the swarm. Without it such a node joins by
// name: it waits, within New's ctx, until the public DHT leads it to a
// member, and joins through the members it found as through bootstrap
// peers. A node that is no public swarm's founds without bootstrap peers
// either way, as before public swarms.
func WithFounding(on bool) Option {
	return func(c *config) error { c.founding = on; return nil }
}

// WithTrustChecks is K, the spot checks by stewards (and, at most K/2 of
// them, by other members) after which a member's capacity counts fully in
// placement when this node leads a swarm with stewards (consensus.
// WithVouches). 0, the default: consensus.DefaultTrustChecks.
func WithTrustChecks(k int) Option {
	return func(c *config) error {
		if k < 0 {
			return fmt.Errorf("%w: trust checks %d", ErrConfig, k)
		}
		c.trustChecks = k
		return nil
	}
}

// WithPrefixCache keeps the KV of finished sessions on each stage, in the
// memory sessions leave free, so that a session over the same first
// blocks of tokens (a chat's next turn) resumes from them, and gossips a
// summary of them for prefix-aware routing. Default on; the outputs are
// those of a cold run either way.
func WithPrefixCache(on bool) Option {
	return func(c *config) error { c.noPrefixCache = !on; return nil }
}

// WithClock sets the clock of the node's timeouts: the entry's step
// timeout, busy backoff and repair wait, the scheduler's idle and queue
// expiry, and the status interval (default the wall clock). Tests pass a
// fake one and advance it. Routing and the peer table keep the wall
// clock: heartbeat times are compared with it.
func WithClock(c clockwork.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrConfig)
		}
		cfg.clock = c
		return nil
	}
}
