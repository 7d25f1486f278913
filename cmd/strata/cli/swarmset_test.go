package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSwarmSetVerifyRate: the command posts the rate to the node's
// /v1/swarm/config, refuses a bad one before any request, and reports a
// node that is not the leader.
func TestSwarmSetVerifyRate(t *testing.T) {
	var got []string
	leader := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		if !leader {
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "this node is not the leader: send it to the leader, 12D3KooWX",
				"type": "invalid_request_error", "code": "not_leader"}})
			return
		}
		w.Write(b)
	}))
	defer srv.Close()
	out, err := run(t, "swarm", "set", "verify-rate", "0.05", "--api", srv.URL)
	if err != nil || !strings.Contains(out, "set to 0.05") {
		t.Fatalf("%q %v", out, err)
	}
	if len(got) != 1 || got[0] != `POST /v1/swarm/config {"verify_rate":0.05}` {
		t.Fatalf("requests %q", got)
	}
	for _, bad := range []string{"1.5", "-1", "x"} {
		if _, err := run(t, "swarm", "set", "verify-rate", bad, "--api", srv.URL); err == nil {
			t.Errorf("rate %s accepted", bad)
		}
	}
	if len(got) != 1 {
		t.Fatalf("a bad rate reached the node: %q", got)
	}
	leader = false
	if _, err := run(t, "swarm", "set", "verify-rate", "0", "--api", srv.URL); err == nil || !strings.Contains(err.Error(), "12D3KooWX") {
		t.Fatalf("not the leader: %v", err)
	}
}

// TestSwarmSetPlanSessionTokens: the command posts the length to the
// node's /v1/swarm/config and refuses a bad one before any request.
func TestSwarmSetPlanSessionTokens(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	defer srv.Close()
	for _, n := range []string{"1000", "0"} {
		out, err := run(t, "swarm", "set", "plan-session-tokens", n, "--api", srv.URL)
		if err != nil || !strings.Contains(out, "set to "+n) {
			t.Fatalf("%s: %q %v", n, out, err)
		}
	}
	if len(got) != 2 || got[0] != `POST /v1/swarm/config {"plan_session_tokens":1000}` || got[1] != `POST /v1/swarm/config {"plan_session_tokens":0}` {
		t.Fatalf("requests %q", got)
	}
	for _, bad := range []string{"-1", "1048577", "1.5", "x"} {
		if _, err := run(t, "swarm", "set", "plan-session-tokens", bad, "--api", srv.URL); err == nil {
			t.Errorf("length %s accepted", bad)
		}
	}
	if len(got) != 2 {
		t.Fatalf("a bad length reached the node: %q", got)
	}
}

// TestSwarmSetStewards: the command posts the peer IDs (comma- or
// space-separated) to the node's /v1/swarm/config and refuses a non-ID
// before any request.
func TestSwarmSetStewards(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	defer srv.Close()
	a, b := "12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq", "12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"
	out, err := run(t, "swarm", "set", "stewards", a+","+b, "--api", srv.URL)
	if err != nil || !strings.Contains(out, "stewards set to "+a+","+b) {
		t.Fatalf("%q %v", out, err)
	}
	if _, err := run(t, "swarm", "set", "stewards", a, b, "--api", srv.URL); err != nil {
		t.Fatal(err)
	}
	want := `POST /v1/swarm/config {"stewards":["` + a + `","` + b + `"]}`
	if len(got) != 2 || got[0] != want || got[1] != want {
		t.Fatalf("requests %q", got)
	}
	for _, bad := range [][]string{{"alice"}, {a + ",x"}, {","}} {
		if _, err := run(t, append(append([]string{"swarm", "set", "stewards"}, bad...), "--api", srv.URL)...); err == nil {
			t.Errorf("stewards %q accepted", bad)
		}
	}
	if len(got) != 2 {
		t.Fatalf("a bad list reached the node: %q", got)
	}
}
