package swarm

import (
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	ma "github.com/multiformats/go-multiaddr"
	madns "github.com/multiformats/go-multiaddr-dns"
	"go.uber.org/zap"
)

// Reachability overrides what AutoNAT would find out about the host.
type Reachability int

// The reachability settings.
const (
	// ReachabilityAuto lets AutoNAT decide (the default).
	ReachabilityAuto Reachability = iota
	// ReachabilityPublic declares the host directly reachable: it serves
	// as a relay (unless relaying is off) and never reserves relay slots.
	ReachabilityPublic
	// ReachabilityPrivate declares the host unreachable: it reserves a
	// slot on a relay and advertises the relayed address.
	ReachabilityPrivate
)

// DefaultListenAddrs are used when no listen address is given: TCP and
// QUIC on port 4001 of every interface, libp2p's conventional port, so
// that a node's multiaddrs stay the same across restarts.
var DefaultListenAddrs = []string{
	"/ip4/0.0.0.0/tcp/4001",
	"/ip4/0.0.0.0/udp/4001/quic-v1",
}

// Default timings. Liveness is tuned so that a silent peer is dead within
// 2 s on a LAN: suspect after 3 missed beats, dead after 4, and a closed
// connection shortens that to 2 beats.
const (
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultMaxClockSkew      = 30 * time.Second
	DefaultForgetAfter       = 60 * time.Second
	DefaultMaxMapNotice      = 1 << 20
	DefaultSwarmName         = "default"
)

type config struct {
	log       *zap.Logger
	clock     clockwork.Clock
	dataDir   string
	listen    []string
	noListen  bool
	bootstrap []peer.AddrInfo
	// bootstrapDNS are published bootstrap lists (/dnsaddr/NAME with no
	// peer ID) that New resolves into bootstrap peers with resolver.
	bootstrapDNS []ma.Multiaddr
	resolver     *madns.Resolver
	psk          pnet.PSK
	swarmName    string
	model        string
	relay        bool    // act as a relay when public
	relayLimit   bool    // keep the stock relay limits (128 KiB, 2 min per circuit)
	relayRate    float64 // bytes/s relayed for others, all circuits; 0: no cap
	reach        Reachability
	staticRel    []peer.AddrInfo
	holePunch    bool
	portMap      bool
	discovery    bool
	dhtMode      bool // true: server mode
	// publicBoot: the public (Amino) DHT's bootstrap peers; nil: no
	// public DHT. publicRefresh: how often the records are provided again.
	publicBoot    []peer.AddrInfo
	publicRefresh time.Duration
	fingerprint   string
	pinFounder    peer.ID // the public swarm's founder, pinned (charter.go)
	founder       bool    // this host founds its public swarm

	hbInterval   time.Duration
	suspectAfter time.Duration
	deadAfter    time.Duration
	connGrace    time.Duration
	forgetAfter  time.Duration
	hintTTL      time.Duration
	maxSkew      time.Duration
	rttInterval  time.Duration
	rttPeers     int
	advertiseMin time.Duration
	advertiseMax time.Duration
	findInterval time.Duration

	maxActFrame  int
	maxCtlFrame  int
	maxMapNotice int

	connLow, connHigh int
	actStreams        int // per peer, each direction
}

func defaultConfig() config {
	return config{
		log:           zap.NewNop(),
		clock:         clockwork.NewRealClock(),
		swarmName:     DefaultSwarmName,
		relay:         true,
		relayRate:     DefaultRelayRate,
		holePunch:     true,
		discovery:     true,
		dhtMode:       true,
		hbInterval:    DefaultHeartbeatInterval,
		forgetAfter:   DefaultForgetAfter,
		maxSkew:       DefaultMaxClockSkew,
		advertiseMin:  time.Second,
		advertiseMax:  time.Minute,
		publicRefresh: DefaultPublicRefresh,
		maxActFrame:   DefaultMaxActFrame,
		maxCtlFrame:   DefaultMaxCtlFrame,
		maxMapNotice:  DefaultMaxMapNotice,
		connLow:       64,
		connHigh:      256,
		actStreams:    256,
		rttPeers:      8,
	}
}

