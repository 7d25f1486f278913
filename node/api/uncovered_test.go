package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node"
)

// TestUncoveredSwarmRefusals: what a new user meets on a one-node swarm
// whose node offers 3 of stories260K's 5 layers (a real node, the real
// engine, its API on loopback). Completions, streamed or not, and chat
// completions are answered 503 layers_uncovered in OpenAI's error JSON at
// once, not after the queue's 30 s, naming the layers no node holds and
// what the swarm waits for; /v1/models still lists the model; the health
// check and /v1/swarm say why the node does not serve, and the Go client
// decodes /v1/swarm's empty map and reads the reason.
func TestUncoveredSwarmRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nd, err := node.New(ctx, nodeOptions(node.WithModelFile("../../testdata/models/stories260K.gguf"), node.WithMaxLayers(3))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	s, err := New(NodeBackend(nd), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String()
	const why = "no path: layers [3,5) are served by no node; the swarm waits for more nodes (1 node, max 3 layers each; the model has 5)"

	for _, c := range []struct {
		name, path string
		body       map[string]any
	}{
		{"completion", "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4}},
		{"streamed completion", "/v1/completions", map[string]any{"prompt": "Once upon a time", "max_tokens": 4, "stream": true}},
		{"chat", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 4}},
		{"streamed chat", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 4, "stream": true}},
	} {
		start := time.Now()
		status, hdr, body := post(t, url+c.path, "", c.body)
		took := time.Since(start)
		e := errorOf(t, body)
		if status != http.StatusServiceUnavailable || str(e.Code) != "layers_uncovered" || e.Type != "server_error" ||
			!strings.HasPrefix(e.Message, why) || hdr.Get("Retry-After") != "5" || hdr.Get(QueueWaitHeader) == "" {
			t.Fatalf("%s: %d %v %s", c.name, status, hdr, body)
		}
		if took > 10*time.Second {
			t.Fatalf("%s: refused after %v, not at once", c.name, took)
		}
	}

	status, _, body := get(t, url+"/v1/models", "")
	var l modelList
	if err := json.Unmarshal(body, &l); err != nil || status != http.StatusOK || len(l.Data) != 1 || l.Data[0].Layers != 5 {
		t.Fatalf("models with no map: %d %s", status, body)
	}

	status, _, body = get(t, url+"/healthz?ready=1", "")
	var h healthJSON
	if err := json.Unmarshal(body, &h); err != nil || status != http.StatusServiceUnavailable || h.Routable || !strings.HasPrefix(h.NotReady, why) {
		t.Fatalf("ready: %d %s", status, body)
	}

	cl, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Committed layers.LayerMap `json:"committed"`
		Routable  bool            `json:"routable"`
		NotReady  string          `json:"not_ready"`
	}
	if err := cl.Swarm(ctx, &v); err != nil || v.Committed.Layers != 0 || v.Routable || !strings.HasPrefix(v.NotReady, why) {
		t.Fatalf("swarm view: %+v, %v", v, err)
	}
	if w, err := cl.NotReady(ctx); err != nil || !strings.HasPrefix(w, why) {
		t.Fatalf("client's not-ready reason %q, %v", w, err)
	}
	_, err = cl.Complete(ctx, CompletionRequest{Prompt: "Once upon a time", MaxTokens: 4})
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != "layers_uncovered" || ae.RetryAfter != 5*time.Second || !strings.HasPrefix(ae.Message, why) {
		t.Fatalf("client's completion: %v", err)
	}
	_, err = cl.ChatStream(ctx, ChatRequest{Messages: []engine.Message{{Role: "user", Content: "hi"}}, MaxTokens: 4}, func(string) error { return nil })
	if !errors.As(err, &ae) || ae.Code != "layers_uncovered" {
		t.Fatalf("client's chat stream: %v", err)
	}
}

// TestMessageStripsOnlyPrefixes: the package prefixes of wrapped
// sentinels go; the same words inside a sentence stay.
func TestMessageStripsOnlyPrefixes(t *testing.T) {
	err := errors.New("node: no capacity: node: no path: layers [3,5) are served by no node: api: x")
	if got, want := message(err), "no capacity: no path: layers [3,5) are served by no node: x"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
}
