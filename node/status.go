package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// announcer is what the node knows and says of itself: the committed map
// it routes on (its replica's, a newer one the leader announced, or the
// static map), the layers it holds, its phase, and the status its
// heartbeats carry, refreshed on every change and every interval.
type announcer struct {
	self   peer.ID
	layers int // the model's
	hw     layers.Hardware
	region string
	// engine is the heartbeats' engine label: "" for the pure-Go engine.
	engine string
	static *layers.LayerMap
	cons   *atomic.Pointer[consensus.Consensus]
	sched  *scheduler
	host   *swarm.Host
	clock  clockwork.Clock
	every  time.Duration
	log    *zap.Logger
	// changed tells the entry's queue that what routing reads may have
	// changed (this node's status, the map); nil until wired.
	changed func()
	// queue is the entry queue's length and oldest wait (the load
	// table's fields); nil until wired.
	queue func() (int, time.Duration)
	// fetch is the node's fetch of weights in progress (node/weights); nil:
	// it holds the file.
	fetch func() (done, total int64)
	// tokens is the count of tokens delivered to callers (the
	// heartbeats' served counter); nil until wired.
	tokens func() uint64
	// vouches are the entry's counts of checks others passed, for the
	// heartbeats (vouch.go); nil until wired.
	vouches func() []swarm.Vouch

	notice   atomic.Pointer[layers.LayerMap]
	loading  atomic.Int32 // warmups in progress
	draining atomic.Bool
}

// committed is the map the entry routes on: the static map, or the
// latest committed one this node knows of (its replica, or a newer map
// notice from the leader).
func (a *announcer) committed() layers.LayerMap {
	if a.static != nil {
		return *a.static
	}
	var m layers.LayerMap
	if c := a.cons.Load(); c != nil {
		m = c.Committed()
	}
	if nm := a.notice.Load(); nm != nil && nm.Epoch > m.Epoch {
		return *nm
	}
	return m
}

// held returns the layers loaded and served, as a range (empty when
// none; the loaded layers are contiguous in practice, and the range spans
// them).
func (a *announcer) held() layers.Range {
	r := layers.Range{}
	for l, h := range a.sched.status.Load().Held {
		if h {
			if r.Empty() {
				r.Start = l
			}
			r.End = l + 1
		}
	}
	return r
}

// holds reports whether every layer of r is loaded.
func (a *announcer) holds(r layers.Range) bool {
	held := a.sched.status.Load().Held
	for l := r.Start; l < r.End; l++ {
		if l >= len(held) || !held[l] {
			return false
		}
	}
	return true
}

// phase is what this node announces.
func (a *announcer) phase() swarm.State {
	switch {
	case a.draining.Load():
		return swarm.StateDraining
	case a.static != nil:
		return swarm.StateServing
	}
	if r, ok := a.committed().Range(a.self.String()); ok {
		// A node restarted from its data dir is in the committed map
		// before it has loaded its layers again: until it has, it must
		// not be routed to.
		if !a.holds(r) {
			return swarm.StateJoining
		}
		if a.loading.Load() > 0 {
			return swarm.StateWarming
		}
		return swarm.StateServing
	}
	if a.loading.Load() > 0 {
		return swarm.StateWarming
	}
	if c := a.cons.Load(); c != nil && c.State().IsMember(a.self.String()) && !a.held().Empty() {
		return swarm.StateServing
	}
	return swarm.StateJoining
}

