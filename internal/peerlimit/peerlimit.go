// Package peerlimit holds each remote peer to a rate of its own: the
// per-peer limits on heartbeats (swarm) and chunk requests (swarm/chunks)
// of a swarm that anyone may join.
package peerlimit

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// Limiter is a token bucket per remote peer: each peer may do
// something perSec times a second with bursts of burst, whatever others
// do, so one flooding peer is held back while the rest are served. It
// remembers at most maxPeers buckets: when full it forgets those that
// are full again (idle peers), and peers past that share one bucket, so
// a flood of identities cannot grow memory (each then gets less, not
// more). Safe for concurrent use.
type Limiter struct {
	mu       sync.Mutex
	lim      rate.Limit
	burst    int
	max      int
	peers    map[peer.ID]*rate.Limiter
	overflow *rate.Limiter
	denied   atomic.Uint64
	// swept is when full buckets were last looked for: at most once per
	// refill time, so that a flood of new identities past max costs a
	// lookup each, not a scan each.
	swept time.Time
}

// New is a limiter of perSec a second per peer, bursts of
// burst (at least 1), over at most maxPeers peers (at least 1).
func New(perSec float64, burst, maxPeers int) *Limiter {
	burst, maxPeers = max(burst, 1), max(maxPeers, 1)
	return &Limiter{lim: rate.Limit(perSec), burst: burst, max: maxPeers,
		peers: map[peer.ID]*rate.Limiter{}, overflow: rate.NewLimiter(rate.Limit(perSec), burst)}
}

// Allow reports whether p may go on at now, and takes a token if so.
func (l *Limiter) Allow(p peer.ID, now time.Time) bool {
	if l.bucket(p, now).AllowN(now, 1) {
		return true
	}
	l.denied.Add(1)
	return false
}

// Reserve takes p's next token and returns how long after now p must
// wait for it (0: none): a caller that paces rather than refuses waits
// that long, so a flooding peer queues behind its own bucket only.
// A wait counts as denied.
func (l *Limiter) Reserve(p peer.ID, now time.Time) time.Duration {
	d := l.bucket(p, now).ReserveN(now, 1).DelayFrom(now)
	if d > 0 {
		l.denied.Add(1)
	}
	return d
}

// bucket is p's bucket, made if need be.
func (l *Limiter) bucket(p peer.ID, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.peers[p]
	if b == nil {
		if len(l.peers) >= l.max && l.refilled(l.swept, now) {
			l.swept = now
			for id, x := range l.peers {
				if x.TokensAt(now) >= float64(l.burst) {
					delete(l.peers, id)
				}
			}
		}
		if len(l.peers) < l.max {
			b = rate.NewLimiter(l.lim, l.burst)
			l.peers[p] = b
		} else {
			b = l.overflow
		}
	}
	return b
}

// refilled reports whether a bucket emptied at then is full by now.
func (l *Limiter) refilled(then, now time.Time) bool {
	if l.lim <= 0 {
		return true
	}
	return now.Sub(then).Seconds()*float64(l.lim) >= float64(l.burst)
}

// Denied is how many times Allow said no or Reserve made a peer wait.
func (l *Limiter) Denied() uint64 { return l.denied.Load() }

// Len is how many peers' buckets are remembered.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.peers)
}
