package swarm

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"
)

// Reachability diagnosis: what AutoNAT says of this host, how each link
// runs (direct, hole-punched, relayed), which relays hold a slot for us,
// and, for a host nobody can dial, what would fix it.

// Link is how this host is connected to a peer.
type Link string

// The link kinds.
const (
	LinkNone Link = ""
	// LinkDirect: a connection that no relay carries, dialled by either
	// side.
	LinkDirect Link = "direct"
	// LinkHolePunched: a direct connection that DCUtR hole punching
	// made, both sides behind NAT.
	LinkHolePunched Link = "hole-punched"
	// LinkRelayed: every connection goes through a circuit relay.
	LinkRelayed Link = "relayed"
)

// Punch is the latest DCUtR outcome with one peer.
type Punch struct {
	At      time.Time     // when it ended
	Took    time.Duration // the hole punch itself, from the relayed stream's start
	OK      bool
	Err     string
	Retries int // attempts that failed before this outcome
}

// NATStatus is the host's reachability as far as it can tell.
type NATStatus struct {
	// Reachability is AutoNAT's verdict: public, private or unknown.
	Reachability string
	// Forced: the verdict was set by configuration (WithReachability),
	// not found out by AutoNAT.
	Forced bool
	// Relays are the relays holding a reservation for us.
	Relays []peer.ID
	// RelayService: this host relays for other members.
	RelayService bool
	// Relaying is what the host carried for others and at what cap.
	Relaying RelayStats
	// HolePunching: DCUtR is on.
	HolePunching bool
	// TCPOnly: the host runs no QUIC (a swarm key is set: go-libp2p has
	// no QUIC under a pre-shared key), so hole punches try TCP alone,
	// which fewer NATs let through than UDP.
	TCPOnly bool
	// Unreachable: no peer can open a connection to this host (private
	// and no relay slot); it only dials out.
	Unreachable bool
	// Advice says in a sentence what the status means and, when the host
	// is unreachable, what would fix it.
	Advice string
}

// Summary is the status in one line, for logs.
func (s NATStatus) Summary() string {
	var b strings.Builder
	b.WriteString(s.Reachability)
	if s.Forced {
		b.WriteString(" (configured)")
	}
	if len(s.Relays) > 0 {
		ids := make([]string, len(s.Relays))
		for i, r := range s.Relays {
			ids[i] = r.ShortString()
		}
		fmt.Fprintf(&b, ", relays %s", strings.Join(ids, " "))
	}
	if s.Unreachable {
		b.WriteString(", UNREACHABLE")
	}
	return b.String()
}

// natState tracks what NATStatus reports: the reachability events and
// the hole punch tracer's outcomes.
type natState struct {
	log     *zap.Logger
	mu      sync.Mutex
	reach   network.Reachability
	punches map[peer.ID]Punch
	retries map[peer.ID]int
	logged  string // the last NATStatus summary logged
}

func newNATState(c *config, log *zap.Logger) *natState {
	st := &natState{log: log, punches: map[peer.ID]Punch{}, retries: map[peer.ID]int{}}
	switch c.reachability() {
	case ReachabilityPublic:
		st.reach = network.ReachabilityPublic
	case ReachabilityPrivate:
		st.reach = network.ReachabilityPrivate
	}
	return st
}

func (st *natState) setReachability(r network.Reachability) {
	st.mu.Lock()
	st.reach = r
	st.mu.Unlock()
}

// Trace receives go-libp2p's hole punch events (holepunch.EventTracer).
// Both sides trace: the one that got the relayed connection starts the
// punch, the other answers it.
func (st *natState) Trace(evt *holepunch.Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch e := evt.Evt.(type) {
	case *holepunch.EndHolePunchEvt:
		p := Punch{At: time.Unix(0, evt.Timestamp), Took: e.EllapsedTime, OK: e.Success, Err: e.Error,
			Retries: st.retries[evt.Remote]}
		if e.Success {
			delete(st.retries, evt.Remote)
		} else {
			st.retries[evt.Remote]++
		}
		st.punches[evt.Remote] = p
		st.log.Info("hole punch", zap.Stringer("peer", evt.Remote), zap.Bool("ok", e.Success),
			zap.Duration("took", e.EllapsedTime), zap.String("error", e.Error))
	case *holepunch.DirectDialEvt:
		// A direct dial to the peer worked before any punch was needed:
		// whatever link we have now is not the punch's.
		if e.Success {
			delete(st.punches, evt.Remote)
		}
	}
}

// punched reports whether the latest hole punch with p succeeded.
func (st *natState) punched(p peer.ID) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.punches[p].OK
}

// forget drops p's punch outcome once no direct connection is left,
// so that a later direct dial is not taken for a punch.
func (st *natState) forget(p peer.ID) {
	st.mu.Lock()
	delete(st.punches, p)
	st.mu.Unlock()
}

