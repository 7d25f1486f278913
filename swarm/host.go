package swarm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	tlssec "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ymx "github.com/libp2p/go-yamux/v5"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"
)

// Host is a running Strata swarm member: a libp2p host with its DHT
// discovery, heartbeat gossip, peer table, RTT sampling and stream
// protocols. Create it with New and stop it with Close.
type Host struct {
	cfg   config
	log   *zap.Logger
	h     host.Host
	table *PeerTable

	gossip *gossip
	disc   *discoverer // nil with discovery off
	pub    *publicDisc // nil without WithPublicDHT
	relays *relayKeeper
	nat    *natState
	// relayMeter paces and counts relayed bytes; nil unless relaying.
	relayMeter *relayMeter

	streams *Streams
	links   *Links
	beat    *Beats
	disco   *Discovery

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New starts a host. ctx bounds the start, including the first dials to
// the bootstrap peers (whose failure is logged, not fatal: the host keeps
// retrying them); the host then runs until Close.
func New(ctx context.Context, opts ...Option) (*Host, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	cfg.derive()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.log.Named("swarm")
	if len(cfg.bootstrapDNS) > 0 {
		ais, err := resolveBootstrapLists(ctx, cfg.resolver, cfg.bootstrapDNS)
		if err != nil {
			return nil, err
		}
		cfg.bootstrap = append(cfg.bootstrap, ais...)
	}

	sk, err := identity(cfg.dataDir)
	if err != nil {
		return nil, err
	}
	listen, err := listenAddrs(&cfg, log)
	if err != nil {
		return nil, err
	}
	rm, err := newResourceManager(cfg.actStreams)
	if err != nil {
		return nil, err
	}
	cm, err := connmgr.NewConnManager(cfg.connLow, cfg.connHigh, connmgr.WithGracePeriod(time.Minute))
	if err != nil {
		return nil, fmt.Errorf("connection manager: %w", err)
	}

	hctx, cancel := context.WithCancel(context.Background())
	s := &Host{cfg: cfg, log: log, ctx: hctx, cancel: cancel}
	// Before libp2p.New: identify may call addrsFactory, which reads it,
	// while New is still returning.
	s.relays = newRelayKeeper(s)
	s.nat = newNATState(&cfg, log)
	s.streams, s.links, s.beat, s.disco = &Streams{h: s}, &Links{s}, &Beats{h: s, monitorSem: make(chan struct{}, maxMonitorServing)}, &Discovery{s}
	s.streams.acts = &actPool{st: s.streams, streams: map[peer.ID]*actStream{}}

	lopts := []libp2p.Option{
		libp2p.Identity(sk),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		// TLS first: on loopback it moved activations at ~1.2 GB/s
		// against Noise's ~0.85 GB/s. Noise stays for peers without TLS.
		libp2p.Security(tlssec.ID, tlssec.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, muxer()),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.SwarmOpts(swarm.WithDialRanker(s.dialRanker)),
		libp2p.AddrsFactory(s.addrsFactory),
		libp2p.UserAgent("strata"),
	}
	if cfg.resolver != nil {
		lopts = append(lopts, libp2p.MultiaddrResolver(swarm.ResolverFromMaDNS{Resolver: cfg.resolver}))
	}
	if cfg.psk != nil {
		lopts = append(lopts, libp2p.PrivateNetwork(cfg.psk))
	} else {
		lopts = append(lopts, libp2p.Transport(quic.NewTransport))
	}
	if cfg.noListen {
		lopts = append(lopts, libp2p.NoListenAddrs)
	} else {
		lopts = append(lopts, libp2p.ListenAddrStrings(listen...))
	}
	lopts = append(lopts, natOptions(&cfg, s)...)

	h, err := libp2p.New(lopts...)
	if err != nil {
		cancel()
		rm.Close()
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	s.h = h
	fail := func(err error) (*Host, error) {
		s.Close()
		return nil, err
	}
	s.table = newPeerTable(h.ID(), tableConfig{
		suspectAfter: cfg.suspectAfter, deadAfter: cfg.deadAfter, connGrace: cfg.connGrace,
		forgetAfter: cfg.forgetAfter, hintTTL: cfg.hintTTL,
	}, cfg.clock.Now)

	sub, err := h.EventBus().Subscribe([]any{
		new(event.EvtPeerConnectednessChanged),
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtPeerIdentificationCompleted),
	})
	if err != nil {
		return fail(fmt.Errorf("event bus: %w", err))
	}
	s.goLoop(func(ctx context.Context) { s.watchEvents(ctx, sub) })

	if s.gossip, err = newGossip(hctx, s); err != nil {
		return fail(err)
	}
	h.SetStreamHandler(ProtocolAct, s.streams.serveAct)
	h.SetStreamHandler(ProtocolCtl, s.streams.serveCtl)
	h.SetStreamHandler(ProtocolBW, s.links.serveBW)
	h.SetStreamHandler(ProtocolMonitor, s.beat.serveMonitor)

	if cfg.discovery {
		if s.disc, err = newDiscoverer(s); err != nil {
			return fail(err)
		}
	}
	if cfg.publicBoot != nil {
		if s.pub, err = newPublicDisc(s); err != nil {
			return fail(err)
		}
	}
	if cfg.psk != nil {
		log.Info("private swarm: swarm key set, TCP only (go-libp2p runs no QUIC with a pre-shared key); " +
			"behind NAT, hole punching then has TCP alone, which fewer NATs let through than QUIC")
	}
	s.disco.connectBootstrap(ctx)

	s.goLoop(s.gossip.readHeartbeats)
	s.goLoop(s.gossip.readMaps)
	s.goLoop(s.gossip.publishHeartbeats)
	s.goLoop(s.sweep)
	s.goLoop((&rttSampler{h: h, table: s.table, every: cfg.rttInterval, n: cfg.rttPeers, log: log,
		pinged: map[peer.ID]time.Time{}}).run)
	s.goLoop(s.relays.run)
	s.goLoop((&bwProber{h: s, last: map[peer.ID]time.Time{}}).run)
	s.goLoop(s.disco.keepBootstrap)
	if s.disc != nil {
		s.goLoop(s.disc.advertise)
		s.goLoop(s.disc.find)
	}
	if s.pub != nil {
		s.goLoop(s.pub.advertise)
		s.goLoop(s.pub.find)
	}
	log.Info("host started", zap.Stringer("id", h.ID()), zap.Strings("addrs", addrStrings(s.Addrs())))
	return s, nil
}

func identity(dir string) (crypto.PrivKey, error) {
	if dir != "" {
		return LoadOrCreateIdentity(dir)
	}
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate identity: %w", err)
	}
	return sk, nil
}