// derive fills the timings that default to multiples of the heartbeat
// interval.
func (c *config) derive() {
	iv := c.hbInterval
	if c.suspectAfter == 0 {
		c.suspectAfter = 3 * iv
	}
	if c.deadAfter == 0 {
		c.deadAfter = 4 * iv
	}
	if c.connGrace == 0 {
		c.connGrace = 2 * iv
	}
	if c.hintTTL == 0 {
		c.hintTTL = 2 * c.forgetAfter
	}
	if c.rttInterval == 0 {
		c.rttInterval = 2 * iv
	}
	if c.findInterval == 0 {
		c.findInterval = max(4*iv, 500*time.Millisecond)
	}
}

func (c *config) validate() error {
	switch {
	case c.hbInterval < 10*time.Millisecond:
		return fmt.Errorf("heartbeat interval %v below 10ms: %w", c.hbInterval, ErrConfig)
	case c.suspectAfter <= c.hbInterval || c.deadAfter < c.suspectAfter:
		return fmt.Errorf("liveness timings suspect %v dead %v with interval %v: %w",
			c.suspectAfter, c.deadAfter, c.hbInterval, ErrConfig)
	case c.forgetAfter <= 0 || c.maxSkew <= 0:
		return fmt.Errorf("forget-after %v, max clock skew %v: %w", c.forgetAfter, c.maxSkew, ErrConfig)
	case c.maxActFrame <= 0 || c.maxActFrame > MaxFrameLimit || c.maxCtlFrame <= 0 || c.maxCtlFrame > MaxFrameLimit:
		return fmt.Errorf("frame limits act %d ctl %d: %w", c.maxActFrame, c.maxCtlFrame, ErrConfig)
	case c.swarmName == "":
		return fmt.Errorf("empty swarm name: %w", ErrConfig)
	case c.publicBoot != nil && c.psk != nil:
		// A private swarm's hosts cannot reach the public network, and a
		// record there would tell the world the swarm exists.
		return fmt.Errorf("a private swarm (swarm key) uses no public DHT: %w", ErrConfig)
	case c.publicBoot != nil && c.swarmName == DefaultSwarmName:
		return fmt.Errorf("a public swarm needs a name of its own, not %q: %w", DefaultSwarmName, ErrConfig)
	case c.publicRefresh <= 0:
		return fmt.Errorf("public refresh %v: %w", c.publicRefresh, ErrConfig)
	case c.connLow <= 0 || c.connHigh < c.connLow:
		return fmt.Errorf("connection watermarks %d/%d: %w", c.connLow, c.connHigh, ErrConfig)
	}
	return nil
}

// Option configures a Host.
type Option func(*config) error

// WithLogger logs through l (default: nothing).
func WithLogger(l *zap.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("nil logger: %w", ErrConfig)
		}
		c.log = l
		return nil
	}
}

// WithDataDir keeps the identity key (and nothing else yet) in dir. With
// no data dir the host gets a fresh identity on every start.
func WithDataDir(dir string) Option {
	return func(c *config) error { c.dataDir = dir; return nil }
}

// WithListenAddrs sets the listen multiaddrs (default DefaultListenAddrs).
func WithListenAddrs(addrs ...string) Option {
	return func(c *config) error {
		for _, a := range addrs {
			if _, err := ma.NewMultiaddr(a); err != nil {
				return fmt.Errorf("listen address %q: %w: %w", a, ErrConfig, err)
			}
		}
		c.listen = append([]string(nil), addrs...)
		c.noListen = false
		return nil
	}
}

// WithNoListen makes a host that listens nowhere: it reaches the swarm by
// dialling out and is reachable only through a relay.
func WithNoListen() Option {
	return func(c *config) error { c.listen = nil; c.noListen = true; return nil }
}

// WithBootstrap sets the peers to connect to at start: full multiaddrs
// with a /p2p/ component (/dnsaddr/NAME/p2p/ID included, resolved as it
// is dialled), or a list a swarm publishes in DNS, /dnsaddr/NAME without
// a peer ID, which New resolves (the TXT records of _dnsaddr.NAME, as
// libp2p's bootstrap lists) into the peers it names.
func WithBootstrap(addrs ...string) Option {
	return func(c *config) error {
		for _, s := range addrs {
			if IsBootstrapList(s) {
				c.bootstrapDNS = append(c.bootstrapDNS, ma.StringCast(s))
				continue
			}
			ai, err := peer.AddrInfoFromString(s)
			if err != nil {
				return fmt.Errorf("bootstrap address %q: %w: %w", s, ErrConfig, err)
			}
			c.bootstrap = append(c.bootstrap, *ai)
		}
		return nil
	}
}

