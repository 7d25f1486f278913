package swarm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
)

// DefaultPublicRefresh is how often a member of a public swarm provides
// its rendezvous records again. The Amino DHT keeps a provider record for
// 48 h, but the record carries the member's addresses, and a member behind
// NAT changes them (relay slots come and go), so the record is refreshed
// hourly and at once when the addresses change.
const DefaultPublicRefresh = time.Hour

// publicFindSettled is the longest wait between lookups of the public
// rendezvous while the host has live peers: then Strata's own DHT and the
// gossip find the rest of the swarm, and the public DHT is only a
// fallback that need not be asked often.
const publicFindSettled = 10 * time.Minute

// publicJoinRetry is the wait between lookups until the first member is
// found.
const publicJoinRetry = 250 * time.Millisecond

// DefaultPublicBootstrap are the public Amino DHT's well-known bootstrap
// peers (go-libp2p-kad-dht's list), as multiaddrs.
func DefaultPublicBootstrap() []string {
	out := make([]string, 0, len(dht.DefaultBootstrapPeers))
	for _, a := range dht.DefaultBootstrapPeers {
		out = append(out, a.String())
	}
	return out
}

// publicDisc finds a public swarm's members through a client of the
// Amino DHT (/ipfs/kad/1.0.0), which is not Strata's own: its bootstrap
// peers are the public network's. Members provide the swarm's
// PublicRendezvous and the SwarmIndexKey there; a joiner finds providers
// of the rendezvous, dials them, and from then on Strata's own DHT and
// the heartbeats take over.
type publicDisc struct {
	h     *Host
	dht   *dht.IpfsDHT
	key   cid.Cid
	index cid.Cid

	kick      chan struct{} // re-provide now (our addresses changed)
	start     chan struct{} // closed by startAdvertise
	startOnce sync.Once

	waiting atomic.Int32  // FindSwarm calls waiting
	findNow chan struct{} // a FindSwarm began: look up now

	mu      sync.Mutex
	dialing map[peer.ID]bool
	members map[peer.ID]bool // providers we connected to
	found   chan struct{}    // closed at the first of them
}

func newPublicDisc(h *Host) (*publicDisc, error) {
	// Client mode: a member behind NAT cannot serve the public DHT, and a
	// public one need not carry its load; it only provides and looks up.
	d, err := dht.New(h.h,
		dht.Mode(dht.ModeClient),
		dht.BootstrapPeers(h.cfg.publicBoot...),
	)
	if err != nil {
		return nil, fmt.Errorf("public dht: %w", err)
	}
	fp := h.cfg.fingerprint
	if fp == "" {
		fp = h.cfg.model
	}
	return &publicDisc{
		h:       h,
		dht:     d,
		key:     PublicRendezvous(h.cfg.swarmName, fp),
		index:   SwarmIndexKey(),
		kick:    make(chan struct{}, 1),
		findNow: make(chan struct{}, 1),
		start:   make(chan struct{}),
		dialing: map[peer.ID]bool{},
		members: map[peer.ID]bool{},
		found:   make(chan struct{}),
	}, nil
}

func (d *publicDisc) close() error { return d.dht.Close() }

func (d *publicDisc) readvertise() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// advertise provides the rendezvous and index keys once AdvertisePublic
// was called, retrying failures with backoff and refreshing after
// success.
func (d *publicDisc) advertise(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-d.start:
	}
	c := d.h.cfg
	wait := c.advertiseMin
	fails := 0
	for {
		var next time.Duration
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := d.dht.Provide(pctx, d.key, true)
		if err == nil {
			err = d.dht.Provide(pctx, d.index, true)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fails++
			log := d.h.log.Debug
			if fails == 5 { // once: joiners by name cannot find this member
				log = d.h.log.Warn
			}
			log("public provide failed", zap.Stringer("key", d.key), zap.Int("tries", fails), zap.Duration("retry", wait), zap.Error(err))
			next = wait
			wait = min(2*wait, c.advertiseMax)
		} else {
			d.h.log.Info("provided the public rendezvous", zap.String("swarm", c.swarmName), zap.Stringer("key", d.key))
			wait, fails = c.advertiseMin, 0
			next = c.publicRefresh
		}
		next += time.Duration(rand.Int64N(int64(next/10) + 1))
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		case <-time.After(next):
		}
	}
}

// find looks the rendezvous up and dials the providers: every 250 ms
// while FindSwarm waits for a first member, then backing off from the
// find interval to a minute while the host has no live peer (a lone
// founder) and to publicFindSettled once it has.
func (d *publicDisc) find(ctx context.Context) {
	base := d.h.cfg.findInterval
	wait := base
	for {
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n := d.findOnce(fctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case d.waiting.Load() > 0 && d.foundNone():
			// Joining: the first lookups fail at once while the DHT
			// client dials its bootstrap peers, and the join waits on
			// them.
			wait = min(base, publicJoinRetry)
		case n > 0:
			wait = base
		case len(d.h.table.Live()) == 0:
			wait = min(2*wait, max(base, time.Minute))
		default:
			wait = min(2*wait, publicFindSettled)
		}
		select {
		case <-ctx.Done():
			return
		case <-d.findNow:
		case <-time.After(wait):
		}
	}
}