// listenAddrs applies the defaults and, under a swarm key, drops the
// QUIC addresses that go-libp2p cannot serve.
func listenAddrs(c *config, log *zap.Logger) ([]string, error) {
	if c.noListen {
		return nil, nil
	}
	addrs := c.listen
	if len(addrs) == 0 {
		addrs = DefaultListenAddrs
	}
	if c.psk == nil {
		return addrs, nil
	}
	var tcpOnly []string
	for _, a := range addrs {
		if isQUIC(ma.StringCast(a)) {
			log.Warn("swarm key set: not listening on QUIC", zap.String("addr", a))
			continue
		}
		tcpOnly = append(tcpOnly, a)
	}
	if len(tcpOnly) == 0 {
		return nil, fmt.Errorf("swarm key set but only QUIC listen addresses %v: %w", addrs, ErrConfig)
	}
	return tcpOnly, nil
}

func isQUIC(a ma.Multiaddr) bool {
	for _, c := range a {
		switch c.Code() {
		case ma.P_QUIC, ma.P_QUIC_V1, ma.P_WEBTRANSPORT, ma.P_UDP:
			return true
		}
	}
	return false
}

// muxer is go-libp2p's yamux with larger messages and a larger initial
// stream window (1 MiB each instead of 64 KiB and 256 KiB). yamux grows a
// window only when it drains within 4 RTTs, which on loopback or a fast
// LAN (RTT of tens of µs) almost never happens, so activation streams
// would stall on window updates every 128 KiB. The window is reserved
// from the peer's resource scope per stream, so it stays at 1 MiB rather
// than a whole 4 MB frame: a few streams per peer, hundreds of peers.
func muxer() *yamux.Transport {
	cfg := *(*ymx.Config)(yamux.DefaultTransport)
	cfg.MaxMessageSize = 1 << 20
	cfg.InitialStreamWindowSize = 1 << 20
	return (*yamux.Transport)(&cfg)
}

