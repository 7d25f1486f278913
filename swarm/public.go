package swarm

import (
	"context"
	"fmt"
	"maps"
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
// of the rendezvous, dials them, checks each one's founder-signed charter
// (charter.go), and from then on Strata's own DHT and the heartbeats take
// over.
type publicDisc struct {
	h     *Host
	dht   *dht.IpfsDHT
	fp    string // the model fingerprint the key and charter are for
	key   cid.Cid
	index cid.Cid

	charter atomic.Pointer[Charter] // this host's swarm's, once known
	pin     peer.ID                 // the founder to join; "": any one, if only one
	pinFrom string                  // why, for errors

	provided  chan struct{} // closed at the first successful provide
	kick      chan struct{} // re-provide now (our addresses changed)
	start     chan struct{} // closed by startAdvertise
	startOnce sync.Once

	waiting atomic.Int32  // FindSwarm calls waiting
	findNow chan struct{} // a FindSwarm began: look up now

	mu       sync.Mutex
	members  map[peer.ID]peer.ID         // providers whose charter verified: their founder
	charters map[peer.ID]*Charter        // by founder
	rejected map[peer.ID]error           // providers without a valid charter, the latest reason
	rivals   map[peer.ID]peer.ID         // providers of other founders than ours or the pinned one
	started  int                         // lookups begun
	rounds   int                         // lookups completed
	settled  map[peer.ID][]peer.AddrInfo // byFounder when the latest lookup completed
	changed  chan struct{}               // closed and replaced on every change of the above
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
	pd := &publicDisc{
		h:        h,
		dht:      d,
		fp:       fp,
		key:      PublicRendezvous(h.cfg.swarmName, fp),
		index:    SwarmIndexKey(),
		kick:     make(chan struct{}, 1),
		provided: make(chan struct{}),
		findNow:  make(chan struct{}, 1),
		start:    make(chan struct{}),
		members:  map[peer.ID]peer.ID{},
		charters: map[peer.ID]*Charter{},
		rejected: map[peer.ID]error{},
		rivals:   map[peer.ID]peer.ID{},
		changed:  make(chan struct{}),
	}
	if err := pd.setupCharter(); err != nil {
		d.Close()
		return nil, err
	}
	h.h.SetStreamHandler(ProtocolCharter, pd.serveCharter)
	return pd, nil
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
	// A member that joined through --bootstrap learns its swarm's charter
	// from its peers first: joiners by name skip a provider without one.
	for wait := c.advertiseMin; !d.learnCharter(ctx); wait = min(2*wait, c.advertiseMax) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
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
			select {
			case <-d.provided:
			default:
				close(d.provided)
			}
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

// publicDial bounds a dial to a provider: a stale record (of a member
// that left) can name addresses that never answer, and a joiner without a
// pinned founder waits for every provider of a lookup.
const publicDial = 10 * time.Second

// findOnce looks the rendezvous up, dials the providers and asks each for
// its charter, and returns when all have answered (or failed), reporting
// how many providers it found that we were not connected to.
func (d *publicDisc) findOnce(ctx context.Context) int {
	d.mu.Lock()
	d.started++
	d.mu.Unlock()
	fresh := 0
	var wg sync.WaitGroup
	for ai := range d.dht.FindProvidersAsync(ctx, d.key, 256) {
		if ai.ID == d.h.h.ID() || ai.ID == "" {
			continue
		}
		d.h.table.hint(ai)
		connected := d.h.h.Network().Connectedness(ai.ID) == network.Connected
		if (connected && d.known(ai.ID)) || d.rival(ai.ID) {
			continue
		}
		if !connected {
			if len(ai.Addrs) == 0 {
				continue // a provider record with no address: nothing to dial
			}
			fresh++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.probe(ctx, ai, connected)
		}()
	}
	wg.Wait()
	d.mu.Lock()
	d.rounds++
	d.settled = d.byFounder()
	d.notify()
	d.mu.Unlock()
	return fresh
}

// known: p's charter verified before.
func (d *publicDisc) known(p peer.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.members[p]
	return ok
}

// rival: p is a member of another founder's swarm than ours.
func (d *publicDisc) rival(p peer.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.rivals[p]
	return ok
}

// probe dials a provider (unless connected) and checks its charter.
func (d *publicDisc) probe(ctx context.Context, ai peer.AddrInfo, connected bool) {
	if !connected {
		dctx, cancel := context.WithTimeout(ctx, publicDial)
		err := d.h.h.Connect(network.WithAllowLimitedConn(dctx, "public rendezvous"), ai)
		cancel()
		if err != nil {
			// Likely a member that left: its record outlives it by up to
			// two days.
			d.h.log.Debug("public rendezvous: dial failed", zap.Stringer("peer", ai.ID), zap.Error(err))
			return
		}
	}
	ch, err := FetchCharter(ctx, d.h.h, ai.ID, d.h.cfg.swarmName, d.fp)
	if err == nil {
		if want := d.founder(); want != "" && ch.Founder != want {
			// A rival swarm's member: no connection to it, so that the two
			// swarms' gossip, which shares the name's topics, stays apart.
			d.h.log.Debug("public rendezvous: a member of a rival swarm", zap.Stringer("peer", ai.ID), zap.Stringer("founder", ch.Founder))
			if !connected {
				_ = d.h.h.Network().ClosePeer(ai.ID)
			}
			d.mu.Lock()
			d.rivals[ai.ID] = ch.Founder // named in errors, never joined through
			d.notify()
			d.mu.Unlock()
			return
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.h.log.Debug("public rendezvous: provider without a valid charter", zap.Stringer("peer", ai.ID), zap.Error(err))
		d.rejected[ai.ID] = err
		return
	}
	d.members[ai.ID] = ch.Founder
	if d.charters[ch.Founder] == nil {
		d.charters[ch.Founder] = ch
	}
	delete(d.rejected, ai.ID)
	d.notify()
}

// founder is the founder whose members this host joins: its own swarm's
// once it has a charter, else the pinned one ("": none yet).
func (d *publicDisc) founder() peer.ID {
	if c := d.charter.Load(); c != nil {
		return c.Founder
	}
	return d.pin
}

// notify wakes FindSwarm; d.mu is held.
func (d *publicDisc) notify() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *publicDisc) foundNone() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.members) == 0
}

