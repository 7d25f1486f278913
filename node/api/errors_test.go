package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/node"
)

// TestErrorStatuses sends every kind of bad request, each to a node
// that is streaming a generation meanwhile, and checks the status, the
// error JSON, and that the generation comes out exactly as it would
// have alone.
func TestErrorStatuses(t *testing.T) {
	c := shared.get(t)
	name := c.nodes[0].Model().Name
	chat := "/v1/chat/completions"
	cmpl := "/v1/completions"
	msgs := []map[string]string{{"role": "user", "content": "Hi"}}
	long := strings.Repeat("the swarm computes every layer ", 400) // ~12 KB: far beyond 2048 tokens
	type tc struct {
		name, path string
		body       any
		status     int
		param      string // "" if any
		code       string
	}
	cases := []tc{
		{"malformed JSON", chat, `{"messages": [`, 400, "", "invalid_request"},
		{"not an object", chat, `[1, 2]`, 400, "", "invalid_request"},
		{"empty body", chat, ``, 400, "", "invalid_request"},
		{"trailing data", chat, `{"messages":[{"role":"user","content":"x"}]} {}`, 400, "", "invalid_request"},
		{"wrong type", chat, `{"messages":[{"role":"user","content":"x"}], "max_tokens": "ten"}`, 400, "max_tokens", "invalid_request"},
		{"negative max_tokens", chat, map[string]any{"messages": msgs, "max_tokens": -1}, 400, "max_tokens", "invalid_request"},
		{"zero max_tokens", cmpl, map[string]any{"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "invalid_request"},
		{"n past the bound", chat, map[string]any{"messages": msgs, "n": 9}, 400, "n", "invalid_request"},
		{"n of 0", cmpl, map[string]any{"prompt": "x", "n": 0}, 400, "n", "invalid_request"},
		{"temperature out of range", chat, map[string]any{"messages": msgs, "temperature": 3}, 400, "temperature", "invalid_request"},
		{"top_p out of range", cmpl, map[string]any{"prompt": "x", "top_p": 1.5}, 400, "top_p", "invalid_request"},
		{"no messages", chat, map[string]any{"messages": []any{}}, 400, "messages", "invalid_request"},
		{"bad role", chat, map[string]any{"messages": []map[string]string{{"role": "function", "content": "x"}}}, 400, "messages[0].role", "invalid_request"},
		{"image part", chat, map[string]any{"messages": []map[string]any{{"role": "user", "content": []map[string]any{{"type": "image_url"}}}}}, 400, "messages[0].content[0]", "invalid_request"},
		{"tools", chat, map[string]any{"messages": msgs, "tools": "get_weather"}, 400, "tools", "invalid_request"},
		{"no prompt", cmpl, map[string]any{"max_tokens": 3}, 400, "prompt", "invalid_request"},
		{"two prompts", cmpl, map[string]any{"prompt": []string{"a", "b"}}, 400, "prompt", "invalid_request"},
		{"token outside vocabulary", cmpl, map[string]any{"prompt": []int{1, 99999}}, 400, "", "invalid_request"},
		{"stop of wrong type", cmpl, map[string]any{"prompt": "x", "stop": 7}, 400, "stop", "invalid_request"},
		{"stream_options without stream", chat, map[string]any{"messages": msgs, "stream_options": map[string]any{"include_usage": true}}, 400, "stream_options", "invalid_request"},
		{"logprobs past 5", cmpl, map[string]any{"prompt": "x", "logprobs": 6}, 400, "logprobs", "invalid_request"},
		{"negative logprobs", cmpl, map[string]any{"prompt": "x", "logprobs": -1}, 400, "logprobs", "invalid_request"},
		{"logprobs true on completions", cmpl, map[string]any{"prompt": "x", "logprobs": true}, 400, "logprobs", "invalid_request"},
		{"chat logprobs not a boolean", chat, map[string]any{"messages": msgs, "logprobs": 3}, 400, "logprobs", "invalid_request"},
		{"top_logprobs past 20", chat, map[string]any{"messages": msgs, "logprobs": true, "top_logprobs": 21}, 400, "top_logprobs", "invalid_request"},
		{"negative top_logprobs", chat, map[string]any{"messages": msgs, "logprobs": true, "top_logprobs": -1}, 400, "top_logprobs", "invalid_request"},
		{"top_logprobs without logprobs", chat, map[string]any{"messages": msgs, "top_logprobs": 2}, 400, "top_logprobs", "invalid_request"},
		{"unknown model", chat, map[string]any{"model": "gpt-4o", "messages": msgs}, 404, "model", "model_not_found"},
		{"unknown model, streaming", chat, map[string]any{"model": "gpt-4o", "messages": msgs, "stream": true}, 404, "model", "model_not_found"},
		{"prompt beyond the context", cmpl, map[string]any{"model": name, "prompt": long}, 413, "prompt", "context_length_exceeded"},
		{"chat beyond the context", chat, map[string]any{"messages": []map[string]string{{"role": "user", "content": long}}}, 413, "messages", "context_length_exceeded"},
		{"max_tokens beyond the context", cmpl, map[string]any{"prompt": "x", "max_tokens": 1 << 20}, 413, "prompt", "context_length_exceeded"},
		{"10 MB body", chat, bytes.Repeat([]byte(" "), 10<<20), 413, "", "request_too_large"},
		{"wrong method", "/v1/chat/completions", nil, 405, "", "method_not_allowed"},
		{"no such endpoint", "/v1/embeddings", map[string]any{"input": "x"}, 404, "", "not_found"},
	}

	// The bystanders: one long stream per node, started before the bad
	// requests and read to the end after.
	ref, err := c.nodes[0].Complete(context.Background(), node.Request{Prompt: "Hello", MaxTokens: 600})
	if err != nil {
		t.Fatal(err)
	}
	want := jsonText(ref.Text)
	var wg sync.WaitGroup
	results := make([]streamed, len(c.urls))
	for i, u := range c.urls {
		st := openStream(t, u+cmpl, "", map[string]any{"prompt": "Hello", "max_tokens": 600, "temperature": 0, "stream": true})
		wg.Add(1)
		go func() { defer wg.Done(); results[i] = st.readAll(t, nil) }()
	}

	for i, tc := range cases {
		u := c.urls[i%len(c.urls)] + tc.path
		var status int
		var hdr http.Header
		var body []byte
		if tc.body == nil {
			status, hdr, body = get(t, u, "")
		} else {
			status, hdr, body = post(t, u, "", tc.body)
		}
		e := errorOf(t, body)
		if status != tc.status || str(e.Code) != tc.code || (tc.param != "" && str(e.Param) != tc.param) {
			t.Errorf("%s: %d %s; want %d param %q code %q", tc.name, status, body, tc.status, tc.param, tc.code)
			continue
		}
		if ct := hdr.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: content type %q", tc.name, ct)
		}
		if tc.status == 405 && hdr.Get("Allow") != "POST" {
			t.Errorf("%s: Allow %q", tc.name, hdr.Get("Allow"))
		}
		t.Logf("%-32s %d %-24s %s", tc.name, status, str(e.Code), e.Message)
	}
	// A body of unknown length (chunked) over the cap: cut while read.
	req, _ := http.NewRequest(http.MethodPost, c.urls[0]+chat, io.MultiReader(strings.NewReader(`{"messages":[{"role":"user","content":"`),
		strings.NewReader(strings.Repeat("x", 5<<20)), strings.NewReader(`"}]}`)))
	status, _, body := do(t, req)
	if e := errorOf(t, body); status != http.StatusRequestEntityTooLarge || str(e.Code) != "request_too_large" {
		t.Errorf("chunked 5 MB body: %d %s", status, body)
	}
	wg.Wait()
	for i, r := range results {
		if !r.done || r.errObj != nil || r.text != want {
			t.Fatalf("bystander stream on node %d: done %v, error %+v, text equal %v", i, r.done, r.errObj, r.text == want)
		}
	}
}

// TestAPIKey: with a key, every endpoint but /healthz wants it, and a
// wrong one is refused like a missing one.
func TestAPIKey(t *testing.T) {
	c := shared.get(t)
	const key = "sk-strata-test-0123456789"
	s, err := New(NodeBackend(c.nodes[1]), WithAPIKey(key), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + addr.String()
	for _, path := range []string{"/v1/models", "/v1/swarm", "/metrics"} {
		for _, k := range []string{"", "wrong", key + "x", key[:len(key)-1]} {
			status, hdr, body := get(t, u+path, k)
			if e := errorOf(t, body); status != http.StatusUnauthorized || str(e.Code) != "invalid_api_key" || hdr.Get("WWW-Authenticate") == "" {
				t.Fatalf("%s with key %q: %d %s", path, k, status, body)
			}
		}
		if status, _, body := get(t, u+path, key); status != http.StatusOK {
			t.Fatalf("%s with the key: %d %s", path, status, body)
		}
	}
	body := map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hi"}}, "max_tokens": 4}
	if status, _, raw := post(t, u+"/v1/chat/completions", "", body); status != http.StatusUnauthorized {
		t.Fatalf("chat without a key: %d %s", status, raw)
	}
	if status, _, raw := post(t, u+"/v1/chat/completions", key, body); status != http.StatusOK {
		t.Fatalf("chat with the key: %d %s", status, raw)
	}
	if status, _, _ := get(t, u+"/healthz", ""); status != http.StatusOK {
		t.Fatalf("healthz without a key: %d", status)
	}
}

// TestDrainRefusesNewKeepsRunning: after Drain, new generations get 503
// with Retry-After while a running stream ends normally, and WaitIdle
// returns once it has.
func TestDrainRefusesNewKeepsRunning(t *testing.T) {
	c := shared.get(t)
	s, err := New(NodeBackend(c.nodes[2]), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + addr.String()
	st := openStream(t, u+"/v1/completions", "", map[string]any{"prompt": "Hello", "max_tokens": 400, "temperature": 0, "stream": true})
	first, ok := st.next()
	if !ok {
		t.Fatal("no first event")
	}
	_ = first
	s.Drain()
	status, hdr, body := post(t, u+"/v1/completions", "", map[string]any{"prompt": "x", "max_tokens": 2})
	if e := errorOf(t, body); status != http.StatusServiceUnavailable || str(e.Code) != "draining" || hdr.Get("Retry-After") == "" {
		t.Fatalf("during drain: %d %s (Retry-After %q)", status, body, hdr.Get("Retry-After"))
	}
	if status, _, _ := get(t, u+"/healthz", ""); status != http.StatusServiceUnavailable {
		t.Fatalf("healthz while draining: %d", status)
	}
	if status, _, _ := get(t, u+"/v1/swarm", ""); status != http.StatusOK {
		t.Fatalf("swarm view while draining: %d", status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	if err := s.WaitIdle(ctx); err == nil && s.InFlight() > 0 {
		t.Fatal("WaitIdle returned with a stream running")
	}
	cancel()
	done := make(chan streamed)
	go func() { done <- st.readAll(t, nil) }()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !r.done || r.errObj != nil {
		t.Fatalf("the running stream: %+v", r)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownCutsStreamsWithAnErrorEvent: a shutdown whose deadline
// passes ends a running stream with an error event, not a silent cut.
func TestShutdownCutsStreamsWithAnErrorEvent(t *testing.T) {
	c := shared.get(t)
	s, err := New(NodeBackend(c.nodes[0]), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := openStream(t, "http://"+addr.String()+"/v1/chat/completions", "", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}, "max_tokens": 1800, "temperature": 0, "stream": true})
	if _, ok := st.next(); !ok {
		t.Fatal("no first event")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown cut a stream and returned nil")
	}
	r := st.readAll(t, nil)
	if r.done || r.errObj == nil || str(r.errObj.Code) != "shutting_down" {
		t.Fatalf("stream after a forced shutdown: done %v, error %+v", r.done, r.errObj)
	}
	t.Logf("stream ended with: %s: %s", str(r.errObj.Code), r.errObj.Message)
}

// TestStreamErrorWhenSessionLost: the only holder of half the layers
// dies in mid-stream; with no path left the generation cannot continue,
// and the stream ends with an error event (no [DONE]); a new request
// then gets 503 with Retry-After.
func TestStreamErrorWhenSessionLost(t *testing.T) {
	// A request refused for want of a path waits in the entry's queue
	// for its deadline first (30 s by default): 2 s here.
	c := startCluster(t, 2, node.WithRepairWait(time.Second), node.WithEntryQueue(1024, 2*time.Second))
	defer c.close()
	m := c.nodes[0].Committed()
	t.Logf("2-node swarm: %v", m.Stages)
	entry, victim := 0, 1
	if r, _ := m.Range(c.nodes[1].ID().String()); r.Start == 0 {
		entry, victim = 1, 0
	}
	// A non-streaming request in flight at the kill gets 503 session_lost.
	type answer struct {
		status int
		hdr    http.Header
		body   []byte
	}
	whole := make(chan answer, 1)
	go func() {
		status, hdr, body := post(t, c.urls[entry]+"/v1/completions", "", map[string]any{"prompt": "Hello", "max_tokens": 1800, "temperature": 0})
		whole <- answer{status, hdr, body}
	}()
	st := openStream(t, c.urls[entry]+"/v1/chat/completions", "", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}, "max_tokens": 1800, "temperature": 0, "stream": true})
	var got int
	var once sync.Once
	var killedAt time.Time
	r := st.readAll(t, func(string) {
		got++
		if got == 5 {
			once.Do(func() { killedAt = time.Now(); go c.nodes[victim].Kill() })
		}
	})
	if killedAt.IsZero() {
		t.Fatalf("the stream ended after %d chunks, before the kill: %+v", got, r)
	}
	if r.done || r.errObj == nil || str(r.errObj.Code) != "session_lost" || r.errObj.Type != "server_error" {
		t.Fatalf("stream after the kill: done %v, finish %q, error %+v", r.done, r.finish, r.errObj)
	}
	t.Logf("stream ended %v after the kill, %d text chunks in: %s: %s", time.Since(killedAt).Round(time.Millisecond), r.chunks, str(r.errObj.Code), r.errObj.Message)

	status, hdr, body := post(t, c.urls[entry]+"/v1/chat/completions", "", map[string]any{
		"messages": []map[string]string{{"role": "user", "content": "Hello"}}, "max_tokens": 4})
	// Refused once the entry has seen the death: no_capacity while the
	// victim is a dead member, layers_uncovered at once once it left (the
	// survivor cannot hold its layers); routed to the dead holder and lost
	// (session_lost) if the entry has not seen it yet, which a loaded
	// machine can delay past the stream's end. All are a 503 the client
	// retries.
	if e := errorOf(t, body); status != http.StatusServiceUnavailable ||
		(str(e.Code) != "no_capacity" && str(e.Code) != "session_lost" && str(e.Code) != "layers_uncovered") || hdr.Get("Retry-After") == "" {
		t.Fatalf("with no full path: %d %s (Retry-After %q)", status, body, hdr.Get("Retry-After"))
	}
	// The whole request was sent beside the stream, so it is either lost
	// with its session or, when its routing came after the kill, refused:
	// both are a 503 with Retry-After, never a success or a hang.
	w := <-whole
	if e := errorOf(t, w.body); w.status != http.StatusServiceUnavailable ||
		(str(e.Code) != "session_lost" && str(e.Code) != "no_capacity" && str(e.Code) != "layers_uncovered") || w.hdr.Get("Retry-After") == "" {
		t.Fatalf("a whole request sent beside the stream: %d %s", w.status, w.body)
	}
}
