package monitor

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	tlssec "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm"
)

// Sentinel errors.
var (
	// ErrConfig: an option has an invalid value.
	ErrConfig = errors.New("monitor: invalid configuration")
	// ErrNoSeeds: the monitor has nothing to start a crawl from: no
	// bootstrap peer answered and no key has providers.
	ErrNoSeeds = errors.New("monitor: no swarm member found")
)

// Finder finds the peers that provide a DHT key (a swarm's rendezvous).
// The monitor uses Strata's DHT; another discovery plugs in here.
type Finder interface {
	FindPeers(ctx context.Context, key string) ([]peer.AddrInfo, error)
}

type config struct {
	bootstrap []peer.AddrInfo
	keys      []string
	// The public (Amino) DHT: its bootstrap peers, and the public swarms
	// (name, model fingerprint) looked up beside the index.
	publicBoot   []peer.AddrInfo
	publicSwarms [][2]string
	psk          pnet.PSK
	finder       Finder
	noDHT        bool
	log          *zap.Logger
	maxPeers     int
	timeout      time.Duration
	parallel     int
}

// Option configures a Monitor.
type Option func(*config) error

// WithBootstrap sets peers to start from: swarm members, whose snapshots
// name the rest, and the DHT's entry points.
func WithBootstrap(ps ...peer.AddrInfo) Option {
	return func(c *config) error { c.bootstrap = append(c.bootstrap, ps...); return nil }
}

// WithKeys sets the DHT keys whose providers seed the crawl, e.g.
// swarm.Rendezvous(name, model).
func WithKeys(keys ...string) Option {
	return func(c *config) error { c.keys = append(c.keys, keys...); return nil }
}

// WithSwarmKey lets the monitor connect to a private swarm's members (a
// PSK swarm refuses every other connection). It stays read-only: it joins
// nothing.
func WithSwarmKey(psk pnet.PSK) Option {
	return func(c *config) error {
		if len(psk) != 32 {
			return fmt.Errorf("swarm key of %d bytes (want 32): %w", len(psk), ErrConfig)
		}
		c.psk = psk
		return nil
	}
}

// WithPublicDHT finds the members of public swarms on the public
// (Amino) DHT through its bootstrap peers: the providers of
// swarm.SwarmIndexKey, which every member of every public swarm provides,
// and of the rendezvous of each WithPublicSwarm.
func WithPublicDHT(peers ...peer.AddrInfo) Option {
	return func(c *config) error {
		if len(peers) == 0 {
			return fmt.Errorf("public DHT without bootstrap peers: %w", ErrConfig)
		}
		c.publicBoot = append(c.publicBoot, peers...)
		return nil
	}
}

// WithPublicSwarm also looks up the public swarm name serving the model
// of fingerprint fp (swarm.PublicRendezvous), for members the index
// misses.
func WithPublicSwarm(name, fp string) Option {
	return func(c *config) error { c.publicSwarms = append(c.publicSwarms, [2]string{name, fp}); return nil }
}

// WithFinder replaces the DHT lookup of keys.
func WithFinder(f Finder) Option { return func(c *config) error { c.finder = f; return nil } }

// WithoutDHT runs no DHT: the crawl starts from the bootstrap peers only.
func WithoutDHT() Option { return func(c *config) error { c.noDHT = true; return nil } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("nil logger: %w", ErrConfig)
		}
		c.log = l
		return nil
	}
}

// WithLimits bounds a crawl: at most peers peers, each asked within
// timeout, parallel at once.
func WithLimits(peers int, timeout time.Duration, parallel int) Option {
	return func(c *config) error {
		if peers < 1 || timeout <= 0 || parallel < 1 {
			return fmt.Errorf("limits %d peers, %v, %d parallel: %w", peers, timeout, parallel, ErrConfig)
		}
		c.maxPeers, c.timeout, c.parallel = peers, timeout, parallel
		return nil
	}
}

// Monitor is the read-only observer: a libp2p host that listens nowhere,
// a DHT client, and the crawl.
type Monitor struct {
	cfg    config
	log    *zap.Logger
	h      host.Host
	dht    *dht.IpfsDHT
	finder Finder
	// public is the Amino DHT client (nil without WithPublicDHT).
	public *dht.IpfsDHT
}