// byFounder groups the members we are still connected to by founder,
// with the addresses the peerstore holds; d.mu is held.
func (d *publicDisc) byFounder() map[peer.ID][]peer.AddrInfo {
	out := map[peer.ID][]peer.AddrInfo{}
	for id, f := range d.members {
		if d.h.h.Network().Connectedness(id) == network.Connected {
			out[f] = append(out[f], d.h.h.Peerstore().PeerInfo(id))
		} else {
			delete(d.members, id) // gone: asked again when found again
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

// PublicProvided is closed once the host has provided its public
// rendezvous the first time (nil without WithPublicDHT).
func (dc *Discovery) PublicProvided() <-chan struct{} {
	s := dc.h
	if s.pub == nil {
		return nil
	}
	return s.pub.provided
}

// FindSwarm waits until the public rendezvous has led the host to
// members of its swarm it is connected to whose founder-signed charter
// verified, and returns those connected so far: the peers a joiner by
// name joins through, as through --bootstrap. With a pinned founder
// (WithPinnedFounder, or the data dir's record of the founder first
// joined) it returns as soon as members of that founder answer, and
// never members of another; at its deadline it fails with
// ErrFounderMismatch when only others answered. Without one it waits
// until every provider a whole lookup found has answered or failed (a
// dial is bounded at publicDial), so that a rival's members cannot go
// unseen because they answered later, and fails with ErrRivalFounders, listing them, when members of more
// than one founder answered; otherwise it records the founder in the data
// dir (trust on first use). Without WithPublicDHT it fails with
// ErrConfig.
func (dc *Discovery) FindSwarm(ctx context.Context) ([]peer.AddrInfo, error) {
	s := dc.h
	d := s.pub
	if d == nil {
		return nil, fmt.Errorf("%w: no public DHT to find the swarm on (WithPublicDHT)", ErrConfig)
	}
	d.waiting.Add(1)
	defer d.waiting.Add(-1)
	select {
	case d.findNow <- struct{}{}:
	default:
	}
	d.mu.Lock()
	// A decision needs a lookup begun after this call: rounds run one at
	// a time, so once more have ended than had begun by now, one has.
	startRound := d.started
	d.mu.Unlock()
	for {
		d.mu.Lock()
		changed, rounds := d.changed, d.rounds
		by := d.byFounder()
		if d.pin == "" {
			// Decided on whole lookups only, so that a rival's members
			// cannot go unseen because they answered later.
			by = d.settled
		}
		var ch *Charter
		switch {
		case d.pin != "":
			if ms := by[d.pin]; len(ms) > 0 {
				ch = d.charters[d.pin]
			}
		case len(by) > 1 && rounds > startRound:
			d.mu.Unlock()
			return nil, fmt.Errorf("%w: members of %d founders answer for swarm %q: %s; "+
				"pin the one to join with --swarm-founder PEERID (docs/internet.md)", ErrRivalFounders, len(by), s.cfg.swarmName, founderList(by))
		case len(by) == 1 && rounds > startRound:
			for f := range by {
				ch = d.charters[f]
			}
		}
		d.mu.Unlock()
		if ch != nil {
			d.adopt(ch)
			return by[ch.Founder], nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, d.notFound(by, ctx.Err())
		case <-s.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// notFound is FindSwarm's error at its deadline.
func (d *publicDisc) notFound(by map[peer.ID][]peer.AddrInfo, err error) error {
	name := d.h.cfg.swarmName
	d.mu.Lock()
	by = maps.Clone(by) // may be d.settled
	for p, f := range d.rivals {
		by[f] = append(by[f], peer.AddrInfo{ID: p})
	}
	d.mu.Unlock()
	if d.pin != "" && len(by) > 0 {
		return fmt.Errorf("%w: no member of swarm %q founded by %s (%s) answered; "+
			"members of a rival swarm did, founded by %s: %w", ErrFounderMismatch, name, d.pin, d.pinFrom, founderList(by), err)
	}
	d.mu.Lock()
	bad := len(d.rejected)
	d.mu.Unlock()
	if bad > 0 {
		return fmt.Errorf("no member of swarm %q found on the public DHT (key %s; %d providers served no valid charter): %w", name, d.key, bad, err)
	}
	return fmt.Errorf("no member of swarm %q found on the public DHT (key %s): %w", name, d.key, err)
}