// Punches returns the latest hole punch outcome per peer.
func (ln *Links) Punches() map[peer.ID]Punch {
	s := ln.h
	s.nat.mu.Lock()
	defer s.nat.mu.Unlock()
	out := make(map[peer.ID]Punch, len(s.nat.punches))
	for id, p := range s.nat.punches {
		out[id] = p
	}
	return out
}

// linkOf classifies the connections held to a peer.
func linkOf(conns []network.Conn, punched bool) Link {
	if len(conns) == 0 {
		return LinkNone
	}
	for _, c := range conns {
		if !IsRelayAddr(c.RemoteMultiaddr()) {
			if punched {
				return LinkHolePunched
			}
			return LinkDirect
		}
	}
	return LinkRelayed
}

// setLink records how we are connected to id; the row must exist.
func (t *PeerTable) setLink(id peer.ID, l Link) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.peers[id]; e != nil {
		e.Link = l
	}
}

// refreshLink recomputes the link kind of id from its connections.
func (ln *Links) refreshLink(id peer.ID, conns []network.Conn) {
	s := ln.h
	l := linkOf(conns, s.nat.punched(id))
	if l != LinkDirect && l != LinkHolePunched {
		s.nat.forget(id)
	}
	s.table.setLink(id, l)
}

// NAT returns the host's reachability diagnosis.
func (ln *Links) NAT() NATStatus {
	s := ln.h
	s.nat.mu.Lock()
	reach := s.nat.reach
	s.nat.mu.Unlock()
	st := NATStatus{
		Reachability: reachabilityName(reach),
		Forced:       s.cfg.reachability() != ReachabilityAuto,
		Relays:       s.relays.held(),
		RelayService: s.cfg.relay && reach == network.ReachabilityPublic,
		HolePunching: s.cfg.holePunch,
		TCPOnly:      s.cfg.psk != nil,
		Relaying:     ln.RelayStats(),
	}
	st.Unreachable = reach == network.ReachabilityPrivate && len(st.Relays) == 0
	st.Advice = advice(st, ln.listenPorts())
	return st
}

func reachabilityName(r network.Reachability) string {
	switch r {
	case network.ReachabilityPublic:
		return "public"
	case network.ReachabilityPrivate:
		return "private"
	}
	return "unknown"
}

// advice explains a status in plain words.
func advice(st NATStatus, ports string) string {
	fix := "forward " + ports + " on the router to this machine, or enable UPnP on the router and start the node with --nat-portmap, " +
		"or make sure the swarm has a public member that relays (reachability public, relaying on)"
	switch {
	case st.Reachability == "public":
		if st.RelayService {
			return "reachable directly; relays for members behind NAT"
		}
		return "reachable directly"
	case st.Unreachable:
		return "UNREACHABLE: behind NAT and no relay holds a slot for this node, so no peer can connect to it; it only dials out. To fix: " + fix
	case st.Reachability == "private":
		s := "behind NAT: peers reach this node through its relays"
		if st.HolePunching {
			s += "; links to peers behind endpoint-independent NATs upgrade to direct by hole punching, behind a symmetric NAT they stay relayed"
			if st.TCPOnly {
				s += "; under a swarm key hole punching has TCP only (go-libp2p runs no QUIC with a pre-shared key), which many NATs do not let through"
			}
		}
		return s + ". For direct links from everyone: " + fix
	}
	return "reachability not known yet (AutoNAT waits for peers to dial back)"
}

// listenPorts names the TCP and UDP ports the host listens on, for
// advice on port forwarding.
func (ln *Links) listenPorts() string {
	s := ln.h
	var ports []string
	for _, a := range s.h.Network().ListenAddresses() {
		for _, p := range []int{ma.P_TCP, ma.P_UDP} {
			if v, err := a.ValueForProtocol(p); err == nil {
				name := "TCP"
				if p == ma.P_UDP {
					name = "UDP"
				}
				if port := name + " port " + v; !slices.Contains(ports, port) {
					ports = append(ports, port)
				}
			}
		}
	}
	if len(ports) == 0 {
		return "the listen port (the node listens nowhere: give it --listen)"
	}
	return strings.Join(ports, " and ")
}

// logNAT logs the status when its summary changed since the last log:
// at start and at every change.
func (ln *Links) logNAT() {
	s := ln.h
	st := ln.NAT()
	sum := st.Summary()
	s.nat.mu.Lock()
	changed := sum != s.nat.logged
	s.nat.logged = sum
	s.nat.mu.Unlock()
	if !changed {
		return
	}
	log := s.log.Info
	if st.Unreachable {
		log = s.log.Warn
	}
	log("reachability", zap.String("status", sum), zap.String("advice", st.Advice))
}
