package swarm

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	circuitproto "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/proto"
)

// NAT traversal for home GPUs uses go-libp2p's own protocols:
//
//   - AutoNAT (v1 service for others, client by default) finds out whether
//     the host is reachable, unless WithReachability forces the answer.
//   - Circuit relay v2: every host can dial through relays; a publicly
//     reachable host serves as a relay unless WithRelayService(false).
//     Strata relays carry circuits without the stock 128 KiB / 2 min
//     limits, since activations must flow through them, but at a byte
//     rate cap for all circuits together (WithRelayRate), so that the
//     relay's own hops keep their speed.
//   - DCUtR hole punching upgrades a relayed connection to a direct one
//     where the NATs allow.
//
// An unreachable host keeps reservations on relays itself (relayKeeper)
// instead of using go-libp2p's autorelay: autorelay advertises only
// public relay addresses, so it cannot work on a LAN or on loopback, and
// it waits for several candidates before it reserves.

// relayCandidates is how many relays an unreachable host reserves on.
const relayCandidates = 2

func natOptions(c *config, s *Host) []libp2p.Option {
	opts := []libp2p.Option{libp2p.EnableRelay(), libp2p.EnableNATService()}
	if c.relay {
		s.relayMeter = newRelayMeter(s.ctx, c.relayRate)
		ropts := []relayv2.Option{relayv2.WithACL(memberACL{s}), relayv2.WithMetricsTracer(s.relayMeter)}
		if !c.relayLimit {
			res := relayv2.DefaultResources()
			res.Limit = nil
			res.BufferSize = 64 << 10
			res.MaxCircuits = 64
			ropts = append(ropts, relayv2.WithResources(res))
		}
		opts = append(opts, libp2p.EnableRelayService(ropts...))
	}
	if c.holePunch {
		opts = append(opts, libp2p.EnableHolePunching(holepunch.WithTracer(s.nat)))
	}
	if c.portMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	switch c.reachability() {
	case ReachabilityPublic:
		opts = append(opts, libp2p.ForceReachabilityPublic())
	case ReachabilityPrivate:
		opts = append(opts, libp2p.ForceReachabilityPrivate())
	}
	return opts
}

// reachability is the configured reachability; a host that listens
// nowhere is private whatever AutoNAT would say.
func (c *config) reachability() Reachability {
	if c.noListen {
		return ReachabilityPrivate
	}
	return c.reach
}

