package node

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// An entry's spot-check counts, and which hop a check takes: the one
// whose peer has the most work this entry has not verified.

// VerifyStats are an entry's spot-check counts.
type VerifyStats struct {
	// Rate is the share of token boundaries the entry checks now; the
	// swarm's replicated rate is SwarmRate, when HasSwarmRate.
	Rate         float64
	SwarmRate    float64
	HasSwarmRate bool
	Audits       uint64 // spot checks started
	Verified     uint64 // checks whose outputs agreed
	Positions    uint64 // positions covered by the agreeing checks
	Inconclusive uint64 // no receipt, no check answer, or other inputs
	Mismatches   uint64 // checks whose outputs differed
	Reported     uint64 // faults reported to the leader and accepted
	Unresolved   uint64 // mismatches no third holder could settle
	// Tolerance counts the conclusive tolerance checks (of hops on other
	// engines, by logits), ToleranceMismatches those beyond
	// consensus.LogitsTolerance, and MaxAgreeingDelta the largest relative
	// difference (max |Δlogit| / max |logit|) among the agreeing ones.
	Tolerance           uint64
	ToleranceMismatches uint64
	MaxAgreeingDelta    float64
	// Checked is the positions covered by conclusive checks (agreeing or
	// not): the steps verified.
	Checked uint64
	// FirstMismatch is when a check first found different outputs (zero:
	// never), and CheckedAtFirstMismatch the positions Checked held then,
	// that check's included: the steps verified until detection.
	FirstMismatch          time.Time
	CheckedAtFirstMismatch uint64
	// Log is every conclusive check up to the first mismatch, in order
	// (at most maxCheckLog): the raw record from which a swarm-wide
	// "steps until detection" is summed over entries.
	Log []CheckRecord
}

// CheckRecord is one conclusive spot check of Hop's work, compared with
// Checker's answer: a check covers the checker's work on those positions
// too (a lying single checker is caught by a third opinion).
type CheckRecord struct {
	At        time.Time
	Hop       peer.ID
	Checker   peer.ID
	Session   SessionID // positions re-checked in one session are the same steps
	Positions int
	// Steps are the forward steps of the checked hop's work that the
	// check covered: the prompt's prefill and each decode step after it
	// (a fault injector's "1 output in N" counts these).
	Steps    int
	Mismatch bool
	// Tolerance: a check of a hop on another engine by logits (its own
	// on the last hop, the last hop's after it otherwise), not hashes; it
	// covers the last position only.
	Tolerance bool
	// Links is how many nodes the checker is: 1 for a single holder, more
	// for a chain that covers the hop's layers together (Checker is then
	// its last link).
	Links int
}

// maxCheckLog bounds VerifyStats.Log: a swarm with no liar checks
// forever, and past a few thousand checks the log says nothing new.
const maxCheckLog = 4096

type verifyCounters struct {
	audits, verified, positions, inconclusive, mismatches, reported, unresolved, checked atomic.Uint64

	mu            sync.Mutex
	tolerance     uint64
	tolMismatches uint64
	maxAgreeing   float64
	firstMismatch time.Time
	checkedAt     uint64
	log           []CheckRecord
}

// conclusive counts a check of hop's positions against checker's that
// agreed or, mismatch, did not, at now.
func (c *verifyCounters) conclusive(now time.Time, sid SessionID, hop, checker peer.ID, positions, steps int, mismatch, tol bool, links int) {
	if mismatch {
		c.mismatches.Add(1)
	} else {
		c.verified.Add(1)
		c.positions.Add(uint64(positions))
	}
	n := c.checked.Add(uint64(positions))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.firstMismatch.IsZero() {
		return
	}
	if len(c.log) < maxCheckLog {
		c.log = append(c.log, CheckRecord{At: now, Hop: hop, Checker: checker, Session: sid, Positions: positions, Steps: steps, Mismatch: mismatch,
			Tolerance: tol, Links: links})
	}
	if mismatch {
		c.firstMismatch, c.checkedAt = now, n
	}
}

// toleranceSeen counts a conclusive tolerance check whose relative
// difference was rel.
func (c *verifyCounters) toleranceSeen(rel float64, mismatch bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tolerance++
	if mismatch {
		c.tolMismatches++
	} else {
		c.maxAgreeing = max(c.maxAgreeing, rel)
	}
}

func (c *verifyCounters) stats() VerifyStats {
	s := VerifyStats{Audits: c.audits.Load(), Verified: c.verified.Load(), Positions: c.positions.Load(),
		Inconclusive: c.inconclusive.Load(), Mismatches: c.mismatches.Load(), Reported: c.reported.Load(),
		Unresolved: c.unresolved.Load(), Checked: c.checked.Load()}
	c.mu.Lock()
	s.FirstMismatch, s.CheckedAtFirstMismatch, s.Log = c.firstMismatch, c.checkedAt, slices.Clone(c.log)
	s.Tolerance, s.ToleranceMismatches, s.MaxAgreeingDelta = c.tolerance, c.tolMismatches, c.maxAgreeing
	c.mu.Unlock()
	return s
}

func (e *entry) verifyStats() VerifyStats {
	s := e.vc.stats()
	s.Rate = e.verifyRate()
	if e.swarmRate != nil {
		s.SwarmRate, s.HasSwarmRate = e.swarmRate()
	}
	return s
}

// pickAudit chooses which of the candidate hops (indexes into hops) a
// spot check takes: the one whose peer has the most work unverified by
// this entry, ties drawn by intn. A uniform draw would keep checking the
// peers that most paths cross and leave a rarely routed liar unchecked;
// this way the peer nobody checked lately comes first. intn(n) returns a
// number in [0, n).
func pickAudit(hops []Hop, cand []int, unverified func(peer.ID) int, intn func(int) int) int {
	var best []int
	most := -1
	for _, i := range cand {
		switch u := unverified(hops[i].Peer); {
		case u > most:
			best, most = append(best[:0], i), u
		case u == most:
			best = append(best, i)
		}
	}
	return best[intn(len(best))]
}

// unverifiedWork counts, per peer, the steps it served for this entry's
// generations since a spot check of this entry last found its work
// right: what a check of it now would newly cover.
type unverifiedWork struct {
	mu    sync.Mutex
	steps map[peer.ID]int
	// checks counts the checks each peer passed, for good: what this
	// entry vouches in its heartbeats (vouch.go).
	checks map[peer.ID]uint32
}

// served adds n steps for every hop of a path that just produced a token.
func (w *unverifiedWork) served(hops []Hop, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.steps == nil {
		w.steps = map[peer.ID]int{}
	}
	for _, h := range hops {
		w.steps[h.Peer] += n
	}
}

// passed: a check found p's work right; its count starts again.
func (w *unverifiedWork) passed(p peer.ID) {
	w.mu.Lock()
	delete(w.steps, p)
	if w.checks == nil {
		w.checks = map[peer.ID]uint32{}
	}
	if w.checks[p] < math.MaxUint32 {
		w.checks[p]++
	}
	w.mu.Unlock()
}

func (w *unverifiedWork) unverified(p peer.ID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.steps[p]
}