// New starts a monitor; ctx bounds its start (the DHT's first refresh).
func New(ctx context.Context, opts ...Option) (*Monitor, error) {
	cfg := config{log: zap.NewNop(), maxPeers: 1024, timeout: 10 * time.Second, parallel: 8}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	lopts := []libp2p.Option{
		libp2p.NoListenAddrs,
		libp2p.Security(tlssec.ID, tlssec.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.UserAgent("strata-monitor"),
	}
	if cfg.psk != nil {
		lopts = append(lopts, libp2p.PrivateNetwork(cfg.psk)) // TCP only: no QUIC under a PSK
	} else {
		lopts = append(lopts, libp2p.Transport(quic.NewTransport))
	}
	h, err := libp2p.New(lopts...)
	if err != nil {
		return nil, fmt.Errorf("monitor host: %w", err)
	}
	m := &Monitor{cfg: cfg, log: cfg.log.Named("monitor"), h: h, finder: cfg.finder}
	if m.finder == nil && !cfg.noDHT {
		// Client mode: the monitor answers no DHT queries and stores no
		// records; it only looks up.
		d, err := dht.New(h, dht.Mode(dht.ModeClient), dht.ProtocolPrefix(swarm.ProtocolDHTPrefix),
			dht.BootstrapPeers(cfg.bootstrap...), dht.DisableValues())
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("dht: %w", err)
		}
		m.dht = d
		m.finder = dhtFinder{d: d, rd: drouting.NewRoutingDiscovery(d)}
	}
	if len(cfg.publicBoot) > 0 {
		// The public network's DHT protocol, beside Strata's own.
		d, err := dht.New(h, dht.Mode(dht.ModeClient), dht.BootstrapPeers(cfg.publicBoot...))
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("public dht: %w", err)
		}
		m.public = d
	}
	// After the DHTs exist: they add a server to their routing tables
	// when identify, after the connection, says it speaks their protocol.
	for _, ai := range append(slices.Clone(cfg.bootstrap), cfg.publicBoot...) {
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		if err := h.Connect(cctx, ai); err != nil {
			m.log.Warn("bootstrap peer unreachable", zap.Stringer("peer", ai.ID), zap.Error(err))
		}
		cancel()
	}
	return m, nil
}

// publicSeeds are the providers of the index and of the public swarms'
// rendezvous on the public DHT.
func (m *Monitor) publicSeeds(ctx context.Context) ([]peer.AddrInfo, error) {
	if err := ensureTable(ctx, m.public); err != nil {
		return nil, err
	}
	keys := []cid.Cid{swarm.SwarmIndexKey()}
	for _, ps := range m.cfg.publicSwarms {
		keys = append(keys, swarm.PublicRendezvous(ps[0], ps[1]))
	}
	var out []peer.AddrInfo
	for _, k := range keys {
		for ai := range m.public.FindProvidersAsync(ctx, k, m.cfg.maxPeers) {
			out = append(out, ai)
		}
	}
	return out, ctx.Err()
}

// ensureTable refreshes d's routing table when it is empty: it fills as
// the bootstrap peers identify, and a lookup before that finds nothing.
func ensureTable(ctx context.Context, d *dht.IpfsDHT) error {
	// The table fills as identify finishes with the bootstrap peers,
	// after the connections: wait for it, refreshing now and then (a
	// refresh also redials the bootstrap peers of an empty table).
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for n := 0; d.RoutingTable().Size() == 0; n++ {
		if n%20 == 19 {
			d.RefreshRoutingTable()
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("no DHT server in the routing table: %w", ctx.Err())
		}
	}
	return nil
}

// Close stops the monitor.
func (m *Monitor) Close() error {
	var errs []error
	if m.dht != nil {
		errs = append(errs, m.dht.Close())
	}
	if m.public != nil {
		errs = append(errs, m.public.Close())
	}
	errs = append(errs, m.h.Close())
	return errors.Join(errs...)
}

// ID is the monitor's (throwaway) peer ID.
func (m *Monitor) ID() peer.ID { return m.h.ID() }

type dhtFinder struct {
	d  *dht.IpfsDHT
	rd *drouting.RoutingDiscovery
}

