package consensus

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// voterCand is one Raft server or member as the voter choice sees it.
type voterCand struct {
	ID       string
	Voter    bool      // a voter now
	Eligible bool      // a member, directly reachable, alive, not draining, stable
	JoinedAt time.Time // zero for a server that has not joined the FSM yet
}

// voterTarget is the size of the voter set for n eligible members: 5
// once there are 5 (when allowed), 3 once there are 3, else 1. An even
// set tolerates no more failures than the odd one below it.
func voterTarget(n, maxVoters int) int {
	switch {
	case n >= 5 && maxVoters >= 5:
		return 5
	case n >= 3:
		return 3
	}
	return 1
}

// chooseVoters returns the voter set: eligible voters are kept (the
// leader first unless it drains, then by uptime), and the longest-joined
// eligible members fill what is missing. It is a pure function of its
// inputs.
func chooseVoters(cands []voterCand, self string, selfDraining bool, maxVoters int) []string {
	var eligible []voterCand
	for _, c := range cands {
		if c.ID == self {
			if !selfDraining {
				eligible = append(eligible, c)
			}
			continue
		}
		if c.Eligible {
			eligible = append(eligible, c)
		}
	}
	target := voterTarget(len(eligible), maxVoters)
	slices.SortFunc(eligible, func(a, b voterCand) int {
		// self, then current voters, then by uptime, then by ID
		switch {
		case (a.ID == self) != (b.ID == self):
			return boolFirst(a.ID == self)
		case a.Voter != b.Voter:
			return boolFirst(a.Voter)
		case !a.JoinedAt.Equal(b.JoinedAt):
			return a.JoinedAt.Compare(b.JoinedAt)
		}
		return cmpStr(a.ID, b.ID)
	})
	out := make([]string, 0, target)
	for _, c := range eligible[:min(target, len(eligible))] {
		out = append(out, c.ID)
	}
	slices.Sort(out)
	return out
}

func boolFirst(a bool) int {
	if a {
		return -1
	}
	return 1
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// connLiveness is the default Liveness, from the host's connections: a
// peer is alive while the host holds a connection to it. When it holds
// none, a probe dials the peer; the peer is dead from the moment its last
// connection closed, or from the first failed probe, until a connection
// comes back. The Raft leader holds a connection to every server, so on
// the leader this tracks every member. The swarm's peer table, with
// heartbeats, is the better source.
type connLiveness struct {
	h     Network
	mu    sync.Mutex
	lost  map[peer.ID]time.Time // dead since
	probe map[peer.ID]time.Time // last probe started
}

const (
	probeEvery   = 250 * time.Millisecond
	probeTimeout = 2 * time.Second
)

func newConnLiveness(h Network) *connLiveness {
	l := &connLiveness{h: h, lost: map[peer.ID]time.Time{}, probe: map[peer.ID]time.Time{}}
	if n, ok := h.(Notifier); ok {
		n.Notify(func(p peer.ID, connected bool) {
			switch {
			case connected:
				l.mu.Lock()
				delete(l.lost, p)
				l.mu.Unlock()
			case !h.Connected(p):
				l.markLost(p, time.Now())
			}
		})
	}
	return l
}

func (l *connLiveness) markLost(p peer.ID, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.lost[p]; !ok && len(l.lost) < 4*MaxMembers {
		l.lost[p] = at
	}
}

// DeadSince implements Liveness.
func (l *connLiveness) DeadSince(id peer.ID) (time.Time, bool) {
	if l.h.Connected(id) {
		if _, notified := l.h.(Notifier); !notified {
			l.mu.Lock()
			delete(l.lost, id)
			l.mu.Unlock()
		}
		return time.Time{}, false
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if last, ok := l.probe[id]; !ok || now.Sub(last) >= probeEvery {
		if len(l.probe) >= 4*MaxMembers {
			clear(l.probe)
		}
		l.probe[id] = now
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
			defer cancel()
			if err := l.h.Connect(ctx, peer.AddrInfo{ID: id}); err != nil {
				l.markLost(id, now)
			}
		}()
	}
	t, ok := l.lost[id]
	return t, ok
}

// parseAddrs turns advertised multiaddrs into ones the peerstore takes,
// dropping the malformed.
func parseAddrs(ss []string) []ma.Multiaddr {
	out := make([]ma.Multiaddr, 0, len(ss))
	for _, s := range ss {
		if a, err := ma.NewMultiaddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}
