package consensus

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/layers"
	"go.uber.org/zap"
)

// Default timings, for a LAN. Raft's are tuned down from hashicorp's 1 s
// defaults: on these machines 200 ms timeouts elect a 3-node leader in
// about 250 ms; we leave margin for loaded hosts.
const (
	DefaultHeartbeatTimeout = 500 * time.Millisecond
	DefaultElectionTimeout  = 500 * time.Millisecond
	DefaultTick             = 200 * time.Millisecond
	DefaultDeadGrace        = 1 * time.Second
	DefaultWarmupTimeout    = 5 * time.Minute
	DefaultLaggardPenalty   = 10 * time.Minute
	// A member becomes a voter after this long: long enough that a node
	// which comes and goes at once does not churn the voter set, short
	// enough that a swarm started together does not hang on its founder
	// alone for long (killing the only voter stops every commit).
	DefaultStableAfter    = 10 * time.Second
	DefaultRebalanceEvery = 10 * time.Second
	DefaultMaxVoters      = 5
	DefaultRPCTimeout     = 5 * time.Second
	DefaultRepublish      = 5 * time.Second
	// DefaultBanDuration is how long a node evicted for a proven fault
	// may not rejoin.
	DefaultBanDuration = 24 * time.Hour
)

// Liveness is what consensus needs from the swarm's peer table: whether
// a peer is dead, and since when. A suspect peer is not dead.
type Liveness interface {
	DeadSince(id peer.ID) (since time.Time, dead bool)
}

// StageLoader is what consensus needs from the node for warmup and
// release. consensus never loads weights itself.
type StageLoader interface {
	// Load makes the node able to serve r for the pending map of epoch
	// while it keeps serving what it serves now. It returns when r is
	// loaded, or with ctx's error when the plan changed.
	Load(ctx context.Context, epoch uint64, r layers.Range) error
	// Release tells the node what it serves from the committed map of
	// epoch on (an empty range: nothing), once no warmup is pending: it
	// may free every other layer when the sessions on them end. After a
	// restart it is the first word on what to serve: a node that does
	// not hold keep loads it.
	Release(ctx context.Context, epoch uint64, keep layers.Range) error
}

// Publisher gossips the leader's commits on the map-notice topic. A
// notice is the committed map in layers.LayerMap's binary form. The
// swarm's host is one.
type Publisher interface {
	PublishMapNotice(ctx context.Context, data []byte) error
}

// Caller sends one control request to a peer and returns the answer's
// payload. The swarm's host is one: then the node routes the requests
// for which IsControlRequest holds to HandleControl.
type Caller interface {
	Call(ctx context.Context, to peer.ID, req []byte) ([]byte, error)
}

// LivenessFunc adapts a function to Liveness.
type LivenessFunc func(id peer.ID) (since time.Time, dead bool)

// DeadSince implements Liveness.
func (f LivenessFunc) DeadSince(id peer.ID) (time.Time, bool) { return f(id) }

// Speeds reports a node's measured speed, as heartbeats report it: the
// factor that layers.Node.Speed takes (1: as the cost model says).
type Speeds interface {
	Speed(id peer.ID) (float64, bool)
}

// SpeedFunc adapts a function to Speeds.
type SpeedFunc func(id peer.ID) (float64, bool)

// Speed implements Speeds.
func (f SpeedFunc) Speed(id peer.ID) (float64, bool) { return f(id) }

// FetchRates reports the rate (bytes/s) at which a node that has no
// model file fetches weights from peers; false for a node with the file.
type FetchRates interface {
	FetchRate(id peer.ID) (float64, bool)
}

// FetchRateFunc adapts a function to FetchRates.
type FetchRateFunc func(id peer.ID) (float64, bool)

// FetchRate implements FetchRates.
func (f FetchRateFunc) FetchRate(id peer.ID) (float64, bool) { return f(id) }