// IsBootstrapList reports whether s names a published bootstrap list: a
// /dnsaddr/NAME multiaddr with no peer ID.
func IsBootstrapList(s string) bool {
	m, err := ma.NewMultiaddr(s)
	if err != nil || len(m) != 1 {
		return false
	}
	return m[0].Protocol().Code == ma.P_DNSADDR
}

// WithDNSResolver resolves /dnsaddr and other DNS multiaddrs, bootstrap
// lists and dials alike, with r (default madns.DefaultResolver, the
// system's resolver).
func WithDNSResolver(r *madns.Resolver) Option {
	return func(c *config) error {
		if r == nil {
			return fmt.Errorf("nil DNS resolver: %w", ErrConfig)
		}
		c.resolver = r
		return nil
	}
}

// WithBootstrapPeers is WithBootstrap for parsed peers.
func WithBootstrapPeers(ps ...peer.AddrInfo) Option {
	return func(c *config) error { c.bootstrap = append(c.bootstrap, ps...); return nil }
}

// WithSwarmKey makes the swarm private: only hosts with the same key can
// connect. go-libp2p runs no QUIC under a pre-shared key, so such a host
// listens and dials on TCP only.
func WithSwarmKey(psk pnet.PSK) Option {
	return func(c *config) error {
		if len(psk) != 32 {
			return fmt.Errorf("swarm key of %d bytes (want 32): %w", len(psk), ErrSwarmKey)
		}
		c.psk = psk
		return nil
	}
}

// WithSwarmName sets the swarm's name, which scopes topics and the
// rendezvous key (default "default").
func WithSwarmName(name string) Option {
	return func(c *config) error { c.swarmName = name; return nil }
}

// WithModel sets the model served, which scopes the rendezvous key.
func WithModel(model string) Option {
	return func(c *config) error { c.model = model; return nil }
}

// WithModelFingerprint sets the full fingerprint of the model served,
// which the public rendezvous key is derived from (default: the model
// scope of WithModel).
func WithModelFingerprint(fp string) Option {
	return func(c *config) error { c.fingerprint = fp; return nil }
}

// WithPublicDHT makes the swarm public and findable by name: the host
// runs a client of the Amino DHT (/ipfs/kad/1.0.0) beside Strata's own,
// bootstrapped from peers (DefaultPublicBootstrap for the public
// network; tests pass their own), looks up PublicRendezvous(name, model
// fingerprint) there and dials the members it finds, and, once
// AdvertisePublic is called, provides that key and SwarmIndexKey. It
// needs a swarm name of its own and no swarm key.
func WithPublicDHT(peers ...peer.AddrInfo) Option {
	return func(c *config) error {
		if len(peers) == 0 {
			return fmt.Errorf("public DHT without bootstrap peers: %w", ErrConfig)
		}
		c.publicBoot = append([]peer.AddrInfo{}, peers...)
		return nil
	}
}

// WithPublicRefresh sets how often the public rendezvous records are
// provided again (default DefaultPublicRefresh).
func WithPublicRefresh(d time.Duration) Option {
	return func(c *config) error { c.publicRefresh = d; return nil }
}

// WithRelayService makes a publicly reachable host serve as a circuit
// relay v2 for the swarm (default true).
func WithRelayService(on bool) Option {
	return func(c *config) error { c.relay = on; return nil }
}

// WithRelayLimits keeps go-libp2p's stock per-circuit limits (128 KiB and
// 2 minutes), which are too tight for activations; by default a Strata
// relay carries circuits without data or time limits.
func WithRelayLimits(on bool) Option {
	return func(c *config) error { c.relayLimit = on; return nil }
}

