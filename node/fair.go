package node

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
)

// Swarm-wide oldest-first admission. Each entry's queue is FIFO, but
// without more an entry with few clients admits a new request at once
// while a loaded peer entry's queue holds requests that have waited for
// seconds: whoever happens to look when room frees takes it. With fair
// admission an entry holds back its own queue head (a new request at an
// empty queue included) while the load table shows a peer entry whose
// head was queued earlier than ours by more than a slack, so that the
// room goes to the oldest request in the swarm.
//
// Enqueue instants are compared, not waits: a peer head's instant is the
// local time its heartbeat arrived less the wait it reported. The
// estimate can only be late (the wait was measured before the heartbeat
// left), so two entries never both hold for each other.
//
// Only a peer whose queue is longer than ours is waited for.
// A hold idles room until the older peer takes it, and both learn of
// each other's admissions through the load table, up to a heartbeat
// late. The entry that drains most of the swarm's backlog (the longest
// queue) would so idle the swarm for each request of every short queue
// (the symmetric rule lost goodput on overload.yaml); instead it goes on
// admitting, and a short queue's head, once the oldest, takes room as
// soon as it sees some, like any head without fair admission. Queues
// of equal length (short ones, near capacity) do not wait for each
// other either: each hold there would cost a table lag of idle room.
//
// Rows that cannot be trusted are ignored: peers not alive, rows with no
// heartbeat within three intervals (when the peer table turns a peer
// suspect), queues reported empty.
//
// Liveness:
//   - a request is never held within fairMargin of its own deadline;
//   - a request that asked not to queue, one handed over by a thief, and
//     one a thief gave back are never held (they cannot wait, or were
//     already judged oldest);
//   - a peer head that makes no progress (its instant does not move by
//     a heartbeat interval) is deferred to for at most the stall bound
//     (DefaultFairStallBeats intervals, 4 s at the default 500 ms) from
//     the first hold it caused while this entry had room; after that it
//     is ignored until it moves. So a peer head that never fits (a big
//     request) delays this entry's requests by at most the stall bound.
//
// The check runs only for a head that fits now (its reservation is
// given back when it is held), so the stall bound starts at a moment
// this entry could have run it.

// Defaults of fair admission, in heartbeat intervals where it matters.
const (
	// DefaultFairStallBeats: a peer head that does not advance by a
	// heartbeat interval is deferred to for at most this many intervals.
	DefaultFairStallBeats = 8
	// fairMargin: a request is not held back within this of its deadline.
	fairMargin = time.Second
)

// peerHead is one peer entry's queue head as the load table shows it.
type peerHead struct {
	id  peer.ID
	n   int       // its queue's length
	enq time.Time // the head's enqueue instant, on the local clock
	// until is when the row turns stale (no heartbeat since): it is
	// ignored from then on.
	until time.Time
}

// fairConfig sets fair admission; zero: off.
type fairConfig struct {
	on    bool
	slack time.Duration // a peer head counts as older only by more than this
	// step is how far a peer head's instant must move to count as
	// progress; stall how long a head without progress is deferred to.
	step, stall time.Duration
}

// newFairConfig is fair admission tuned to a heartbeat interval; stall
// 0 is the default bound.
func newFairConfig(on bool, beat, stall time.Duration) fairConfig {
	if stall <= 0 {
		stall = DefaultFairStallBeats * beat
	}
	return fairConfig{on: on, slack: beat / 2, step: beat, stall: stall}
}

// stallRec is the first sighting of a peer head that caused a hold,
// for the stall bound.
type stallRec struct {
	enq time.Time // its instant then
	at  time.Time // when
}

// peerHeads reads the load table: the heads of the live peers' entry
// queues, with the instant each row turns stale (three intervals after
// its heartbeat, as the table's suspicion).
func peerHeads(t *swarm.PeerTable, self peer.ID, beat time.Duration) []peerHead {
	var out []peerHead
	for _, p := range t.Live() {
		hb := p.Heartbeat
		if p.ID == self || hb == nil || hb.EntryQueue == 0 || p.HeardAt.IsZero() {
			continue
		}
		out = append(out, peerHead{id: p.ID, n: hb.EntryQueue, enq: p.HeardAt.Add(-hb.EntryWait), until: p.HeardAt.Add(3 * beat)})
	}
	return out
}

// olderPeerLocked reports whether w must be held back for an older peer
// head, and when to look again (zero: nothing to wake for). a.mu is held.
func (e *entry) olderPeerLocked(w *waiter, now time.Time) (hold bool, wake time.Time) {
	f := e.cfg.fair
	a := e.adm
	if !f.on || e.heads == nil || w.noHold || w.deadline.IsZero() {
		return false, time.Time{}
	}
	last := w.deadline.Add(-fairMargin)
	if !now.Before(last) {
		return false, time.Time{}
	}
	heads := e.heads()
	seen := make(map[peer.ID]bool, len(heads))
	ours := max(len(a.q), 1) // a new request at an empty queue counts itself
	for _, h := range heads {
		if h.id == e.cfg.self || !now.Before(h.until) {
			continue
		}
		seen[h.id] = true
		if h.n <= ours || !h.enq.Before(w.since.Add(-f.slack)) {
			continue
		}
		r := a.stall[h.id]
		if r == nil || h.enq.After(r.enq.Add(f.step)) {
			r = &stallRec{enq: h.enq, at: now}
			a.stall[h.id] = r
		}
		end := r.at.Add(f.stall)
		if !now.Before(end) {
			continue // it made no progress for the stall bound: not waited for
		}
		hold = true
		wake = earliest(wake, earliest(h.until, end))
	}
	for id := range a.stall {
		if !seen[id] {
			delete(a.stall, id) // gone from the table or stale: a later head starts afresh
		}
	}
	if !hold {
		return false, time.Time{}
	}
	return true, earliest(wake, last)
}

// earliest is the earlier of two instants, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// oldestPeerHead returns the peer whose head is the oldest by the load
// table and older than before by the slack (a thief with a held queue
// steals only such a head); "" when none.
func oldestPeerHead(heads []peerHead, self peer.ID, now, before time.Time, slack time.Duration, skip func(peer.ID) bool) peer.ID {
	var best peer.ID
	var bestAt time.Time
	for _, h := range heads {
		if h.id == self || !now.Before(h.until) || !h.enq.Before(before.Add(-slack)) || skip(h.id) {
			continue
		}
		if best == "" || h.enq.Before(bestAt) {
			best, bestAt = h.id, h.enq
		}
	}
	return best
}
