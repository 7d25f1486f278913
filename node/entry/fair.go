package entry

import "time"

// Swarm-wide oldest-first admission (fair holds). An entry holds back
// its own queue head (a new request at an empty queue included) while
// the load table shows a peer entry whose head was queued earlier than
// ours by more than a slack and whose queue is longer than ours, so that
// the room goes to the oldest request in the swarm. The rationale and
// the liveness bounds are in node/fair.go, which feeds the load table.

// FairMargin: a request is not held back within this of its deadline.
const FairMargin = time.Second

// PeerHead is one peer entry's queue head as the load table shows it.
type PeerHead struct {
	ID  string
	N   int       // its queue's length
	Enq time.Time // the head's enqueue instant, on the local clock
	// Until is when the row turns stale (no heartbeat since): it is
	// ignored from then on.
	Until time.Time
}

// FairConfig sets fair admission; zero: off.
type FairConfig struct {
	On    bool
	Slack time.Duration // a peer head counts as older only by more than this
	// Step is how far a peer head's instant must move to count as
	// progress; Stall how long a head without progress is deferred to.
	Step, Stall time.Duration
}

// StallRec is the first sighting of a peer head that caused a hold, for
// the stall bound.
type StallRec struct {
	Enq time.Time // its instant then
	At  time.Time // when
}

// Head is the queue head that fair admission judges.
type Head struct {
	Since    time.Time // when it was queued
	Deadline time.Time // when its queue timeout ends (zero: never held)
	NoHold   bool      // it cannot wait, or a thief judged it oldest once
	Queue    int       // this entry's queue length now
}

// FairHold reports whether h must be held back for an older peer head,
// and when to look again (zero: nothing to wake for). stall is the
// entry's memory of peer heads without progress; FairHold updates it.
func FairHold(f FairConfig, self string, heads []PeerHead, stall map[string]*StallRec, h Head, now time.Time) (hold bool, wake time.Time) {
	if !f.On || h.NoHold || h.Deadline.IsZero() {
		return false, time.Time{}
	}
	last := h.Deadline.Add(-FairMargin)
	if !now.Before(last) {
		return false, time.Time{}
	}
	seen := make(map[string]bool, len(heads))
	ours := max(h.Queue, 1) // a new request at an empty queue counts itself
	for _, p := range heads {
		if p.ID == self || !now.Before(p.Until) {
			continue
		}
		seen[p.ID] = true
		if p.N <= ours || !p.Enq.Before(h.Since.Add(-f.Slack)) {
			continue
		}
		r := stall[p.ID]
		if r == nil || p.Enq.After(r.Enq.Add(f.Step)) {
			r = &StallRec{Enq: p.Enq, At: now}
			stall[p.ID] = r
		}
		end := r.At.Add(f.Stall)
		if !now.Before(end) {
			continue // it made no progress for the stall bound: not waited for
		}
		hold = true
		wake = Earliest(wake, Earliest(p.Until, end))
	}
	for id := range stall {
		if !seen[id] {
			delete(stall, id) // gone from the table or stale: a later head starts afresh
		}
	}
	if !hold {
		return false, time.Time{}
	}
	return true, Earliest(wake, last)
}

// Earliest is the earlier of two instants, zero meaning none.
func Earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// OldestPeerHead returns the peer whose head is the oldest by the load
// table and older than before by the slack (a thief with a held queue
// steals only such a head); "" when none. skip leaves peers out.
func OldestPeerHead(heads []PeerHead, self string, now, before time.Time, slack time.Duration, skip func(string) bool) string {
	var best string
	var bestAt time.Time
	for _, h := range heads {
		if h.ID == self || !now.Before(h.Until) || !h.Enq.Before(before.Add(-slack)) || skip(h.ID) {
			continue
		}
		if best == "" || h.Enq.Before(bestAt) {
			best, bestAt = h.ID, h.Enq
		}
	}
	return best
}
