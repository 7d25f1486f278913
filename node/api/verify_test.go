package api

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

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
	if v.Node != ids[0].String() || v.FirstMismatch != nil || v.Log == nil || len(v.Log) != 0 {
		t.Fatalf("no checks yet: %+v", v)
	}

	t0 := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	f.mu.Lock()
	f.verify = node.VerifyStats{Rate: 0.05, Audits: 4, Verified: 2, Positions: 70, Mismatches: 1, Inconclusive: 1,
		Checked: 110, FirstMismatch: t0.Add(2 * time.Second), CheckedAtFirstMismatch: 110,
		Log: []node.CheckRecord{{At: t0, Positions: 30}, {At: t0.Add(time.Second), Positions: 40},
			{At: t0.Add(2 * time.Second), Positions: 40, Mismatch: true}}}
	f.mu.Unlock()
	if _, _, body = get(t, hs.URL+"/v1/swarm/verify", ""); json.Unmarshal(body, &v) != nil {
		t.Fatalf("bad body %s", body)
	}
	if v.Rate != 0.05 || v.Checks != 4 || v.Verified != 2 || v.Mismatches != 1 || v.Inconclusive != 1 ||
		v.PositionsVerified != 70 || v.StepsChecked != 110 || v.StepsAtFirstMismatch != 110 {
		t.Errorf("counters: %+v", v)
	}
	if v.FirstMismatch == nil || !v.FirstMismatch.Equal(t0.Add(2*time.Second)) {
		t.Errorf("first mismatch %v", v.FirstMismatch)
	}
	if len(v.Log) != 3 || !v.Log[2].Mismatch || v.Log[0].Mismatch || v.Log[1].Positions != 40 || !v.Log[1].At.Equal(t0.Add(time.Second)) {
		t.Errorf("log %+v", v.Log)
	}
}