type config struct {
	host        Network
	log         *zap.Logger
	raftLevel   hclog.Level
	dataDir     string
	model       layers.ModelSpec
	fingerprint string
	manifest    []byte
	// manifestParts: the manifest split for publication when it does not
	// fit one record (validate does it once, not every leader step).
	manifestParts []ManifestPart
	// verifyRate is appended while the state has no rate (swarmconfig.go).
	verifyRate    float64
	hasVerifyRate bool
	// sessionTokens is appended while the state has none (0: never).
	sessionTokens int
	// stewards are signed into the state by the founder (stewards.go).
	stewards  []string
	caps      Capabilities
	bootstrap []peer.AddrInfo
	initial   []peer.ID

	heartbeat, election time.Duration
	tick                time.Duration
	deadGrace           time.Duration
	warmup              time.Duration
	laggardPenalty      time.Duration
	stableAfter         time.Duration
	maxVoters           int
	rpcTimeout          time.Duration

	planner        layers.Planner
	costParams     layers.CostParams
	rebalanceEvery time.Duration
	rebalanceOpts  layers.RebalanceOptions

	liveness  Liveness
	loader    StageLoader
	publisher Publisher
	speeds    Speeds
	fetch     FetchRates
	// vouches and trustChecks weigh members by verified work (trust.go).
	vouches     Vouches
	trustChecks int

	banFor time.Duration // how long a faulted node stays banned

	caller    Caller // nil: the built-in handler and caller on the host
	republish time.Duration

	// Tests only: raftFault loses Raft requests (progressTransport), and ignoreLag
	// turns off the wait for voters to hold the latest configuration, to
	// show what it prevents (progress.go).
	raftFault func(id raft.ServerID, req any) error
	ignoreLag bool
}

func defaultConfig() config {
	return config{
		log:            zap.NewNop(),
		raftLevel:      hclog.Warn,
		heartbeat:      DefaultHeartbeatTimeout,
		election:       DefaultElectionTimeout,
		tick:           DefaultTick,
		deadGrace:      DefaultDeadGrace,
		warmup:         DefaultWarmupTimeout,
		laggardPenalty: DefaultLaggardPenalty,
		stableAfter:    DefaultStableAfter,
		maxVoters:      DefaultMaxVoters,
		rpcTimeout:     DefaultRPCTimeout,
		planner:        layers.NewPlanner(),
		costParams:     layers.DefaultCostParams(),
		rebalanceEvery: DefaultRebalanceEvery,
		republish:      DefaultRepublish,
		banFor:         DefaultBanDuration,
	}
}

func (c *config) validate() error {
	switch {
	case c.host == nil:
		return fmt.Errorf("%w: no host (WithHost)", ErrConfig)
	case c.fingerprint == "" || len(c.fingerprint) > MaxFingerprintLen:
		return fmt.Errorf("%w: model fingerprint must be 1..%d bytes (WithModel)", ErrConfig, MaxFingerprintLen)
	case c.model.Layers <= 0:
		return fmt.Errorf("%w: no model (WithModel)", ErrConfig)
	case c.caps.Hardware.Validate() != nil:
		return fmt.Errorf("%w: capabilities: %w", ErrConfig, c.caps.Hardware.Validate())
	case len(c.caps.Region) > MaxRegionLen || len(c.caps.Hardware.Name) > MaxHardwareNameLen:
		return fmt.Errorf("%w: region or hardware name too long", ErrConfig)
	case c.heartbeat < 5*time.Millisecond || c.election < 5*time.Millisecond:
		return fmt.Errorf("%w: raft timeouts below 5 ms", ErrConfig)
	case c.tick <= 0 || c.deadGrace < 0 || c.warmup <= 0 || c.rpcTimeout <= 0 || c.banFor <= 0:
		return fmt.Errorf("%w: non-positive timing", ErrConfig)
	case c.maxVoters != 3 && c.maxVoters != 5:
		return fmt.Errorf("%w: max voters must be 3 or 5, not %d", ErrConfig, c.maxVoters)
	}
	if len(c.manifest) > MaxManifestLen {
		parts, err := SplitManifest(c.fingerprint, c.manifest)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
		c.manifestParts = parts
	}
	return nil
}

// Option configures New.
type Option func(*config) error

// WithHost sets the network to run on (required): the swarm's host,
// adapted by the node.
func WithHost(h Network) Option {
	return func(c *config) error { c.host = h; return nil }
}

// WithLogger sets the logger (default: none). Raft logs through it at
// raftLevel and above.
func WithLogger(l *zap.Logger, raftLevel hclog.Level) Option {
	return func(c *config) error {
		if l != nil {
			c.log = l
		}
		c.raftLevel = raftLevel
		return nil
	}
}

// WithDataDir keeps the Raft log, stable store and snapshots under
// dir/raft. Without it they live in memory and die with the process.
func WithDataDir(dir string) Option {
	return func(c *config) error { c.dataDir = dir; return nil }
}

// WithModel sets the model the node serves (required): its spec for
// planning, and its fingerprint, which must equal the swarm's.
func WithModel(m layers.ModelSpec, fingerprint string) Option {
	return func(c *config) error { c.model, c.fingerprint = m, fingerprint; return nil }
}

