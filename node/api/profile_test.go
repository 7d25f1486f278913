package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stratanet/strata/routing"
)

// postProfile posts body with the profile header set (when not "").
func postProfile(t *testing.T, url, header string, body map[string]any) (int, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set(ProfileHeader, header)
	}
	status, _, b := do(t, req)
	return status, b
}

// TestRequestProfile: a request picks its scheduling profile by the body
// field or the header (the body wins); an unknown one is a 400
// unknown_profile in OpenAI's error shape, on both endpoints.
func TestRequestProfile(t *testing.T) {
	c := shared.get(t)
	def := c.nodes[0].Swarm().Scheduler.Default
	u := c.urls[0]
	comp := func(extra map[string]any) map[string]any {
		m := map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	chat := func(extra map[string]any) map[string]any {
		m := map[string]any{"messages": []map[string]any{{"role": "user", "content": "Hi"}}, "max_tokens": 2}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	want := textOf(completion(t, u+"/v1/completions", comp(nil)))
	for _, tc := range []struct {
		name, header string
		body         map[string]any
	}{
		{"body", "", comp(map[string]any{"profile": def})},
		{"header", def, comp(nil)},
		{"body wins over header", "nope", comp(map[string]any{"profile": def})},
	} {
		status, raw := postProfile(t, u+"/v1/completions", tc.header, tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, status, raw)
		}
		var r responseJSON
		if err := json.Unmarshal(raw, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("%s: %s: %v", tc.name, raw, err)
		}
		if got := textOf(r); got != want {
			t.Fatalf("%s: greedy text %q, without a profile %q", tc.name, got, want)
		}
	}
	for _, tc := range []struct {
		name, path, header string
		body               map[string]any
	}{
		{"completions body", "/v1/completions", "", comp(map[string]any{"profile": "nope"})},
		{"completions header", "/v1/completions", "nope", comp(nil)},
		{"chat body", "/v1/chat/completions", "", chat(map[string]any{"profile": "nope"})},
		{"chat header", "/v1/chat/completions", "nope", chat(nil)},
	} {
		status, raw := postProfile(t, u+tc.path, tc.header, tc.body)
		e := errorOf(t, raw)
		if status != http.StatusBadRequest || str(e.Code) != "unknown_profile" || str(e.Param) != "profile" ||
			e.Type != typeInvalid || !strings.Contains(e.Message, `"nope"`) || !strings.Contains(e.Message, def) {
			t.Fatalf("%s: %d %s", tc.name, status, raw)
		}
	}
	// A name no configuration could hold is refused before the node.
	status, raw := postProfile(t, u+"/v1/completions", "", comp(map[string]any{"profile": strings.Repeat("p", maxProfileLen+1)}))
	if e := errorOf(t, raw); status != http.StatusBadRequest || str(e.Code) != "invalid_request" || str(e.Param) != "profile" {
		t.Fatalf("long profile: %d %s", status, raw)
	}
	status, raw = postProfile(t, u+"/v1/completions", "", comp(map[string]any{"profile": 3}))
	if status != http.StatusBadRequest {
		t.Fatalf("numeric profile: %d %s", status, raw)
	}
}

// TestSchedulerEndpoint: GET /v1/swarm/scheduler shows the effective
// configuration, defaults filled in, and the plugin names.
func TestSchedulerEndpoint(t *testing.T) {
	raw, err := os.ReadFile("../../routing/testdata/scheduler/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := routing.ParseSchedulerConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := fakeProfiles(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := newFakeSwarm(t)
	f.snap.Scheduler = ps.Config()
	hs := fakeServer(t, f)
	for _, tc := range []struct {
		url  string
		want routing.SchedulerConfig
	}{
		{hs.URL, ps.Config()},
		{shared.get(t).urls[1], shared.get(t).nodes[1].Swarm().Scheduler},
	} {
		status, _, body := get(t, tc.url+"/v1/swarm/scheduler", "")
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.url, status, body)
		}
		var got schedulerJSON
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.SchedulerConfig, tc.want) {
			t.Fatalf("%s: config\n got %+v\nwant %+v", tc.url, got.SchedulerConfig, tc.want)
		}
		if !slices.Equal(got.Filters, routing.FilterPlugins()) || !slices.Equal(got.Scorers, routing.ScorerPlugins()) || len(got.Pickers) != 3 {
			t.Fatalf("%s: plugins %v %v %v", tc.url, got.Filters, got.Scorers, got.Pickers)
		}
		t.Logf("%s", body)
	}
	if len(ps.Names()) < 2 {
		t.Fatalf("the example has %d profiles; the test wants several", len(ps.Names()))
	}
	status, _, _ := post(t, hs.URL+"/v1/swarm/scheduler", "", "{}")
	if status != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", status)
	}
}

// TestQueueWaitHeader: an answered request says how long it waited for
// admission, in seconds; asking not to queue on a swarm with room makes
// no difference.
func TestQueueWaitHeader(t *testing.T) {
	c := shared.get(t)
	for _, body := range []string{`{"prompt":"Once upon a time","max_tokens":2,"temperature":0}`,
		`{"prompt":"Once upon a time","max_tokens":2,"temperature":0,"queue_timeout":0}`} {
		req, err := http.NewRequest(http.MethodPost, c.urls[0]+"/v1/completions", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		status, hdr, raw := do(t, req)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", body, status, raw)
		}
		w, err := strconv.ParseFloat(hdr.Get(QueueWaitHeader), 64)
		if err != nil || w < 0 || w > 60 {
			t.Fatalf("%s: %s %q (%v)", body, QueueWaitHeader, hdr.Get(QueueWaitHeader), err)
		}
	}
}