// findOnce reports how many providers it found that we were not
// connected to.
func (d *publicDisc) findOnce(ctx context.Context) int {
	fresh := 0
	for ai := range d.dht.FindProvidersAsync(ctx, d.key, 256) {
		if ai.ID == d.h.h.ID() || ai.ID == "" {
			continue
		}
		d.h.table.hint(ai)
		if d.h.h.Network().Connectedness(ai.ID) == network.Connected {
			d.connected(ai.ID)
			continue
		}
		if len(ai.Addrs) == 0 {
			continue // a provider record with no address: nothing to dial
		}
		fresh++
		d.dial(ai)
	}
	return fresh
}

func (d *publicDisc) foundNone() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.members) == 0
}

func (d *publicDisc) connected(id peer.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.members) == 0 {
		close(d.found)
	}
	d.members[id] = true
}

func (d *publicDisc) dial(ai peer.AddrInfo) {
	d.mu.Lock()
	if d.dialing[ai.ID] {
		d.mu.Unlock()
		return
	}
	d.dialing[ai.ID] = true
	d.mu.Unlock()
	d.h.goLoop(func(ctx context.Context) {
		defer func() {
			d.mu.Lock()
			delete(d.dialing, ai.ID)
			d.mu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := d.h.h.Connect(network.WithAllowLimitedConn(ctx, "public rendezvous"), ai); err != nil {
			// Likely a member that left: its record outlives it by up to
			// two days.
			d.h.log.Debug("public rendezvous: dial failed", zap.Stringer("peer", ai.ID), zap.Error(err))
			return
		}
		d.connected(ai.ID)
	})
}

// members lists the providers we connected to that are still connected,
// with the addresses the peerstore holds.
func (d *publicDisc) connectedMembers() []peer.AddrInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []peer.AddrInfo
	for id := range d.members {
		if d.h.h.Network().Connectedness(id) == network.Connected {
			out = append(out, d.h.h.Peerstore().PeerInfo(id))
		}
	}
	return out
}

// PublicDiscovery reports whether the host finds its swarm through the
// public DHT (WithPublicDHT).
func (dc *Discovery) PublicDiscovery() bool {
	s := dc.h
	return s.pub != nil
}

// PublicRendezvousKey is the key the host provides and looks up on the
// public DHT (cid.Undef without WithPublicDHT).
func (dc *Discovery) PublicRendezvousKey() cid.Cid {
	s := dc.h
	if s.pub == nil {
		return cid.Undef
	}
	return s.pub.key
}

// AdvertisePublic starts providing the swarm's public rendezvous and the
// swarm index on the public DHT, and keeps them fresh until Close. A node
// calls it once it is a member, so that a joiner finds members rather
// than other joiners. It does nothing without WithPublicDHT.
func (dc *Discovery) AdvertisePublic() {
	s := dc.h
	if s.pub != nil {
		s.pub.startOnce.Do(func() { close(s.pub.start) })
	}
}

// FindSwarm waits until the public rendezvous has led the host to at
// least one member of its swarm it is connected to, and returns those
// connected so far: the peers a joiner by name joins through, as
// through --bootstrap. Without WithPublicDHT it fails with ErrConfig.
func (dc *Discovery) FindSwarm(ctx context.Context) ([]peer.AddrInfo, error) {
	s := dc.h
	if s.pub == nil {
		return nil, fmt.Errorf("%w: no public DHT to find the swarm on (WithPublicDHT)", ErrConfig)
	}
	s.pub.waiting.Add(1)
	defer s.pub.waiting.Add(-1)
	select {
	case s.pub.findNow <- struct{}{}:
	default:
	}
	for {
		s.pub.mu.Lock()
		found := s.pub.found
		s.pub.mu.Unlock()
		select {
		case <-found:
		case <-ctx.Done():
			return nil, fmt.Errorf("no member of swarm %q found on the public DHT (key %s): %w", s.cfg.swarmName, s.pub.key, ctx.Err())
		case <-s.ctx.Done():
			return nil, ErrClosed
		}
		if ms := s.pub.connectedMembers(); len(ms) > 0 {
			return ms, nil
		}
		// Found ones are gone again: look for the next.
		s.pub.mu.Lock()
		clear(s.pub.members)
		s.pub.found = make(chan struct{})
		s.pub.mu.Unlock()
	}
}
