package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestSwarmView: every node's view names the same members, leader,
// voters and committed map, with each member's addresses, state,
// capabilities, range and load.
func TestSwarmView(t *testing.T) {
	c := shared.get(t)
	// A member's state comes from its heartbeats, so a swarm that just
	// committed its map may still show a member joining for up to one
	// heartbeat: read the views until every member reads serving and
	// every view names the leader.
	var views []swarmJSON
	serving := func() bool {
		views = views[:0]
		for _, u := range c.urls {
			status, _, body := get(t, u+"/v1/swarm", "")
			if status != http.StatusOK {
				t.Fatalf("swarm: %d %s", status, body)
			}
			var v swarmJSON
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			views = append(views, v)
		}
		for _, v := range views {
			// The leader is polled (WithLeaderPoll): a view may not name
			// it yet right after the swarm forms.
			if v.Leader == nil {
				return false
			}
			for _, m := range v.Members {
				if m.State != "serving" {
					return false
				}
			}
		}
		return true
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(20 * time.Second); !serving() && time.Now().Before(deadline); {
		<-tick.C
	}
	for i, v := range views {
		if v.Node != c.nodes[i].ID().String() || v.StaticMap || v.Leader == nil || v.Epoch == 0 || !v.Committed.Covers() {
			t.Fatalf("view %d: node %s leader %v epoch %d committed %v", i, v.Node, v.Leader, v.Epoch, v.Committed)
		}
		if *v.Leader != *views[0].Leader || v.Epoch != views[0].Epoch || len(v.Voters) != 3 {
			t.Fatalf("view %d: leader %s epoch %d voters %v; view 0: %s %d", i, *v.Leader, v.Epoch, v.Voters, *views[0].Leader, views[0].Epoch)
		}
		if v.Model.ID != c.nodes[0].Model().Name || v.Model.Simulated {
			t.Fatalf("view %d model %+v", i, v.Model)
		}
		if len(v.Members) != 3 {
			t.Fatalf("view %d: %d members", i, len(v.Members))
		}
		for _, m := range v.Members {
			want := "alive"
			if m.ID == v.Node {
				want = "self"
			}
			if !m.Member || !m.Voter || m.Liveness != want || m.State != "serving" || len(m.Multiaddrs) == 0 ||
				m.Capabilities == nil || m.Capabilities.Hardware.Name != testHW.Name || m.Committed == nil || m.Load == nil ||
				m.Engine != "go" {
				t.Fatalf("view %d member %+v", i, m)
			}
			if m.Load.Range != *m.Committed || m.Load.Epoch == 0 || m.Load.Epoch > v.Epoch || m.Load.FreeKV <= 0 {
				t.Fatalf("view %d member %s load %+v, committed %v", i, m.ID, *m.Load, *m.Committed)
			}
			if !strings.Contains(m.Multiaddrs[0], "/ip4/127.0.0.1/tcp/") {
				t.Fatalf("member %s addrs %v", m.ID, m.Multiaddrs)
			}
			if m.Self != (m.ID == v.Node) {
				t.Fatalf("member %s self %v", m.ID, m.Self)
			}
		}
	}
	b, _ := json.MarshalIndent(views[0].Members[0], "", "  ")
	t.Logf("leader %s, epoch %d, voters %d; a member: %s", *views[0].Leader, views[0].Epoch, len(views[0].Voters), b)
}

// scrape fetches and parses /metrics with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	status, hdr, body := get(t, url+"/metrics", "")
	if status != http.StatusOK {
		t.Fatalf("metrics: %d %s", status, body)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("metrics content type %q", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	return fams
}

// value is the value of family name's series with the given labels.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics: after requests of each kind, /metrics parses and holds
// the request, token, latency and swarm figures.
func TestMetrics(t *testing.T) {
	c := shared.get(t)
	u := c.urls[0]
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	completion(t, u+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0})
	openStream(t, u+"/v1/chat/completions", "", map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0, "stream": true}).readAll(t, nil)
	post(t, u+"/v1/chat/completions", "", `{"messages":`)
	post(t, u+"/v1/chat/completions", "", map[string]any{"model": "nope", "messages": msgs})
	fams := scrape(t, u)
	for _, check := range []struct {
		name   string
		labels []string
		min    float64
	}{
		{"strata_api_requests_total", []string{"endpoint", "chat_completions", "code", "200"}, 2},
		{"strata_api_requests_total", []string{"endpoint", "chat_completions", "code", "400"}, 1},
		{"strata_api_requests_total", []string{"endpoint", "chat_completions", "code", "404"}, 1},
		{"strata_api_tokens_total", []string{"kind", "completion"}, 16},
		{"strata_api_tokens_total", []string{"kind", "prompt"}, 2},
		{"strata_api_time_to_first_token_seconds", []string{"endpoint", "chat_completions"}, 2},
		{"strata_api_token_latency_seconds", []string{"endpoint", "chat_completions"}, 14},
		{"strata_api_generations_in_flight", nil, 0},
		{"strata_node_generations_total", nil, 2},
		{"strata_hop_failures_total", nil, 0},
		{"strata_replays_total", nil, 0},
		{"strata_verify_checks_total", []string{"result", "verified"}, 0},
		{"strata_verify_checks_total", []string{"result", "mismatch"}, 0},
		{"strata_verify_unchecked_total", nil, 0},
		{"strata_verify_faults_reported_total", nil, 0},
		{"strata_verify_steps_checked_total", nil, 0},
		{"strata_verify_first_mismatch_timestamp_seconds", nil, 0},
		{"strata_verify_rate", nil, 0},
		{"strata_verify_tolerance_checks_total", []string{"result", "agreed"}, 0},
		{"strata_verify_tolerance_checks_total", []string{"result", "mismatch"}, 0},
		{"strata_verify_tolerance_max_agreeing_delta", nil, 0},
		{"strata_queue_depth", nil, 0},
		{"strata_scheduler_plugin_seconds", []string{"profile", "default", "plugin", "latency", "kind", "scorer"}, 2},
		{"strata_scheduler_plugin_seconds", []string{"profile", "default", "plugin", "live", "kind", "filter"}, 2},
		{"strata_scheduler_plugin_seconds", []string{"profile", "default", "plugin", "best-of-slack", "kind", "picker"}, 2},
		{"strata_kv_free_tokens", nil, 1},
		{"strata_stage_sessions", nil, 0},
		{"strata_epoch", nil, 1},
		{"strata_members", nil, 3},
		{"strata_peers", []string{"liveness", "alive"}, 2},
		{"strata_leader_changes_total", nil, 0},
		{"strata_is_leader", nil, 0},
		{"go_goroutines", nil, 1},
	} {
		v, ok := value(fams, check.name, check.labels...)
		if !ok || v < check.min {
			t.Errorf("%s%v = %v (present %v), want ≥ %v", check.name, check.labels, v, ok, check.min)
		}
	}
	// The layers node 0 holds are its range in the committed map, however
	// the planner split the 8 layers (each node may hold 4; under load the
	// measured speeds can give node 0 three).
	if r, ok := c.nodes[0].Committed().Range(c.nodes[0].ID().String()); !ok {
		t.Errorf("node 0 has no range in the committed map")
	} else if v, ok := value(fams, "strata_layers_held"); !ok || v != float64(r.Len()) {
		t.Errorf("strata_layers_held = %v (present %v), want %d: node 0 holds %v", v, ok, r.Len(), r)
	}
	// Exactly one leader among the nodes, by their own metrics; during a
	// handover (another test may have moved the leader) two scrapes can
	// disagree for a moment, so look again for a while.
	leaders := 0.0
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
scrapes:
	for {
		leaders = 0
		for _, u := range c.urls {
			v, _ := value(scrape(t, u), "strata_is_leader")
			leaders += v
		}
		if leaders == 1 {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			break scrapes
		}
	}
	if leaders != 1 {
		t.Fatalf("%v nodes say they lead", leaders)
	}
	t.Logf("%d metric families", len(fams))
}