// dialRanker picks the transport dialled first. A host that others can
// reach dials TCP first: on loopback TCP with TLS moved activations at
// ~1.2 GB/s and QUIC at ~0.47 GB/s, so the connection that activations
// ride on should be TCP whenever both work. A host behind NAT dials QUIC
// first: QUIC reuses the listen port's UDP socket, so the NAT maps its
// dials to one external port that identify reports and DCUtR punches,
// where TCP mappings often change per connection, and home routers keep
// UDP mappings that a punch opened more readily than TCP's simultaneous
// open. The other transport follows 250 ms later as the fallback. (Hole
// punches themselves dial every address at once, whatever the ranker.)
func (s *Host) dialRanker(addrs []ma.Multiaddr) []network.AddrDelay {
	return rankTransports(addrs, s.relays.private.Load())
}

// rankTransports dials the direct addresses of one transport (QUIC if
// quicFirst, else TCP and the rest) before the other's, 250 ms apart.
// Relay addresses keep go-libp2p's ranking: after every direct one.
func rankTransports(addrs []ma.Multiaddr, quicFirst bool) []network.AddrDelay {
	var quicAddrs, rest []ma.Multiaddr
	for _, a := range addrs {
		if !IsRelayAddr(a) && isQUIC(a) {
			quicAddrs = append(quicAddrs, a)
			continue
		}
		rest = append(rest, a)
	}
	direct := func(as []ma.Multiaddr) bool {
		return slices.ContainsFunc(as, func(a ma.Multiaddr) bool { return !IsRelayAddr(a) })
	}
	first, second := rest, quicAddrs
	if quicFirst && len(quicAddrs) > 0 {
		first, second = quicAddrs, rest
	}
	out := swarm.DefaultDialRanker(first)
	offset := time.Duration(0)
	if direct(first) {
		offset = 250 * time.Millisecond
	}
	for _, d := range swarm.DefaultDialRanker(second) {
		d.Delay += offset
		out = append(out, d)
	}
	return out
}

// addrsFactory adds the circuit addresses of our relay reservations.
func (s *Host) addrsFactory(addrs []ma.Multiaddr) []ma.Multiaddr {
	return append(slices.Clone(addrs), s.relays.addrs()...)
}

// addrsChanged tells discovery to re-advertise our (new) addresses.
func (s *Host) addrsChanged() {
	if s.disc != nil {
		s.disc.readvertise()
	}
	if s.pub != nil {
		s.pub.readvertise()
	}
}

// goLoop runs fn in a goroutine that Close waits for.
func (s *Host) goLoop(fn func(ctx context.Context)) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

func (s *Host) watchEvents(ctx context.Context, sub event.Subscription) {
	defer sub.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			switch e := e.(type) {
			case event.EvtPeerConnectednessChanged:
				s.refreshConn(e.Peer)
				if e.Connectedness == network.NotConnected {
					s.streams.acts.drop(e.Peer, true)
				}
			case event.EvtPeerIdentificationCompleted:
				s.refreshConn(e.Peer) // it may turn out no Strata peer
			case event.EvtLocalReachabilityChanged:
				if s.cfg.reachability() == ReachabilityAuto {
					s.relays.private.Store(e.Reachability == network.ReachabilityPrivate)
				}
				s.nat.setReachability(e.Reachability)
				s.links.logNAT()
			}
		}
	}
}

// stranger reports whether id identified itself as a host that speaks
// no Strata: a node of the public DHT met while providing or looking up
// (hundreds of them on the real Amino DHT). Such a peer gets no row in
// the peer table, so that it is not pinged, asked for a relay slot or
// shown as a peer. A peer not identified yet is no stranger.
func (s *Host) stranger(id peer.ID) bool {
	protos, err := s.h.Peerstore().GetProtocols(id)
	return err == nil && len(protos) > 0 && !slices.Contains(protos, ProtocolCtl)
}