// WithRelayRate caps the bytes per second a relay carries for others,
// all circuits and both directions together (default DefaultRelayRate,
// 25 MiB/s), so that relaying does not starve the relay's own serving.
// 0 removes the cap.
func WithRelayRate(bytesPerSec float64) Option {
	return func(c *config) error {
		if !(bytesPerSec >= 0) || math.IsInf(bytesPerSec, 0) {
			return fmt.Errorf("relay rate %v bytes/s: %w", bytesPerSec, ErrConfig)
		}
		c.relayRate = bytesPerSec
		return nil
	}
}

// WithReachability overrides AutoNAT's verdict.
func WithReachability(r Reachability) Option {
	return func(c *config) error { c.reach = r; return nil }
}

// WithStaticRelays names the relays an unreachable host reserves slots
// on; by default it asks its bootstrap and connected peers.
func WithStaticRelays(ps ...peer.AddrInfo) Option {
	return func(c *config) error { c.staticRel = append(c.staticRel, ps...); return nil }
}

// WithHolePunching turns DCUtR hole punching on or off (default on).
func WithHolePunching(on bool) Option {
	return func(c *config) error { c.holePunch = on; return nil }
}

// WithNATPortMap asks the router for a port mapping by UPnP or NAT-PMP
// (default off: it sends multicast to the LAN).
func WithNATPortMap(on bool) Option {
	return func(c *config) error { c.portMap = on; return nil }
}

// WithDiscovery turns DHT discovery on or off (default on). With it off
// the host knows only the peers it is told about or connected to.
func WithDiscovery(on bool) Option {
	return func(c *config) error { c.discovery = on; return nil }
}

// WithHeartbeatInterval sets the heartbeat period (default 500 ms); the
// liveness deadlines scale with it unless set on their own.
func WithHeartbeatInterval(d time.Duration) Option {
	return func(c *config) error { c.hbInterval = d; return nil }
}

// WithLiveness sets when a silent peer becomes suspect and dead, and how
// soon after its last connection closes it is dead. Zero keeps a default.
func WithLiveness(suspectAfter, deadAfter, connGrace time.Duration) Option {
	return func(c *config) error {
		c.suspectAfter, c.deadAfter, c.connGrace = suspectAfter, deadAfter, connGrace
		return nil
	}
}

// WithForgetAfter sets how long a dead peer stays in the table (default
// 60 s).
func WithForgetAfter(d time.Duration) Option {
	return func(c *config) error { c.forgetAfter = d; return nil }
}

// WithMaxClockSkew bounds how far a heartbeat's timestamp may be from the
// local clock (default 30 s).
func WithMaxClockSkew(d time.Duration) Option {
	return func(c *config) error { c.maxSkew = d; return nil }
}

// WithRTTSampling sets how often and how many peers are pinged.
func WithRTTSampling(every time.Duration, peers int) Option {
	return func(c *config) error {
		if every <= 0 || peers <= 0 {
			return fmt.Errorf("RTT sampling every %v of %d peers: %w", every, peers, ErrConfig)
		}
		c.rttInterval, c.rttPeers = every, peers
		return nil
	}
}

// WithAdvertiseBackoff sets the first and the longest wait between
// rendezvous advertisements that fail (defaults 1 s and 1 min).
func WithAdvertiseBackoff(first, longest time.Duration) Option {
	return func(c *config) error {
		if first <= 0 || longest < first {
			return fmt.Errorf("advertise backoff %v..%v: %w", first, longest, ErrConfig)
		}
		c.advertiseMin, c.advertiseMax = first, longest
		return nil
	}
}

// WithMaxFrames sets the largest activation and control frames accepted.
func WithMaxFrames(act, ctl int) Option {
	return func(c *config) error { c.maxActFrame, c.maxCtlFrame = act, ctl; return nil }
}

// WithConnLimits sets the connection manager's watermarks (default 64/256).
func WithConnLimits(low, high int) Option {
	return func(c *config) error { c.connLow, c.connHigh = low, high; return nil }
}

// WithClock sets the clock of the host's liveness loops: heartbeat
// sending and timestamps, the check of received heartbeats' skew, the
// peer table's deadlines and its sweep, and bootstrap redials (default
// the wall clock). Hosts that talk to each other must share one: tests
// pass one fake clock to all of them and advance it.
func WithClock(c clockwork.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return fmt.Errorf("%w: nil clock", ErrConfig)
		}
		cfg.clock = c
		return nil
	}
}