func (f dhtFinder) FindPeers(ctx context.Context, key string) ([]peer.AddrInfo, error) {
	if err := ensureTable(ctx, f.d); err != nil {
		return nil, err
	}
	ch, err := f.rd.FindPeers(ctx, key, discovery.Limit(256))
	if err != nil {
		return nil, fmt.Errorf("find providers of %s: %w", key, err)
	}
	var out []peer.AddrInfo
	for ai := range ch {
		out = append(out, ai)
	}
	return out, nil
}

// crawl state of one peer.
type entry struct {
	addrs    []ma.Multiaddr
	seenBy   []peer.ID
	direct   bool // asked directly (or tried to)
	forward  bool // asked through members (or tried to)
	obs      Observation
	answered bool
}

// Swarms crawls and aggregates.
func (m *Monitor) Swarms(ctx context.Context) ([]Swarm, error) {
	obs, err := m.Crawl(ctx)
	if err != nil {
		return nil, err
	}
	return Aggregate(obs), nil
}

// Crawl asks every member it can find for its signed snapshot: first
// the seeds (bootstrap peers, providers of the keys), then every live
// peer their snapshots name, directly where it can dial one and, for
// members it cannot dial (behind NAT, relay addresses only: relays serve
// members only), through a member connected to it.
func (m *Monitor) Crawl(ctx context.Context) ([]Observation, error) {
	peers := map[peer.ID]*entry{}
	var order []peer.ID
	add := func(id peer.ID, addrs []ma.Multiaddr, by peer.ID) {
		if id == m.h.ID() || id == "" {
			return
		}
		e := peers[id]
		if e == nil {
			if len(peers) >= m.cfg.maxPeers {
				return
			}
			e = &entry{obs: Observation{Peer: id}}
			peers[id] = e
			order = append(order, id)
		}
		for _, a := range addrs {
			if !slices.ContainsFunc(e.addrs, a.Equal) {
				e.addrs = append(e.addrs, a)
			}
		}
		if by != "" && !slices.Contains(e.seenBy, by) {
			e.seenBy = append(e.seenBy, by)
		}
	}
	for _, ai := range m.cfg.bootstrap {
		add(ai.ID, ai.Addrs, "")
	}
	var findErrs []error
	if m.finder != nil {
		for _, k := range m.cfg.keys {
			fctx, cancel := context.WithTimeout(ctx, 3*m.cfg.timeout)
			found, err := m.finder.FindPeers(fctx, k)
			cancel()
			if err != nil {
				findErrs = append(findErrs, err)
				m.log.Debug("find", zap.String("key", k), zap.Error(err))
			}
			for _, ai := range found {
				add(ai.ID, ai.Addrs, "")
			}
		}
	}
	if m.public != nil {
		fctx, cancel := context.WithTimeout(ctx, 3*m.cfg.timeout)
		found, err := m.publicSeeds(fctx)
		cancel()
		if err != nil {
			findErrs = append(findErrs, fmt.Errorf("public DHT: %w", err))
		}
		for _, ai := range found {
			add(ai.ID, ai.Addrs, "")
		}
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("%w: give --bootstrap addresses of members or the swarm's name: %w", ErrNoSeeds, errors.Join(findErrs...))
	}
	for ctx.Err() == nil {
		// Each round asks, in parallel, every peer not yet asked that way:
		// directly first, then through members for those still silent.
		var direct, forward []peer.ID
		for _, id := range order {
			e := peers[id]
			switch {
			case e.answered:
			case !e.direct:
				direct = append(direct, id)
			case !e.forward && len(m.relaysFor(peers, id)) > 0:
				forward = append(forward, id)
			}
		}
		if len(direct) == 0 && len(forward) == 0 {
			break
		}
		for _, id := range direct {
			peers[id].direct = true
		}
		for _, id := range forward {
			peers[id].forward = true
		}
		results := m.askAll(ctx, peers, direct, forward)
		for _, o := range results {
			e := peers[o.Peer]
			prevErr := e.obs.Err
			e.obs = o
			e.obs.SeenBy = e.seenBy
			if o.Snapshot != nil {
				e.answered = true
			} else if prevErr != "" && o.Err != prevErr {
				e.obs.Err = prevErr + "; " + o.Err
			}
			if o.Verified {
				for _, p := range o.Snapshot.Peers {
					// Only members heard from: a hint may be anyone that
					// connected (another monitor, a DHT peer).
					if p.Liveness == swarm.Alive || p.Liveness == swarm.Suspect {
						add(p.Peer, p.Addrs, o.Peer)
					}
				}
			}
		}
	}
	out := make([]Observation, 0, len(order))
	for _, id := range order {
		e := peers[id]
		o := e.obs
		o.SeenBy = e.seenBy
		if o.Snapshot == nil && o.Err == "" {
			o.Err = "not asked: " + ctx.Err().Error()
		}
		out = append(out, o)
	}
	return out, nil
}

