package node

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	ecore "github.com/stratanet/strata/node/entry"
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
	fairMargin = ecore.FairMargin
)

// peerHead is one peer entry's queue head as the load table shows it.
type peerHead = ecore.PeerHead

// fairConfig sets fair admission; zero: off.
type fairConfig = ecore.FairConfig

// newFairConfig is fair admission tuned to a heartbeat interval; stall
// 0 is the default bound.
func newFairConfig(on bool, beat, stall time.Duration) fairConfig {
	if stall <= 0 {
		stall = DefaultFairStallBeats * beat
	}
	return fairConfig{On: on, Slack: beat / 2, Step: beat, Stall: stall}
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
		out = append(out, peerHead{ID: string(p.ID), N: hb.EntryQueue, Enq: p.HeardAt.Add(-hb.EntryWait), Until: p.HeardAt.Add(3 * beat)})
	}
	return out
}

// olderPeerLocked reports whether w must be held back for an older peer
// head, and when to look again (zero: nothing to wake for): node/entry's
// FairHold on the load table. a.mu is held.
func (a *admitter) olderPeerLocked(w *waiter, now time.Time) (hold bool, wake time.Time) {
	e := a.e
	if !e.cfg.fair.On || e.heads == nil || w.noHold || w.deadline.IsZero() {
		return false, time.Time{}
	}
	h := ecore.Head{Since: w.since, Deadline: w.deadline, NoHold: w.noHold, Queue: len(e.adm.q)}
	return ecore.FairHold(e.cfg.fair, string(e.cfg.self), e.heads(), e.adm.stall, h, now)
}