// IsRelayAddr reports whether a is a circuit relay address.
func IsRelayAddr(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

type reservation struct {
	relay   peer.ID
	expires time.Time
}

// relayKeeper holds circuit v2 reservations for an unreachable host and
// publishes the matching /p2p-circuit addresses through the host's
// address factory.
type relayKeeper struct {
	h       *Host
	private atomic.Bool // reachability is private: reservations wanted

	mu      sync.Mutex
	rsv     map[peer.ID]reservation
	backoff map[peer.ID]time.Time
	fails   map[peer.ID]int // refusals in a row, for the backoff
}

func newRelayKeeper(h *Host) *relayKeeper {
	k := &relayKeeper{h: h, rsv: map[peer.ID]reservation{}, backoff: map[peer.ID]time.Time{}, fails: map[peer.ID]int{}}
	k.private.Store(h.cfg.reachability() == ReachabilityPrivate)
	return k
}

// addrs returns the circuit addresses of the current reservations.
func (k *relayKeeper) addrs() []ma.Multiaddr {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	ids := make([]peer.ID, 0, len(k.rsv))
	for id := range k.rsv {
		ids = append(ids, id)
	}
	k.mu.Unlock()
	slices.Sort(ids)
	var out []ma.Multiaddr
	for _, id := range ids {
		circuit, err := ma.NewMultiaddr("/p2p/" + id.String() + "/p2p-circuit")
		if err != nil {
			continue
		}
		for _, a := range k.relayAddrs(id) {
			out = append(out, a.Encapsulate(circuit))
		}
	}
	return out
}

// relayAddrs are the direct addresses we reach relay id on: those of our
// live connections first, then the peerstore's.
func (k *relayKeeper) relayAddrs(id peer.ID) []ma.Multiaddr {
	var out []ma.Multiaddr
	add := func(a ma.Multiaddr) {
		if a != nil && !IsRelayAddr(a) && !slices.ContainsFunc(out, a.Equal) {
			out = append(out, a)
		}
	}
	for _, c := range k.h.h.Network().ConnsToPeer(id) {
		add(c.RemoteMultiaddr())
	}
	for _, a := range k.h.h.Peerstore().Addrs(id) {
		add(a)
	}
	if len(out) > 4 {
		out = out[:4]
	}
	return out
}

func (k *relayKeeper) run(ctx context.Context) {
	every := 500 * time.Millisecond
	for {
		k.h.links.logNAT()
		if k.private.Load() {
			if k.tend(ctx) {
				every = 5 * time.Second
			} else {
				every = min(2*every, 5*time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// tend drops reservations whose relay we lost or that near expiry, and
// reserves on new candidates until it holds relayCandidates. It reports
// whether it holds any.
func (k *relayKeeper) tend(ctx context.Context) bool {
	now := time.Now()
	k.mu.Lock()
	for id, r := range k.rsv {
		if k.h.h.Network().Connectedness(id) != network.Connected || now.After(r.expires.Add(-time.Minute)) {
			delete(k.rsv, id)
			k.h.h.ConnManager().Unprotect(id, proto.TagRelay)
		}
	}
	held := len(k.rsv)
	k.mu.Unlock()

	changed := false
	for _, ai := range k.candidates() {
		if held >= relayCandidates {
			break
		}
		k.mu.Lock()
		_, have := k.rsv[ai.ID]
		until := k.backoff[ai.ID]
		k.mu.Unlock()
		if have || now.Before(until) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := client.Reserve(rctx, k.h.h, ai)
		cancel()
		if err != nil {
			k.h.log.Debug("relay reservation failed", zap.Stringer("relay", ai.ID), zap.Error(err))
			// A relay refuses a member it has not heard a heartbeat
			// from yet (memberACL), so the first retries come soon.
			k.mu.Lock()
			k.fails[ai.ID]++
			k.backoff[ai.ID] = now.Add(min(time.Second<<min(k.fails[ai.ID]-1, 5), 30*time.Second))
			k.mu.Unlock()
			continue
		}
		k.mu.Lock()
		k.rsv[ai.ID] = reservation{relay: ai.ID, expires: r.Expiration}
		delete(k.backoff, ai.ID)
		delete(k.fails, ai.ID)
		k.mu.Unlock()
		k.h.h.ConnManager().Protect(ai.ID, proto.TagRelay)
		k.h.log.Info("relay reservation", zap.Stringer("relay", ai.ID), zap.Time("expires", r.Expiration))
		// The relay took our reservation, so it now knows us as a member
		// and opens our circuits, which it refused until now (memberACL):
		// dials that failed through it say nothing of now.
		k.h.clearDialBackoffs()
		held++
		changed = true
	}
	if changed {
		k.h.addrsChanged()
	}
	return held > 0
}

// candidates: static relays if configured, else bootstrap peers, then
// connected direct peers that speak the relay hop protocol.
func (k *relayKeeper) candidates() []peer.AddrInfo {
	if len(k.h.cfg.staticRel) > 0 {
		return k.h.cfg.staticRel
	}
	out := slices.Clone(k.h.cfg.bootstrap)
	for _, p := range k.h.table.Snapshot() {
		if !p.Connected || p.Relayed || slices.ContainsFunc(out, func(ai peer.AddrInfo) bool { return ai.ID == p.ID }) {
			continue
		}
		if ok, _ := k.h.h.Peerstore().SupportsProtocols(p.ID, circuitproto.ProtoIDv2Hop); len(ok) > 0 {
			out = append(out, peer.AddrInfo{ID: p.ID})
		}
	}
	return out
}

// held returns the relays holding a reservation for us, sorted.
func (k *relayKeeper) held() []peer.ID {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]peer.ID, 0, len(k.rsv))
	for id := range k.rsv {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// memberACL lets a relay serve only members of its swarm: peers whose
// signed heartbeats on the swarm's topic it has accepted and that are
// not dead. A stranger can neither reserve a slot nor open a circuit,
// nor be reached through one. Under a swarm key, only key holders get
// a connection at all, so members are key holders.
type memberACL struct{ h *Host }

func (a memberACL) member(p peer.ID) bool {
	if a.h.table == nil { // still starting
		return false
	}
	row, ok := a.h.table.Get(p)
	return ok && row.Heartbeat != nil && row.Liveness != Dead
}

// AllowReserve implements relayv2.ACLFilter.
func (a memberACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	ok := a.member(p)
	if !ok {
		a.h.log.Debug("relay: reservation refused to a non-member", zap.Stringer("peer", p))
	}
	return ok
}

// AllowConnect implements relayv2.ACLFilter.
func (a memberACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dest peer.ID) bool {
	ok := a.member(src) && a.member(dest)
	if !ok {
		a.h.log.Debug("relay: circuit refused", zap.Stringer("src", src), zap.Stringer("dest", dest))
	}
	return ok
}

// Dial backoff. go-libp2p puts every address of a peer whose dial failed
// in backoff (5 s and growing) and then fails each dial to it at once
// with "dial backoff". A member behind NAT is dialled through a relay,
// which refuses circuits from or to a peer it has not heard a heartbeat
// of yet (memberACL): a node that has just (re)joined dials everyone
// through the relay, is refused, and would then find every peer in
// backoff for seconds after the relay has learnt it. So a dial failure
// is forgotten as soon as there is news that the peer can be reached:
// its heartbeat (it is alive and a member) or a relay's reservation for
// us (the relay knows us now).

// ClearDialBackoff forgets the dial backoff of p, unless we are
// connected to it (then no dial is needed).
func (s *Host) ClearDialBackoff(p peer.ID) {
	if s.h.Network().Connectedness(p) == network.Connected {
		return
	}
	if sw, ok := s.h.Network().(*lpswarm.Swarm); ok {
		sw.Backoff().Clear(p)
	}
}

// clearDialBackoffs forgets the dial backoff of every peer in the table
// that we are not connected to.
func (s *Host) clearDialBackoffs() {
	if s.table == nil {
		return
	}
	for _, p := range s.table.Snapshot() {
		s.ClearDialBackoff(p.ID)
	}
}

// isDialFailure reports whether err is a failure to connect at all (every
// address failed, is in backoff, or none is known), not one on a
// connection that was made.
func isDialFailure(err error) bool {
	var de *lpswarm.DialError
	return errors.As(err, &de) || errors.Is(err, lpswarm.ErrDialBackoff) || errors.Is(err, lpswarm.ErrNoAddresses) ||
		errors.Is(err, lpswarm.ErrNoGoodAddresses) || errors.Is(err, lpswarm.ErrAllDialsFailed)
}
