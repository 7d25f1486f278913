package consensus

import (
	"fmt"

	"github.com/stratanet/strata/layers"
)

// Placement weighted by verified work (docs/internet.md, "Weight by
// verified work"). A member that runs a request (its entry) spot-checks
// the hops of its paths (node/verify.go) and counts, per hop, the checks
// that agreed. It gossips those counts in its heartbeats, signed with its
// host key; the leader reads them from its peer table (Vouches) and
// Decide turns them into each member's verified checks (VerifiedChecks),
// which weigh the member in placement (layers.Trust). The rules that keep
// a Sybil crowd from vouching for itself are in VerifiedChecks.

// DefaultTrustChecks is K: the verified checks after which a member's
// capacity counts fully in a swarm with stewards.
const DefaultTrustChecks = 8

// Vouch is one checker's count of spot checks of Subject's work that
// agreed with a second holder, as the checker's heartbeat says.
type Vouch struct {
	Checker, Subject string
	Checks           int
}

// Vouches reports the vouches the leader has heard: every member's
// latest counts, its own included, in a slice the caller owns.
type Vouches interface {
	Vouches() []Vouch
}

// VouchFunc adapts a function to Vouches.
type VouchFunc func() []Vouch

// Vouches implements Vouches.
func (f VouchFunc) Vouches() []Vouch { return f() }

// WithVouches sets where the leader reads verified work from, and K, the
// checks after which a member counts fully (0: DefaultTrustChecks). It
// matters only in a swarm with stewards.
func WithVouches(v Vouches, k int) Option {
	return func(c *config) error {
		if k < 0 {
			return fmt.Errorf("%w: trust checks %d", ErrConfig, k)
		}
		c.vouches, c.trustChecks = v, k
		return nil
	}
}

// VerifiedChecks counts each member's verified checks from vouches, for a
// trust threshold of k. Only in a swarm with stewards: without a set
// every member votes, the swarm trusts its members, and the result is
// nil. Then:
//
//   - a vouch counts only when checker and subject are both members and
//     differ (no node vouches for itself);
//   - a checker's repeated vouches for one subject count once, the
//     largest (counts only grow; a gossiped older one is smaller);
//   - a steward's checks count in full;
//   - all other members' checks of one subject count together at most
//     k/2 (rounded down), so that no crowd of Sybils vouching for each
//     other lifts any of them to k: at least k − k/2 checks by stewards
//     are needed.
func (s State) VerifiedChecks(vouches []Vouch, k int) map[string]int {
	if s.Stewards().Empty() || k <= 0 {
		return nil
	}
	type pair struct{ c, s string }
	best := map[pair]int{}
	for _, v := range vouches {
		if v.Checks <= 0 || v.Checker == v.Subject || !s.IsMember(v.Checker) || !s.IsMember(v.Subject) {
			continue
		}
		p := pair{v.Checker, v.Subject}
		best[p] = max(best[p], v.Checks)
	}
	stew, others := map[string]int{}, map[string]int{}
	for p, n := range best {
		if s.Stewards().Includes(p.c) {
			stew[p.s] += n
		} else {
			others[p.s] += n
		}
	}
	out := map[string]int{}
	for id, n := range stew {
		out[id] = n
	}
	for id, n := range others {
		out[id] += min(n, k/2)
	}
	return out
}

// Trust is the placement trust Decide plans with: the zero
// layers.Trust (everyone counts fully) in a swarm without stewards.
func (s State) Trust(vouches []Vouch, k int) layers.Trust {
	if s.Stewards().Empty() {
		return layers.Trust{}
	}
	if k <= 0 {
		k = DefaultTrustChecks
	}
	t := layers.Trust{Full: k, Checks: s.VerifiedChecks(vouches, k), Trusted: map[string]bool{}}
	for _, id := range s.Stewards().List() {
		t.Trusted[id] = true
	}
	return t
}

// vouchesOf reads the leader's vouches (none without a source). IDs
// that name no member are dropped by VerifiedChecks.
func vouchesOf(v Vouches) []Vouch {
	if v == nil {
		return nil
	}
	return v.Vouches()
}

// Trust is the placement trust this member would plan with as leader:
// the replicated stewards and the vouches it has heard (WithVouches).
func (c *Consensus) Trust() layers.Trust {
	return c.fsm.current().Trust(vouchesOf(c.cfg.vouches), c.cfg.trustChecks)
}
