package trust

import (
	"encoding/hex"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/swarm"
)

// An entry's spot-check counts, which hop a check takes (the one whose
// peer has the most work this entry has not verified), and the checks
// passed it vouches for.

// SessionID names one attempt of one generation on every hop of its
// path (package node's wire type is this one): what a receipt and a
// check record are of.
type SessionID [16]byte

func (s SessionID) String() string { return hex.EncodeToString(s[:6]) }

// Stats are an entry's spot-check counts.
type Stats struct {
	// Rate is the share of token boundaries the entry checks now; the
	// swarm's replicated rate is SwarmRate, when HasSwarmRate.
	Rate         float64
	SwarmRate    float64
	HasSwarmRate bool
	Audits       uint64 // spot checks started
	// Unchecked counts token boundaries drawn for a check whose path had
	// no hop that other holders could check: the placement, not the
	// rate, left them unchecked.
	Unchecked    uint64
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
	// Mismatched is every conclusive check whose outputs differed, the
	// first and those after it, in order (at most maxCheckLog): between
	// whom each dispute was, which Log stops short of.
	Mismatched []CheckRecord
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

// maxCheckLog bounds Stats.Log: a swarm with no liar checks forever, and
// past a few thousand checks the log says nothing new.
const maxCheckLog = 4096

// Counters are an entry's running spot-check counts; the zero value is
// ready. Safe for concurrent use.
type Counters struct {
	audits, unchecked, verified, positions, inconclusive, mismatches, reported, unresolved, checked atomic.Uint64

	mu            sync.Mutex
	tolerance     uint64
	tolMismatches uint64
	maxAgreeing   float64
	firstMismatch time.Time
	checkedAt     uint64
	log           []CheckRecord
	mismatched    []CheckRecord
}

// Audit counts a spot check started.
func (c *Counters) Audit() { c.audits.Add(1) }

// Unchecked counts a boundary drawn for a check with no hop to check.
func (c *Counters) Unchecked() { c.unchecked.Add(1) }

// Inconclusive counts a check that proved nothing either way.
func (c *Counters) Inconclusive() { c.inconclusive.Add(1) }

// Unresolved counts a mismatch no third opinion settled.
func (c *Counters) Unresolved() { c.unresolved.Add(1) }

// Reported counts a fault report the leader accepted.
func (c *Counters) Reported() { c.reported.Add(1) }

// Conclusive counts a check of hop's positions against checker's that
// agreed or, mismatch, did not, at now.
func (c *Counters) Conclusive(now time.Time, sid SessionID, hop, checker peer.ID, positions, steps int, mismatch, tol bool, links int) {
	if mismatch {
		c.mismatches.Add(1)
	} else {
		c.verified.Add(1)
		c.positions.Add(uint64(positions))
	}
	n := c.checked.Add(uint64(positions))
	r := CheckRecord{At: now, Hop: hop, Checker: checker, Session: sid, Positions: positions, Steps: steps, Mismatch: mismatch,
		Tolerance: tol, Links: links}
	c.mu.Lock()
	defer c.mu.Unlock()
	if mismatch && len(c.mismatched) < maxCheckLog {
		c.mismatched = append(c.mismatched, r)
	}
	if !c.firstMismatch.IsZero() {
		return
	}
	if len(c.log) < maxCheckLog {
		c.log = append(c.log, r)
	}
	if mismatch {
		c.firstMismatch, c.checkedAt = now, n
	}
}

// ToleranceSeen counts a conclusive tolerance check whose relative
// difference was rel.
func (c *Counters) ToleranceSeen(rel float64, mismatch bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tolerance++
	if mismatch {
		c.tolMismatches++
	} else {
		c.maxAgreeing = max(c.maxAgreeing, rel)
	}
}

// Stats are the counts so far (Rate and the swarm's rate left unset: the
// entry knows them).
func (c *Counters) Stats() Stats {
	s := Stats{Audits: c.audits.Load(), Unchecked: c.unchecked.Load(), Verified: c.verified.Load(), Positions: c.positions.Load(),
		Inconclusive: c.inconclusive.Load(), Mismatches: c.mismatches.Load(), Reported: c.reported.Load(),
		Unresolved: c.unresolved.Load(), Checked: c.checked.Load()}
	c.mu.Lock()
	s.FirstMismatch, s.CheckedAtFirstMismatch, s.Log, s.Mismatched = c.firstMismatch, c.checkedAt, slices.Clone(c.log), slices.Clone(c.mismatched)
	s.Tolerance, s.ToleranceMismatches, s.MaxAgreeingDelta = c.tolerance, c.tolMismatches, c.maxAgreeing
	c.mu.Unlock()
	return s
}

// PickAudit chooses which of the candidate hops (indexes into peers, the
// path's hops' peers) a spot check takes: among those whose checks came
// out inconclusive in this attempt the fewest times, the one whose peer
// has the most work unverified by this entry, ties drawn by intn.
//   - A uniform draw would keep checking the peers that most paths cross
//     and leave a rarely routed liar unchecked; this way the peer nobody
//     checked lately comes first.
//   - An inconclusive check resets nothing, so without the first rule
//     the same hop would be drawn at every boundary. A liar that answers
//     check sessions otherwise than its session (inconsistent on purpose)
//     makes every check downstream of it inconclusive ("the checker was
//     fed other input"), and when those hops had more unverified work it
//     was never checked itself.
//
// intn(n) returns a number in [0, n).
func PickAudit(peers []peer.ID, cand []int, inconclusive, unverified func(peer.ID) int, intn func(int) int) int {
	var best []int
	fewest, most := -1, -1
	for _, i := range cand {
		n, u := inconclusive(peers[i]), unverified(peers[i])
		switch {
		case fewest < 0 || n < fewest || n == fewest && u > most:
			best, fewest, most = append(best[:0], i), n, u
		case n == fewest && u == most:
			best = append(best, i)
		}
	}
	return best[intn(len(best))]
}

// Work counts, per peer, the steps it served for this entry's
// generations since a spot check of this entry last found its work
// right: what a check of it now would newly cover. The zero value is
// ready; safe for concurrent use.
type Work struct {
	mu    sync.Mutex
	steps map[peer.ID]int
	// checks counts the checks each peer passed, for good: what this
	// entry vouches in its heartbeats.
	checks map[peer.ID]uint32
}

// Served adds n steps for every peer of a path that just produced a
// token.
func (w *Work) Served(peers []peer.ID, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.steps == nil {
		w.steps = map[peer.ID]int{}
	}
	for _, p := range peers {
		w.steps[p] += n
	}
}

// Passed: a check found p's work right; its count starts again.
func (w *Work) Passed(p peer.ID) {
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

// Unverified is p's steps served since its last passed check.
func (w *Work) Unverified(p peer.ID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.steps[p]
}

// Verified work (docs/internet.md, "Weight by verified work"): an entry
// counts, per peer, the spot checks of that peer's work it saw agree
// (Passed), and its heartbeats carry the counts, signed with its host key
// (swarm.Vouch). The leader reads every member's from its peer table, its
// own beside them, and weighs placement by them (consensus.VerifiedChecks).

// Vouches are this entry's counts of checks passed, by peer.
func (w *Work) Vouches() []swarm.Vouch {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]swarm.Vouch, 0, len(w.checks))
	for p, n := range w.checks {
		out = append(out, swarm.Vouch{Peer: p, Checks: n})
	}
	return out
}

// LeaderVouches are the vouches a leader weighs placement by: every
// peer's as its heartbeats said (atts), and this entry's own, as self's.
func (w *Work) LeaderVouches(self peer.ID, atts []swarm.Attestation) []consensus.Vouch {
	var out []consensus.Vouch
	for _, a := range atts {
		out = append(out, consensus.Vouch{Checker: a.Checker.String(), Subject: a.Subject.String(), Checks: int(a.Checks)})
	}
	for _, v := range w.Vouches() {
		out = append(out, consensus.Vouch{Checker: self.String(), Subject: v.Peer.String(), Checks: int(v.Checks)})
	}
	return out
}

// ByPeer is this entry's count of spot checks it saw each peer pass:
// what its heartbeats vouch.
func (w *Work) ByPeer() map[peer.ID]uint32 {
	out := map[peer.ID]uint32{}
	for _, v := range w.Vouches() {
		out[v.Peer] = v.Checks
	}
	return out
}
