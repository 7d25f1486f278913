package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/node"
)

// TestVerifyView: /v1/swarm/verify carries the entry's spot-check
// counters, the first mismatch and the check log as the node has them.
func TestVerifyView(t *testing.T) {
	f, ids := newFakeSwarm(t)
	hs := fakeServer(t, f)
	var v verifyJSON
	status, _, body := get(t, hs.URL+"/v1/swarm/verify", "")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, body)
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if v.Node != ids[0].String() || v.FirstMismatch != nil || v.Log == nil || len(v.Log) != 0 || v.Mismatched == nil || len(v.Mismatched) != 0 {
		t.Fatalf("no checks yet: %+v", v)
	}

	t0 := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	f.mu.Lock()
	f.verify = node.VerifyStats{Rate: 0.05, Audits: 4, Verified: 2, Positions: 70, Mismatches: 1, Inconclusive: 1,
		Checked: 110, FirstMismatch: t0.Add(2 * time.Second), CheckedAtFirstMismatch: 110,
		Tolerance: 3, ToleranceMismatches: 1, MaxAgreeingDelta: 0.025,
		Log: []node.CheckRecord{{At: t0, Positions: 30, Tolerance: true}, {At: t0.Add(time.Second), Hop: ids[1], Checker: ids[2], Positions: 40},
			{At: t0.Add(2 * time.Second), Positions: 40, Mismatch: true}},
		Mismatched: []node.CheckRecord{{At: t0.Add(2 * time.Second), Positions: 40, Mismatch: true},
			{At: t0.Add(3 * time.Second), Hop: ids[2], Checker: ids[1], Positions: 12, Mismatch: true, Links: 2}}}
	f.mu.Unlock()
	if _, _, body = get(t, hs.URL+"/v1/swarm/verify", ""); json.Unmarshal(body, &v) != nil {
		t.Fatalf("bad body %s", body)
	}
	if v.Rate != 0.05 || v.Checks != 4 || v.Verified != 2 || v.Mismatches != 1 || v.Inconclusive != 1 ||
		v.PositionsVerified != 70 || v.StepsChecked != 110 || v.StepsAtFirstMismatch != 110 ||
		v.ToleranceChecks != 3 || v.ToleranceMismatches != 1 || v.MaxAgreeingDelta != 0.025 {
		t.Errorf("counters: %+v", v)
	}
	if v.FirstMismatch == nil || !v.FirstMismatch.Equal(t0.Add(2*time.Second)) {
		t.Errorf("first mismatch %v", v.FirstMismatch)
	}
	if len(v.Log) != 3 || !v.Log[2].Mismatch || v.Log[0].Mismatch || !v.Log[0].Tolerance || v.Log[1].Tolerance || v.Log[1].Positions != 40 || !v.Log[1].At.Equal(t0.Add(time.Second)) ||
		v.Log[1].Hop != ids[1].String() || v.Log[1].Checker != ids[2].String() {
		t.Errorf("log %+v", v.Log)
	}
	if len(v.Mismatched) != 2 || !v.Mismatched[1].Mismatch || v.Mismatched[1].Hop != ids[2].String() || v.Mismatched[1].Links != 2 ||
		!v.Mismatched[1].At.Equal(t0.Add(3*time.Second)) {
		t.Errorf("mismatched %+v", v.Mismatched)
	}
}

// setterBackend can change the swarm's rate, as the leader or not.
type setterBackend struct {
	*fakeBackend
	err error
	got []float64
}

func (b *setterBackend) SetSwarmVerifyRate(_ context.Context, r float64) error {
	b.got = append(b.got, r)
	return b.err
}

// tokensBackend can also change the planner's session length.
type tokensBackend struct {
	*setterBackend
	tokens []int
}

func (b *tokensBackend) SetSwarmSessionTokens(_ context.Context, n int) error {
	b.tokens = append(b.tokens, n)
	return b.err
}

// stewardsBackend can also sign a steward set.
type stewardsBackend struct {
	*tokensBackend
	stewards [][]string
}

func (b *stewardsBackend) SetSwarmStewards(_ context.Context, ids []string) error {
	b.stewards = append(b.stewards, ids)
	return b.err
}

