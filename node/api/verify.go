package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/node"
)

// The entry's spot checks (docs/trust.md), for operators and for the
// testnet's detection report: the counters, when a check first found a
// mismatch, and the conclusive checks up to it.

type (
	verifyJSON struct {
		Node string  `json:"node"`
		Rate float64 `json:"rate"` // share of token boundaries checked now
		// SwarmRate is the swarm's replicated rate (null: none set), which
		// Rate follows unless the node was given its own.
		SwarmRate *float64 `json:"swarm_rate"`
		// Checks were started; Unchecked boundaries were drawn for a
		// check but their path had no hop that other holders could
		// check; Verified agreed; Mismatches differed;
		// Inconclusive proved nothing; Unresolved mismatches found no
		// third holder; Reported faults the leader accepted.
		Checks       uint64 `json:"checks"`
		Unchecked    uint64 `json:"unchecked"`
		Verified     uint64 `json:"verified"`
		Mismatches   uint64 `json:"mismatches"`
		Inconclusive uint64 `json:"inconclusive"`
		Unresolved   uint64 `json:"unresolved"`
		Reported     uint64 `json:"reported"`
		// PositionsVerified are covered by agreeing checks, StepsChecked
		// by conclusive ones (agreeing or not).
		PositionsVerified uint64 `json:"positions_verified"`
		StepsChecked      uint64 `json:"steps_checked"`
		// Tolerance checks are of last hops on engines that are not
		// bit-reproducible, by their logits (counted in Checks too):
		// ToleranceChecks were conclusive, ToleranceMismatches beyond
		// the tolerance, MaxAgreeingDelta the largest relative
		// difference of an agreeing one (how close honest nodes come).
		ToleranceChecks     uint64  `json:"tolerance_checks"`
		ToleranceMismatches uint64  `json:"tolerance_mismatches"`
		MaxAgreeingDelta    float64 `json:"max_agreeing_delta"`
		// FirstMismatch is when a check first found different outputs
		// (null: never); StepsChecked held StepsAtFirstMismatch then.
		FirstMismatch        *time.Time `json:"first_mismatch"`
		StepsAtFirstMismatch uint64     `json:"steps_at_first_mismatch"`
		// Log is every conclusive check up to the first mismatch (at
		// most a few thousand).
		Log []checkJSON `json:"log"`
		// Mismatched is every check whose outputs differed, the first
		// and those after it (at most a few thousand).
		Mismatched []checkJSON `json:"mismatched"`
	}
	checkJSON struct {
		At        time.Time `json:"at"`
		Hop       string    `json:"hop"`             // the peer whose work was checked
		Checker   string    `json:"checker"`         // the holder it was compared with (a chain's last link)
		Links     int       `json:"links,omitempty"` // nodes in a chained checker; omitted for a single one
		Session   string    `json:"session"`         // the checked session
		Positions int       `json:"positions"`
		Steps     int       `json:"steps"` // forward steps covered: the prefill and each decode step
		Mismatch  bool      `json:"mismatch,omitempty"`
		Tolerance bool      `json:"tolerance,omitempty"` // by logits, within a tolerance
	}
)

// admin serves the operator's endpoints: the spot checks' report and
// the swarm's replicated configuration.
type admin struct {
	b       Backend
	maxBody int64
}

func (a admin) handleVerify(w http.ResponseWriter, _ *http.Request) {
	v := a.b.Metrics().Verify
	out := verifyJSON{Node: a.b.ID().String(), Rate: v.Rate, Checks: v.Audits, Unchecked: v.Unchecked, Verified: v.Verified,
		Mismatches: v.Mismatches, Inconclusive: v.Inconclusive, Unresolved: v.Unresolved, Reported: v.Reported,
		PositionsVerified: v.Positions, StepsChecked: v.Checked, StepsAtFirstMismatch: v.CheckedAtFirstMismatch,
		ToleranceChecks: v.Tolerance, ToleranceMismatches: v.ToleranceMismatches, MaxAgreeingDelta: v.MaxAgreeingDelta,
		Log: checksJSON(v.Log), Mismatched: checksJSON(v.Mismatched)}
	if v.HasSwarmRate {
		r := v.SwarmRate
		out.SwarmRate = &r
	}
	if !v.FirstMismatch.IsZero() {
		t := v.FirstMismatch
		out.FirstMismatch = &t
	}
	writeJSON(w, http.StatusOK, out)
}