// publish sets the status the heartbeats announce.
func (a *announcer) publish() {
	st := a.sched.status.Load()
	m := a.committed()
	r, _ := m.Range(a.self.String())
	s := swarm.Status{RangeStart: r.Start, RangeEnd: r.End, Epoch: m.Epoch, State: a.phase(),
		QueueDepth: st.Queue, ActiveSessions: st.Sessions, FreeKV: st.FreeKV, LayerLatency: st.LayerLatency, Region: a.region,
		Engine: a.engine, StepsRun: st.Steps}
	if a.tokens != nil {
		s.TokensServed = a.tokens()
	}
	if st.Prefixes != nil {
		if b, err := st.Prefixes.MarshalBinary(); err == nil && len(b) <= swarm.MaxPrefixLen {
			s.Prefixes = string(b)
		}
	}
	if a.queue != nil {
		s.EntryQueue, s.EntryWait = a.queue()
	}
	if a.fetch != nil {
		if done, total := a.fetch(); total > 0 {
			s.FetchDone, s.FetchTotal = min(done, total), total
		}
	}
	if err := a.host.Beats().SetStatus(s); err != nil {
		a.log.Warn("status", zap.Error(err))
	}
	if a.vouches != nil {
		a.host.Beats().SetVouches(a.vouches())
	}
	if a.changed != nil {
		a.changed()
	}
}

// loop publishes every interval until ctx ends.
func (a *announcer) loop(ctx context.Context) {
	t := a.clock.NewTicker(a.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			a.publish()
		}
	}
}

// selfState is this node in the routing view: its own figures, fresh.
func (a *announcer) selfState(now time.Time) routing.NodeState {
	s := a.sched.status.Load()
	return routing.NodeState{ID: a.self.String(), Phase: phaseOf(a.phase()), Hardware: a.hw, Region: a.region,
		QueueDepth: s.Queue, ActiveSessions: s.Sessions, FreeKV: int(s.FreeKV),
		LayerLatency: s.LayerLatency.Seconds(), Updated: now, Prefixes: s.Prefixes}
}

// onMapNotice keeps the leader's latest commit, in case our replica lags.
func (a *announcer) onMapNotice(from peer.ID, data []byte) {
	c := a.cons.Load()
	if c == nil {
		return
	}
	if leader, ok := c.Leader(); !ok || leader != from {
		return
	}
	var m layers.LayerMap
	if err := m.UnmarshalBinary(data); err != nil || m.Layers != a.layers {
		return
	}
	if old := a.notice.Load(); old == nil || m.Epoch > old.Epoch {
		a.notice.Store(&m)
		if a.changed != nil {
			a.changed()
		}
	}
}

// drainingHops returns the hops of a path that announced draining.
func (a *announcer) drainingHops(hops []Hop) []peer.ID {
	var out []peer.ID
	for _, h := range hops {
		if h.Peer == a.self {
			if a.draining.Load() {
				out = append(out, h.Peer)
			}
			continue
		}
		if p, ok := a.host.Peers().Get(h.Peer); ok && p.Heartbeat != nil && p.Heartbeat.State == swarm.StateDraining {
			out = append(out, h.Peer)
		}
	}
	return out
}

// liveness adapts the peer table to consensus: a peer is dead when the
// table says so, unless it has opened a connection since. A node that
// restarts asks to rejoin before its first heartbeat arrives; without
// this the leader would take it for dead and remove it again. (A
// connection older than the verdict proves nothing: a hung process
// keeps its sockets open.)
type liveness struct{ host *swarm.Host }

func (l liveness) deadSince(id peer.ID) (time.Time, bool) {
	p, ok := l.host.Peers().Get(id)
	if !ok || p.Liveness != swarm.Dead {
		return time.Time{}, false
	}
	if l.host.Links().OpenedAfter(id, p.Since) {
		return time.Time{}, false
	}
	return p.Since, true
}

// watchPeers turns the peer table's verdicts into peer failures for the
// entry until ctx ends: a peer whose last connection closed, or that is
// dead, fails the current step of the generations that use it at once.
func watchPeers(ctx context.Context, table *swarm.PeerTable, down func(p peer.ID, why string)) {
	events, stop := table.Watch(1024)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Forgotten || (ev.To != swarm.Dead && ev.To != swarm.Suspect) {
				continue
			}
			if ev.To == swarm.Suspect {
				if p, ok := table.Get(ev.Peer); !ok || p.Connected {
					continue // only late: a slow peer is not a dead one
				}
			}
			down(ev.Peer, ev.To.String())
		}
	}
}