// TestSwarmConfigStewards: POST /v1/swarm/config passes a steward list
// to the node; a list that is empty or names a non-ID is refused before
// it, a node that is not the leader answers 409, one whose key may not
// sign the set 403, one that cannot set it 501; GET /v1/swarm lists the
// swarm's stewards.
func TestSwarmConfigStewards(t *testing.T) {
	f, ids := newFakeSwarm(t)
	sb := &stewardsBackend{tokensBackend: &tokensBackend{setterBackend: &setterBackend{fakeBackend: f}}}
	hs := fakeServer(t, sb)
	u := hs.URL + "/v1/swarm/config"
	list := []string{ids[0].String(), ids[1].String()}
	if status, _, body := post(t, u, "", map[string]any{"stewards": list}); status != http.StatusOK {
		t.Fatalf("set: %d %s", status, body)
	}
	for _, bad := range []string{`{"stewards": []}`, `{"stewards": ["alice"]}`, `{"stewards": "x"}`, `{"stewards": [1]}`} {
		if status, _, body := post(t, u, "", bad); status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	if len(sb.stewards) != 1 || !slices.Equal(sb.stewards[0], list) {
		t.Fatalf("set: %v", sb.stewards)
	}
	sb.err = fmt.Errorf("consensus: %w", consensus.ErrNotLeader)
	if status, _, body := post(t, u, "", map[string]any{"stewards": list}); status != http.StatusConflict || !strings.Contains(string(body), "not_leader") {
		t.Fatalf("not the leader: %d %s", status, body)
	}
	sb.err = fmt.Errorf("%w: x is no steward", consensus.ErrBadStewards)
	if status, _, body := post(t, u, "", map[string]any{"stewards": list}); status != http.StatusForbidden || !strings.Contains(string(body), "not_steward") {
		t.Fatalf("not a steward: %d %s", status, body)
	}
	if status, _, body := post(t, fakeServer(t, sb.tokensBackend).URL+"/v1/swarm/config", "", map[string]any{"stewards": list}); status != http.StatusNotImplemented {
		t.Fatalf("no setter: %d %s", status, body)
	}
	f.mu.Lock()
	f.snap.Stewards = list
	f.mu.Unlock()
	var v struct {
		Config struct {
			Stewards []string `json:"stewards"`
		} `json:"config"`
	}
	if _, _, body := get(t, hs.URL+"/v1/swarm", ""); json.Unmarshal(body, &v) != nil || !slices.Equal(v.Config.Stewards, list) {
		t.Fatalf("stewards in the view: %s", body)
	}
}

// TestSwarmConfigSessionTokens: POST /v1/swarm/config sets the planner's
// session length through the node, alone or with the rate; bad values
// are refused before either is set; a node that is not the leader
// answers 409, one that cannot set it 501; GET /v1/swarm shows the
// swarm's configuration, null where none is set.
func TestSwarmConfigSessionTokens(t *testing.T) {
	f, ids := newFakeSwarm(t)
	tb := &tokensBackend{setterBackend: &setterBackend{fakeBackend: f}}
	hs := fakeServer(t, tb)
	u := hs.URL + "/v1/swarm/config"
	if status, _, body := post(t, u, "", map[string]any{"plan_session_tokens": 1000}); status != http.StatusOK || !strings.Contains(string(body), `"plan_session_tokens":1000`) {
		t.Fatalf("set: %d %s", status, body)
	}
	if status, _, body := post(t, u, "", map[string]any{"plan_session_tokens": 0, "verify_rate": 0.5}); status != http.StatusOK {
		t.Fatalf("set both: %d %s", status, body)
	}
	for _, bad := range []string{`{"plan_session_tokens": -1}`, `{"plan_session_tokens": 1048577}`, `{"plan_session_tokens": 1.5}`,
		`{"plan_session_tokens": "x"}`, `{"plan_session_tokens": 10, "verify_rate": 2}`, `{"plan_session_tokens": null}`} {
		if status, _, body := post(t, u, "", bad); status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	if !slices.Equal(tb.tokens, []int{1000, 0}) || !slices.Equal(tb.got, []float64{0.5}) {
		t.Fatalf("set: tokens %v, rates %v", tb.tokens, tb.got)
	}
	tb.err = fmt.Errorf("consensus: %w", consensus.ErrNotLeader)
	status, _, body := post(t, u, "", map[string]any{"plan_session_tokens": 10})
	if status != http.StatusConflict || !strings.Contains(string(body), "not_leader") || !strings.Contains(string(body), ids[0].String()) {
		t.Fatalf("not the leader: %d %s", status, body)
	}
	// A backend that sets only the rate cannot set the length.
	if status, _, body = post(t, fakeServer(t, &setterBackend{fakeBackend: f}).URL+"/v1/swarm/config", "", map[string]any{"plan_session_tokens": 10}); status != http.StatusNotImplemented {
		t.Fatalf("no setter: %d %s", status, body)
	}

	var v struct {
		Config struct {
			VerifyRate        *float64 `json:"verify_rate"`
			PlanSessionTokens *int     `json:"plan_session_tokens"`
		} `json:"config"`
	}
	if _, _, body = get(t, hs.URL+"/v1/swarm", ""); json.Unmarshal(body, &v) != nil || v.Config.VerifyRate != nil || v.Config.PlanSessionTokens != nil ||
		!strings.Contains(string(body), `"config":{"verify_rate":null,"plan_session_tokens":null}`) {
		t.Fatalf("no config: %s", body)
	}
	f.mu.Lock()
	f.snap.VerifyRate, f.snap.HasVerifyRate, f.snap.SessionTokens, f.snap.HasSessionTokens = 0.05, true, 1200, true
	f.mu.Unlock()
	if _, _, body = get(t, hs.URL+"/v1/swarm", ""); json.Unmarshal(body, &v) != nil || v.Config.VerifyRate == nil || *v.Config.VerifyRate != 0.05 ||
		v.Config.PlanSessionTokens == nil || *v.Config.PlanSessionTokens != 1200 {
		t.Fatalf("config: %s", body)
	}
}

// TestSwarmConfigEndpoint: POST /v1/swarm/config sets the swarm's rate
// through the node; bad rates are refused before it, a node that is not
// the leader answers 409 naming the leader, and a backend that cannot set
// it 501.
func TestSwarmConfigEndpoint(t *testing.T) {
	f, ids := newFakeSwarm(t)
	sb := &setterBackend{fakeBackend: f}
	hs := fakeServer(t, sb)
	u := hs.URL + "/v1/swarm/config"
	if status, _, body := post(t, u, "", map[string]any{"verify_rate": 0.05}); status != http.StatusOK || !strings.Contains(string(body), `"verify_rate":0.05`) {
		t.Fatalf("set: %d %s", status, body)
	}
	for _, bad := range []string{`{"verify_rate": 1.5}`, `{"verify_rate": -0.1}`, `{}`, `{"verify_rate": "x"}`} {
		if status, _, body := post(t, u, "", bad); status != http.StatusBadRequest {
			t.Errorf("%s: %d %s", bad, status, body)
		}
	}
	if len(sb.got) != 1 || sb.got[0] != 0.05 {
		t.Fatalf("rates set: %v", sb.got)
	}
	sb.err = fmt.Errorf("consensus: %w", consensus.ErrNotLeader)
	status, _, body := post(t, u, "", map[string]any{"verify_rate": 0})
	if status != http.StatusConflict || !strings.Contains(string(body), "not_leader") || !strings.Contains(string(body), ids[0].String()) {
		t.Fatalf("not the leader: %d %s", status, body)
	}
	sb.err = fmt.Errorf("%w: verify rate 2 outside [0, 1]", consensus.ErrRejected)
	if status, _, body = post(t, u, "", map[string]any{"verify_rate": 1}); status != http.StatusBadRequest {
		t.Fatalf("rejected: %d %s", status, body)
	}
	if status, _, body = post(t, fakeServer(t, f).URL+"/v1/swarm/config", "", map[string]any{"verify_rate": 0.1}); status != http.StatusNotImplemented {
		t.Fatalf("no setter: %d %s", status, body)
	}
	if status, _, _ = get(t, u, ""); status != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", status)
	}
}
