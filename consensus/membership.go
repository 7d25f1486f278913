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

// deadFor is how long a peer has been dead in the leader's liveness
// view. It counts from the verdict, not from the start of this term: the
// view runs on every member whether it leads or not, and a swarm whose
// leadership flapped every second or so on a loaded machine restarted
// the grace at each new leader and removed a dead member only once a
// term outlasted it (seen: a killed voter's repair began 11 s after the
// kill, through six leader step-downs).
//
// A join is news that the node lived then, so a member's death counts
// from no earlier than its join, as this leader saw it (noteJoins). A
// node that rejoined through a member that forwards its request, before
// the leader could reach it again, had left again at once on the old
// verdict, and joined and left at every tick until a connection came
// (seen: 155 NodeLeft in 4.8 s on a loaded machine).
func (d *decision) deadFor(id string) time.Duration {
	if id == d.in.Self {
		return 0
	}
	since, dead := d.in.DeadSince[id]
	switch {
	case !dead:
		return 0
	case since.IsZero():
		return time.Duration(1<<63 - 1)
	}
	if t := d.st.joined[id]; t.After(since) {
		since = t
	}
	return max(d.in.Now.Sub(since), time.Nanosecond)
}

// noteJoins returns when this leader first saw each member, by its own
// clock, or the zero time for one that was a member when its term began.
// A join record's time is no substitute: it is the clock of the leader
// that appended it, and another's may run minutes ahead.
func noteJoins(seen map[string]time.Time, s State, now time.Time) map[string]time.Time {
	out := make(map[string]time.Time, s.Len())
	for _, m := range s.Members() {
		t, ok := seen[m.ID]
		if !ok && seen != nil {
			t = now
		}
		out[m.ID] = t
	}
	return out
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
			// A probe asks whether the peer answers now; go-libp2p's dial
			// backoff (5 s after a failed dial) would answer with the old
			// failure instead, and keep a peer that is back dead for it.
			if bc, ok := l.h.(BackoffClearer); ok {
				bc.ClearDialBackoff(id)
			}
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