// refreshConn tells the peer table whether we are connected to id and
// whether only through relays.
func (s *Host) refreshConn(id peer.ID) {
	if s.stranger(id) {
		s.table.dropStranger(id)
		return
	}
	conns := s.h.Network().ConnsToPeer(id)
	relayed := len(conns) > 0
	for _, c := range conns {
		if !IsRelayAddr(c.RemoteMultiaddr()) {
			relayed = false
		}
	}
	s.table.setConn(id, len(conns) > 0, relayed)
	s.links.refreshLink(id, conns)
}

// sweep applies the liveness deadlines and refreshes connection facts
// (a hole punch adds a direct connection without a connectedness event).
//
// A tick that comes more than a period late means the process stalled;
// the stall is credited to every live peer's silence (PeerTable.stalled).
func (s *Host) sweep(ctx context.Context) {
	every := max(s.cfg.hbInterval/5, 5*time.Millisecond)
	t := s.cfg.clock.NewTicker(every)
	defer t.Stop()
	n := 0
	last := s.cfg.clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		now := s.cfg.clock.Now()
		if late := now.Sub(last) - every; late > every {
			s.table.stalled(late)
		}
		last = now
		if n++; n%5 == 0 {
			for _, p := range s.table.Snapshot() {
				s.refreshConn(p.ID)
			}
		}
		s.table.sweep()
	}
}

func (dc *Discovery) connectBootstrap(ctx context.Context) {
	s := dc.h
	var wg sync.WaitGroup
	for _, ai := range s.cfg.bootstrap {
		if ai.ID == s.h.ID() {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := s.h.Connect(cctx, ai); err != nil {
				s.log.Warn("bootstrap peer unreachable", zap.Stringer("peer", ai.ID), zap.Error(err))
			}
		})
	}
	wg.Wait()
}

// keepBootstrap redials bootstrap peers we lost, while we know fewer
// than two live peers, with a backoff per peer.
func (dc *Discovery) keepBootstrap(ctx context.Context) {
	s := dc.h
	if len(s.cfg.bootstrap) == 0 {
		return
	}
	wait := map[peer.ID]time.Duration{}
	next := map[peer.ID]time.Time{}
	t := s.cfg.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if len(s.table.Live()) >= 2 {
			continue
		}
		now := s.cfg.clock.Now()
		for _, ai := range s.cfg.bootstrap {
			if ai.ID == s.h.ID() || s.h.Network().Connectedness(ai.ID) == network.Connected || now.Before(next[ai.ID]) {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.h.Connect(cctx, ai)
			cancel()
			if err != nil {
				w := min(max(2*wait[ai.ID], time.Second), time.Minute)
				wait[ai.ID], next[ai.ID] = w, now.Add(w)
				s.log.Debug("bootstrap redial failed", zap.Stringer("peer", ai.ID), zap.Error(err))
				continue
			}
			delete(wait, ai.ID)
		}
	}
}

// Close stops the host: loops, streams, DHT and connections. Peers see
// the connections close but get no goodbye.
func (s *Host) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.streams.acts.closeAll()
		var errs []error
		if s.disc != nil {
			errs = append(errs, s.disc.close())
		}
		if s.pub != nil {
			errs = append(errs, s.pub.close())
		}
		if s.h != nil {
			errs = append(errs, s.h.Close())
		}
		s.wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// ID is the host's peer ID.
func (s *Host) ID() peer.ID { return s.h.ID() }

// Key is the host's identity key, for signing what the node answers for
// (receipts).
func (s *Host) Key() crypto.PrivKey { return s.h.Peerstore().PrivKey(s.h.ID()) }

// AddAddrs remembers p's addresses for good (the consensus members'
// advertised addresses).
func (dc *Discovery) AddAddrs(p peer.ID, addrs []ma.Multiaddr) {
	s := dc.h
	s.h.Peerstore().AddAddrs(p, addrs, peerstore.PermanentAddrTTL)
}