// TestLeaderChangesCounted: the counter moves when the leader does.
func TestLeaderChangesCounted(t *testing.T) {
	w := &leaderWatch{}
	w.observe("a", true)
	w.observe("a", true)
	w.observe("", false) // an election: no change yet
	w.observe("b", true)
	w.observe("a", true)
	if w.count() != 2 {
		t.Fatalf("%d changes, want 2", w.count())
	}
}

// TestConverse drives `strata chat`'s loop: two turns keep the history
// (the second reply is the one a whole request with that history gets),
// /reset forgets it, and a failing turn is reported and left out.
func TestConverse(t *testing.T) {
	c := shared.get(t)
	cl, err := NewClient(c.urls[1] + "/v1/")
	if err != nil {
		t.Fatal(err)
	}
	temp, seed := 0.0, int64(1)
	in := strings.NewReader("Hello\n\nTell me more\n/reset\nHello\n")
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := ConverseOptions{MaxTokens: 12, Temperature: &temp, Seed: &seed, Prompt: "> "}
	if err := Converse(ctx, cl, o, in, &out); err != nil {
		t.Fatal(err)
	}
	whole := func(msgs ...map[string]string) string {
		return textOf(completion(t, c.urls[0]+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 12, "temperature": 0}))
	}
	r1 := whole(map[string]string{"role": "user", "content": "Hello"})
	r2 := whole(map[string]string{"role": "user", "content": "Hello"}, map[string]string{"role": "assistant", "content": r1},
		map[string]string{"role": "user", "content": "Tell me more"})
	want := "> " + r1 + "\n> > " + r2 + "\n> (history cleared)\n> " + r1 + "\n> "
	if out.String() != want {
		t.Fatalf("conversation:\n%q\nwant\n%q", out.String(), want)
	}

	// A wrong model: each turn reports the error and the loop goes on.
	out.Reset()
	o.Model = "nope"
	if err := Converse(ctx, cl, o, strings.NewReader("a\nb\n"), &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "error: 404 model_not_found"); n != 2 {
		t.Fatalf("output %q", out.String())
	}
}