// WithManifest gives the encoded manifest of the model file this node
// holds (package chunks' Manifest.MarshalBinary). While it leads a swarm
// whose state has no manifest, the member publishes it, so that nodes
// without the file can fetch their layers: in one record when it fits
// (MaxManifestLen), else in parts (up to MaxManifestSize).
func WithManifest(data []byte) Option {
	return func(c *config) error {
		if len(data) > MaxManifestSize {
			return fmt.Errorf("%w: manifest of %d bytes exceeds %d", ErrConfig, len(data), MaxManifestSize)
		}
		c.manifest = data
		return nil
	}
}

// WithCapabilities declares what this node offers (required).
func WithCapabilities(caps Capabilities) Option {
	return func(c *config) error { c.caps = caps; return nil }
}

// WithBootstrap names peers to send the join request to. A node with no
// bootstrap peers and no Raft state founds a swarm.
func WithBootstrap(peers ...peer.AddrInfo) Option {
	return func(c *config) error { c.bootstrap = append(c.bootstrap, peers...); return nil }
}

// WithInitialVoters starts a swarm from a fixed voter set, like etcd's
// initial cluster: every listed node must be given the same list. It
// counts only when the data dir holds no Raft state.
func WithInitialVoters(ids ...peer.ID) Option {
	return func(c *config) error { c.initial = append(c.initial, ids...); return nil }
}

// WithRaftTimeouts sets Raft's heartbeat and election timeouts; the
// leader lease is half the heartbeat timeout.
func WithRaftTimeouts(heartbeat, election time.Duration) Option {
	return func(c *config) error { c.heartbeat, c.election = heartbeat, election; return nil }
}

// WithTick sets how often the leader loop and the member loop look at
// the state when nothing wakes them.
func WithTick(d time.Duration) Option {
	return func(c *config) error { c.tick = d; return nil }
}

// WithLiveness sets the source of peer deaths and the grace period after
// which a dead member is removed (default: the host's connections, 1 s).
func WithLiveness(l Liveness, grace time.Duration) Option {
	return func(c *config) error { c.liveness, c.deadGrace = l, grace; return nil }
}

// WithWarmup sets how long nodes have to load their new ranges, and how
// long one that missed it stays out of plans.
func WithWarmup(deadline, laggardPenalty time.Duration) Option {
	return func(c *config) error { c.warmup, c.laggardPenalty = deadline, laggardPenalty; return nil }
}

// WithVoters sets the largest voter set (3 or 5) and how long a member
// must have been in the swarm to become a voter.
func WithVoters(max int, stableAfter time.Duration) Option {
	return func(c *config) error { c.maxVoters, c.stableAfter = max, stableAfter; return nil }
}

// WithPlanner sets the placement policy and the cost model's workload.
func WithPlanner(p layers.Planner, params layers.CostParams) Option {
	return func(c *config) error { c.planner, c.costParams = p, params; return nil }
}

// WithRebalance sets how often the leader asks layers whether to
// rebalance on measured speeds (0: never), and the hysteresis.
func WithRebalance(every time.Duration, o layers.RebalanceOptions) Option {
	return func(c *config) error { c.rebalanceEvery, c.rebalanceOpts = every, o; return nil }
}

// WithStageLoader sets what loads ranges on this node (default: nothing
// to load, ready at once).
func WithStageLoader(l StageLoader) Option {
	return func(c *config) error { c.loader = l; return nil }
}

// WithPublisher sets where the leader publishes commits, and how often
// it repeats the latest (gossip may miss a fresh mesh; 0: never).
func WithPublisher(p Publisher, republish time.Duration) Option {
	return func(c *config) error { c.publisher, c.republish = p, republish; return nil }
}

// WithSpeeds sets the source of measured per-node speeds for rebalancing.
func WithSpeeds(s Speeds) Option {
	return func(c *config) error { c.speeds = s; return nil }
}

// WithFetchRates sets the source of members' fetch rates: a rebalance
// then pays for the time its moves take to fetch weights from peers.
func WithFetchRates(r FetchRates) Option {
	return func(c *config) error { c.fetch = r; return nil }
}

// WithControl sends control requests through caller (the swarm's host)
// instead of the built-in client, and leaves the control protocol's
// handler to the caller's owner, which passes the requests for which
// IsControlRequest holds to HandleControl.
func WithControl(caller Caller) Option {
	return func(c *config) error { c.caller = caller; return nil }
}

// WithBanDuration sets how long a node evicted for a proven fault stays
// banned (DefaultBanDuration). The leader that appends the eviction
// decides it.
func WithBanDuration(d time.Duration) Option {
	return func(c *config) error { c.banFor = d; return nil }
}

// WithRPCTimeout bounds one control call.
func WithRPCTimeout(d time.Duration) Option {
	return func(c *config) error { c.rpcTimeout = d; return nil }
}