// Connected reports whether a connection to p is open.
func (ln *Links) Connected(p peer.ID) bool {
	s := ln.h
	return s.h.Network().Connectedness(p) == network.Connected
}

// OpenStreams is the number of streams open with p, in both directions
// and on every connection.
func (ln *Links) OpenStreams(p peer.ID) int {
	s := ln.h
	n := 0
	for _, c := range s.h.Network().ConnsToPeer(p) {
		n += len(c.GetStreams())
	}
	return n
}

// OpenedAfter reports whether a connection to p that opened after t is
// still open: a peer taken for dead that reconnected since.
func (ln *Links) OpenedAfter(p peer.ID, t time.Time) bool {
	s := ln.h
	for _, c := range s.h.Network().ConnsToPeer(p) {
		if c.Stat().Opened.After(t) {
			return true
		}
	}
	return false
}

// Peers is the peer table.
func (s *Host) Peers() *PeerTable { return s.table }

// HeartbeatInterval is the heartbeat period: load-table rows older than
// a few of it are stale.
func (bt *Beats) HeartbeatInterval() time.Duration {
	s := bt.h
	return s.cfg.hbInterval
}

// Addrs returns the host's full multiaddrs, each ending in /p2p/<id>.
func (s *Host) Addrs() []ma.Multiaddr {
	var out []ma.Multiaddr
	p2p, err := ma.NewComponent("p2p", s.h.ID().String())
	if err != nil {
		return nil
	}
	for _, a := range s.h.Addrs() {
		out = append(out, a.Encapsulate(p2p))
	}
	return out
}

// AddrInfo is the host's ID and addresses.
func (s *Host) AddrInfo() peer.AddrInfo {
	return peer.AddrInfo{ID: s.h.ID(), Addrs: s.h.Addrs()}
}

// Connect dials a peer and hints it to the peer table.
func (s *Host) Connect(ctx context.Context, ai peer.AddrInfo) error {
	s.table.hint(ai)
	if err := s.h.Connect(network.WithAllowLimitedConn(ctx, "connect"), ai); err != nil {
		return fmt.Errorf("connect %s: %w", ai.ID, err)
	}
	return nil
}

// SetStatus sets what the next heartbeats announce. The values are
// checked against the schema now, so a bad one fails here and not in the
// heartbeat loop.
func (bt *Beats) SetStatus(st Status) error {
	s := bt.h
	probe := Heartbeat{NodeID: s.h.ID(), Status: st, Timestamp: s.cfg.clock.Now()}
	if _, err := probe.MarshalBinary(); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	bt.statusMu.Lock()
	bt.status = st
	bt.statusMu.Unlock()
	return nil
}

// Status is what the heartbeats announce.
func (bt *Beats) Status() Status {
	bt.statusMu.Lock()
	defer bt.statusMu.Unlock()
	return bt.status
}

// relayedOnly reports whether every address we advertise is a relay's.
func (ln *Links) relayedOnly() bool {
	s := ln.h
	addrs := s.h.Addrs()
	if len(addrs) == 0 {
		return s.cfg.noListen
	}
	for _, a := range addrs {
		if !IsRelayAddr(a) {
			return false
		}
	}
	return true
}

// Protect keeps the connection manager from trimming connections to p
// while tag is set (TagNeighbour, TagVoter).
func (ln *Links) Protect(p peer.ID, tag string) {
	s := ln.h
	s.h.ConnManager().Protect(p, tag)
}

// Unprotect removes tag from p.
func (ln *Links) Unprotect(p peer.ID, tag string) bool {
	s := ln.h
	return s.h.ConnManager().Unprotect(p, tag)
}

// RTTMatrix returns the measured round trips for routing.
func (ln *Links) RTTMatrix() RTTMatrix {
	s := ln.h
	return rttMatrix(s.h.ID(), s.table.Snapshot())
}

// Rejections returns the rejection counts of peer p.
func (ln *Links) Rejections(p peer.ID) Rejections {
	s := ln.h
	return s.table.Rejections(p)
}

func addrStrings(addrs []ma.Multiaddr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	slices.SortFunc(out, strings.Compare)
	return out
}
