package entry

import "time"

// Work stealing between entries: an entry with spare path capacity asks
// a peer whose queue head waited long enough for it; the peer hands its
// head over, and the thief drives it on its own routing. The protocol
// and the streams are the node's (node/steal.go); these are its choices.

// Stealable reports whether a queue head queued at since may be handed
// to a thief that asks for heads that waited at least minWait. A head
// that wants log-probabilities stays (the steal protocol's token frames
// carry none), and so does a constrained one (its handover carries no
// grammar).
func Stealable(since time.Time, logProbs, grammar bool, now time.Time, minWait time.Duration) bool {
	return !logProbs && !grammar && now.Sub(since) >= minWait
}

// Victim is a peer entry as the thief's load table shows it.
type Victim struct {
	ID    string
	Queue int           // its queue's length
	Wait  time.Duration // how long its head has waited
	Asked bool          // asked since its last heartbeat, and it had nothing
}

// PickVictim returns the peer whose queue head waited longest, at least
// after; "" when none.
func PickVictim(self string, peers []Victim, after time.Duration) string {
	var best string
	var bestWait time.Duration
	for _, p := range peers {
		if p.ID == self || p.Queue == 0 || p.Wait < after || p.Asked {
			continue
		}
		if p.Wait > bestWait {
			best, bestWait = p.ID, p.Wait
		}
	}
	return best
}

// StealMinWait is the least wait a thief whose own head (queued at
// ours, zero when its queue is empty) is held back asks for: a head
// older than its own by the slack, so that stealing and holding agree
// on who goes first. 0: any head.
func StealMinWait(ours, now time.Time, slack time.Duration) time.Duration {
	if ours.IsZero() {
		return 0
	}
	return max(now.Sub(ours)+slack, time.Nanosecond)
}
