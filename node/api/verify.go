package api

import (
	"net/http"
	"time"
)

// The entry's spot checks (docs/trust.md), for operators and for the
// testnet's detection report: the counters, when a check first found a
// mismatch, and the conclusive checks up to it.

type (
	verifyJSON struct {
		Node string  `json:"node"`
		Rate float64 `json:"rate"` // share of token boundaries checked now
		// Checks were started; Verified agreed; Mismatches differed;
		// Inconclusive proved nothing; Unresolved mismatches found no
		// third holder; Reported faults the leader accepted.
		Checks       uint64 `json:"checks"`
		Verified     uint64 `json:"verified"`
		Mismatches   uint64 `json:"mismatches"`
		Inconclusive uint64 `json:"inconclusive"`
		Unresolved   uint64 `json:"unresolved"`
		Reported     uint64 `json:"reported"`
		// PositionsVerified are covered by agreeing checks, StepsChecked
		// by conclusive ones (agreeing or not).
		PositionsVerified uint64 `json:"positions_verified"`
		StepsChecked      uint64 `json:"steps_checked"`
		// FirstMismatch is when a check first found different outputs
		// (null: never); StepsChecked held StepsAtFirstMismatch then.
		FirstMismatch        *time.Time `json:"first_mismatch"`
		StepsAtFirstMismatch uint64     `json:"steps_at_first_mismatch"`
		// Log is every conclusive check up to the first mismatch (at
		// most a few thousand).
		Log []checkJSON `json:"log"`
	}
	checkJSON struct {
		At        time.Time `json:"at"`
		Positions int       `json:"positions"`
		Mismatch  bool      `json:"mismatch,omitempty"`
	}
)

func (s *Server) handleVerify(w http.ResponseWriter, _ *http.Request) {
	v := s.b.Metrics().Verify
	out := verifyJSON{Node: s.b.ID().String(), Rate: v.Rate, Checks: v.Audits, Verified: v.Verified,
		Mismatches: v.Mismatches, Inconclusive: v.Inconclusive, Unresolved: v.Unresolved, Reported: v.Reported,
		PositionsVerified: v.Positions, StepsChecked: v.Checked, StepsAtFirstMismatch: v.CheckedAtFirstMismatch,
		Log: make([]checkJSON, 0, len(v.Log))}
	if !v.FirstMismatch.IsZero() {
		t := v.FirstMismatch
		out.FirstMismatch = &t
	}
	for _, c := range v.Log {
		out.Log = append(out.Log, checkJSON{At: c.At, Positions: c.Positions, Mismatch: c.Mismatch})
	}
	writeJSON(w, http.StatusOK, out)
}