// relaysFor is the members that answered, verified, and report a link
// to id: those that can forward a request to it.
func (m *Monitor) relaysFor(peers map[peer.ID]*entry, id peer.ID) []peer.ID {
	var out, relayed []peer.ID
	for _, by := range peers[id].seenBy {
		e := peers[by]
		if e == nil || !e.obs.Verified || e.obs.Via != "" {
			continue // a forwarded member is not one we hold a connection to
		}
		for _, p := range e.obs.Snapshot.Peers {
			if p.Peer == id && p.Link != swarm.LinkNone {
				out = append(out, by)
				if p.Link == swarm.LinkRelayed {
					relayed = append(relayed, by)
				}
			}
		}
	}
	// Members with a direct link first: a relay's circuit is slow and
	// capped.
	slices.SortStableFunc(out, func(a, b peer.ID) int {
		return cmp.Compare(btoi(slices.Contains(relayed, a)), btoi(slices.Contains(relayed, b)))
	})
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// askAll asks the direct peers themselves and the forward peers through
// their members, parallel at once.
func (m *Monitor) askAll(ctx context.Context, peers map[peer.ID]*entry, direct, forward []peer.ID) []Observation {
	type job struct {
		id    peer.ID
		addrs []ma.Multiaddr
		vias  []peer.ID
	}
	var jobs []job
	for _, id := range direct {
		jobs = append(jobs, job{id: id, addrs: slices.Clone(peers[id].addrs)})
	}
	for _, id := range forward {
		jobs = append(jobs, job{id: id, vias: m.relaysFor(peers, id)})
	}
	out := make([]Observation, len(jobs))
	sem := make(chan struct{}, m.cfg.parallel)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				out[i] = Observation{Peer: j.id, Err: ctx.Err().Error()}
				return
			}
			defer func() { <-sem }()
			if j.vias == nil {
				out[i] = m.askDirect(ctx, j.id, j.addrs)
				return
			}
			for _, via := range j.vias {
				if out[i] = m.ask(ctx, via, j.id); out[i].Snapshot != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return out
}

// askDirect dials id on its direct addresses (relay addresses are of no
// use: relays serve members only) and asks it.
func (m *Monitor) askDirect(ctx context.Context, id peer.ID, addrs []ma.Multiaddr) Observation {
	var dial []ma.Multiaddr
	for _, a := range addrs {
		if !swarm.IsRelayAddr(a) {
			dial = append(dial, a)
		}
	}
	if m.h.Network().Connectedness(id) != network.Connected {
		if len(dial) == 0 {
			return Observation{Peer: id, Err: "no direct address (reachable through relays only)"}
		}
		cctx, cancel := context.WithTimeout(ctx, m.cfg.timeout)
		err := m.h.Connect(cctx, peer.AddrInfo{ID: id, Addrs: dial})
		cancel()
		if err != nil {
			return Observation{Peer: id, Err: fmt.Sprintf("dial: %v", err)}
		}
	}
	return m.ask(ctx, id, "")
}

// ask fetches target's snapshot through via (target "" : via's own).
func (m *Monitor) ask(ctx context.Context, via, target peer.ID) Observation {
	id := target
	if id == "" {
		id = via
	}
	var nonce [swarm.SnapshotNonceLen]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Observation{Peer: id, Err: err.Error()}
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.timeout)
	defer cancel()
	s, err := swarm.FetchSnapshot(actx, m.h, via, target, nonce)
	o := Observation{Peer: id, Snapshot: s, Verified: err == nil && s != nil}
	if target != "" {
		o.Via = via
	}
	if err != nil {
		o.Err = err.Error()
		if s != nil && !errors.Is(err, swarm.ErrSnapshotSignature) {
			o.Snapshot = nil
		}
	}
	return o
}