func checksJSON(rs []node.CheckRecord) []checkJSON {
	out := make([]checkJSON, 0, len(rs))
	for _, c := range rs {
		out = append(out, checkJSON{At: c.At, Hop: c.Hop.String(), Checker: c.Checker.String(), Session: c.Session.String(), Positions: c.Positions, Steps: c.Steps, Mismatch: c.Mismatch, Tolerance: c.Tolerance, Links: chainLinks(c.Links)})
	}
	return out
}

// swarmConfigJSON is the swarm's replicated configuration: in the body
// of POST /v1/swarm/config the settings to change (null or absent:
// unchanged), in GET /v1/swarm's "config" those the swarm has (null:
// none set; the planner then has no KV cap).
type swarmConfigJSON struct {
	VerifyRate        *float64 `json:"verify_rate"`
	PlanSessionTokens *int     `json:"plan_session_tokens"`
	// Stewards: the swarm's stewards (consensus/stewards.go); omitted
	// when it has none, or when a POST leaves them unchanged.
	Stewards []string `json:"stewards,omitempty"`
}

// handleSwarmConfig changes the swarm's replicated configuration. Only
// the leader appends it: another node answers 409 naming the leader, so
// that the operator asks it instead. The settings are all checked before
// any is set; each is its own commit. A backend that cannot set one
// answers 501 (ErrUnsupported), after setting those before it.
func (a admin) handleSwarmConfig(w http.ResponseWriter, r *http.Request) {
	b, e := readBody(w, r, a.maxBody)
	if e != nil {
		writeError(w, e)
		return
	}
	var body swarmConfigJSON
	if e := decodeBytes(b, &body); e != nil {
		writeError(w, e)
		return
	}
	if body.VerifyRate == nil && body.PlanSessionTokens == nil && body.Stewards == nil {
		writeError(w, invalid("verify_rate", "nothing to set: give verify_rate, plan_session_tokens or stewards"))
		return
	}
	if ids := body.Stewards; ids != nil {
		if len(ids) == 0 || len(ids) > consensus.MaxStewards {
			writeError(w, invalid("stewards", "%d stewards: give 1 to %d peer IDs", len(ids), consensus.MaxStewards))
			return
		}
		for _, id := range ids {
			if _, err := peer.Decode(id); err != nil {
				writeError(w, invalid("stewards", "%q is not a peer ID", id))
				return
			}
		}
	}
	if v := body.VerifyRate; v != nil && !(*v >= 0 && *v <= 1) {
		writeError(w, invalid("verify_rate", "%v: must be between 0 and 1", *v))
		return
	}
	if n := body.PlanSessionTokens; n != nil && (*n < 0 || *n > consensus.MaxSessionTokens) {
		writeError(w, invalid("plan_session_tokens", "%d: must be between 0 (no KV cap) and %d", *n, consensus.MaxSessionTokens))
		return
	}
	if body.VerifyRate != nil {
		if err := a.b.SetSwarmVerifyRate(r.Context(), *body.VerifyRate); err != nil {
			writeError(w, a.configError("verify_rate", err))
			return
		}
	}
	if body.PlanSessionTokens != nil {
		if err := a.b.SetSwarmSessionTokens(r.Context(), *body.PlanSessionTokens); err != nil {
			writeError(w, a.configError("plan_session_tokens", err))
			return
		}
	}
	if body.Stewards != nil {
		if err := a.b.SetSwarmStewards(r.Context(), body.Stewards); err != nil {
			writeError(w, a.configError("stewards", err))
			return
		}
	}
	writeJSON(w, http.StatusOK, body)
}

// configError is the answer to a setting the node refused.
func (a admin) configError(param string, err error) *apiError {
	switch {
	case errors.Is(err, ErrUnsupported):
		return &apiError{Status: http.StatusNotImplemented, Message: "this node cannot change the swarm's configuration",
			Type: typeServer, Code: "not_supported", Param: param, err: err}
	case errors.Is(err, consensus.ErrNotLeader):
		msg := "this node is not the leader: send it to the leader"
		if l := a.b.Swarm().Leader; l != "" {
			msg = fmt.Sprintf("this node is not the leader: send it to the leader, %s", l)
		}
		return &apiError{Status: http.StatusConflict, Message: msg, Type: typeInvalid, Code: "not_leader", err: err}
	case errors.Is(err, consensus.ErrBadStewards):
		return &apiError{Status: http.StatusForbidden, Message: message(err), Type: typeInvalid, Code: "not_steward", Param: param, err: err}
	case errors.Is(err, consensus.ErrRejected):
		return invalid(param, "%s", message(err))
	}
	return fromError(err, "")
}

// chainLinks is a check's links for the log: 0 (omitted) for a single
// checker.
func chainLinks(n int) int {
	if n > 1 {
		return n
	}
	return 0
}
