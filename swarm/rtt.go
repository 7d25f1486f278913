package swarm

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"go.uber.org/zap"
)

// rttAlpha is the weight of a new ping sample in the smoothed RTT.
const rttAlpha = 0.3

func ewma(old, sample time.Duration, alpha float64) time.Duration {
	if old <= 0 {
		return sample
	}
	return time.Duration(alpha*float64(sample) + (1-alpha)*float64(old))
}

// rttSampler pings a rotating sample of connected peers with libp2p's
// ping protocol and folds the results into the peer table.
type rttSampler struct {
	h     host.Host
	table *PeerTable
	every time.Duration
	n     int
	log   *zap.Logger

	mu     sync.Mutex
	pinged map[peer.ID]time.Time
}

func (r *rttSampler) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.round(ctx)
		}
	}
}

// round pings the n connected peers pinged longest ago, in parallel.
func (r *rttSampler) round(ctx context.Context) {
	var cands []peer.ID
	for _, p := range r.table.Snapshot() {
		if p.Connected && p.Liveness != Dead {
			cands = append(cands, p.ID)
		}
	}
	r.mu.Lock()
	slices.SortStableFunc(cands, func(a, b peer.ID) int { return r.pinged[a].Compare(r.pinged[b]) })
	if len(cands) > r.n {
		cands = cands[:r.n]
	}
	now := time.Now()
	keep := make(map[peer.ID]time.Time, len(r.pinged))
	for _, p := range r.table.Snapshot() {
		if t, ok := r.pinged[p.ID]; ok {
			keep[p.ID] = t
		}
	}
	for _, id := range cands {
		keep[id] = now
	}
	r.pinged = keep
	r.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, r.every)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range cands {
		wg.Go(func() {
			d, err := Ping(ctx, r.h, id)
			if err != nil {
				r.log.Debug("ping failed", zap.Stringer("peer", id), zap.Error(err))
				return
			}
			r.table.observeRTT(id, d, rttAlpha)
		})
	}
	wg.Wait()
}

// Ping measures one round trip to p with libp2p's ping protocol.
func Ping(ctx context.Context, h host.Host, p peer.ID) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case res, ok := <-ping.Ping(ctx, h, p):
		if !ok {
			return 0, ctx.Err()
		}
		return res.RTT, res.Error
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// RTTPair is a measured round trip between two nodes, in either
// direction: the mean of both ends' smoothed pings where both reported.
type RTTPair struct {
	A, B peer.ID
	RTT  time.Duration
}

// RTTMatrix is the swarm's measured round trips, for routing: the local
// node's own pings plus the samples that live peers gossip in their
// heartbeats. Pairs are sorted by (A, B) with A < B.
type RTTMatrix struct {
	Pairs []RTTPair
}

// Lookup returns the round trip between a and b.
func (m RTTMatrix) Lookup(a, b peer.ID) (time.Duration, bool) {
	if b < a {
		a, b = b, a
	}
	i, ok := slices.BinarySearchFunc(m.Pairs, RTTPair{A: a, B: b}, cmpPair)
	if !ok {
		return 0, false
	}
	return m.Pairs[i].RTT, true
}

func cmpPair(x, y RTTPair) int {
	if c := strings.Compare(string(x.A), string(y.A)); c != 0 {
		return c
	}
	return strings.Compare(string(x.B), string(y.B))
}

// rttMatrix builds the matrix from self's pings and the live peers'
// heartbeats. Only links between self and peers that are alive or
// suspect are kept: a dead peer's links vanish with it.
func rttMatrix(self peer.ID, peers []Peer) RTTMatrix {
	live := map[peer.ID]bool{self: true}
	for _, p := range peers {
		if p.Liveness == Alive || p.Liveness == Suspect {
			live[p.ID] = true
		}
	}
	type acc struct {
		sum time.Duration
		n   int
	}
	sums := map[[2]peer.ID]*acc{}
	add := func(a, b peer.ID, d time.Duration) {
		if a == b || d <= 0 || !live[a] || !live[b] {
			return
		}
		if b < a {
			a, b = b, a
		}
		k := [2]peer.ID{a, b}
		s := sums[k]
		if s == nil {
			s = &acc{}
			sums[k] = s
		}
		s.sum += d
		s.n++
	}
	for _, p := range peers {
		add(self, p.ID, p.RTT)
		if p.Heartbeat != nil && live[p.ID] {
			for _, s := range p.Heartbeat.RTTs {
				add(p.ID, s.Peer, s.RTT)
			}
		}
	}
	m := RTTMatrix{Pairs: make([]RTTPair, 0, len(sums))}
	for k, s := range sums {
		m.Pairs = append(m.Pairs, RTTPair{A: k[0], B: k[1], RTT: s.sum / time.Duration(s.n)})
	}
	slices.SortFunc(m.Pairs, cmpPair)
	return m
}
