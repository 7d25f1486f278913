package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

func TestModels(t *testing.T) {
	c := shared.get(t)
	in := c.nodes[0].Model()
	for _, u := range c.urls {
		status, _, body := get(t, u+"/v1/models", "")
		if status != http.StatusOK {
			t.Fatalf("models: %d %s", status, body)
		}
		var l modelList
		if err := json.Unmarshal(body, &l); err != nil || l.Object != "list" || len(l.Data) != 1 {
			t.Fatalf("models %s: %v", body, err)
		}
		m := l.Data[0]
		// model gen writes its family's chat template into the file.
		if m.ID != in.Name || m.Object != "model" || m.Layers != 8 || m.Context != in.Context || m.Simulated || !m.ChatTemplate {
			t.Fatalf("model %+v, node serves %+v", m, in)
		}
	}
	status, _, body := get(t, c.urls[1]+"/v1/models/"+in.Name, "")
	if status != http.StatusOK {
		t.Fatalf("model by ID: %d %s", status, body)
	}
	status, _, body = get(t, c.urls[1]+"/v1/models/gpt-4o", "")
	if e := errorOf(t, body); status != http.StatusNotFound || str(e.Code) != "model_not_found" {
		t.Fatalf("unknown model by ID: %d %s", status, body)
	}
}

// completion runs a non-streaming request and decodes the response.
func completion(t *testing.T, url string, body map[string]any) responseJSON {
	t.Helper()
	status, _, raw := post(t, url, "", body)
	if status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, status, raw)
	}
	var r struct {
		responseJSON
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	r.responseJSON.Usage = r.Usage
	if len(r.Choices) != 1 || r.Choices[0].FinishReason == nil || r.Usage == nil || r.Created == 0 || r.Model == "" {
		t.Fatalf("response %s", raw)
	}
	u := r.Usage
	if u.PromptTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("usage %+v", u)
	}
	return r.responseJSON
}

func textOf(r responseJSON) string {
	if m := r.Choices[0].Message; m != nil {
		return *m.Content
	}
	return *r.Choices[0].Text
}

// TestCompletions: /v1/completions gives the tokens the node gives in
// process (the same seed, the same text), on every entry, streaming or
// not, with usage, max_tokens, stop and token prompts.
func TestCompletions(t *testing.T) {
	c := shared.get(t)
	const prompt = "Once upon a time"
	for _, sp := range []map[string]any{
		{"temperature": 0},
		{"temperature": 0.9, "top_p": 0.95, "seed": 9},
	} {
		req := map[string]any{"model": c.nodes[0].Model().Name, "prompt": prompt, "max_tokens": 40}
		for k, v := range sp {
			req[k] = v
		}
		want, err := c.nodes[0].Complete(context.Background(), node.Request{Prompt: prompt, MaxTokens: 40,
			Sampling: samplingOf(sp)})
		if err != nil {
			t.Fatal(err)
		}
		wantText := jsonText(want.Text)
		for i, u := range c.urls {
			r := completion(t, u+"/v1/completions", req)
			if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") {
				t.Fatalf("object %q id %q", r.Object, r.ID)
			}
			if got := textOf(r); got != wantText {
				t.Fatalf("node %d %v: text %q, in-process %q", i, sp, got, wantText)
			}
			usage := r.Usage.(*usageJSON)
			if usage.CompletionTokens != len(want.Tokens) || *r.Choices[0].FinishReason != want.FinishReason {
				t.Fatalf("usage %+v finish %s; in-process %d tokens, %s", usage, *r.Choices[0].FinishReason, len(want.Tokens), want.FinishReason)
			}
			if r.Strata == nil || len(r.Strata.Paths) == 0 || !strings.Contains(r.Strata.Paths[0], "→") {
				t.Fatalf("strata %+v: want a multi-hop path", r.Strata)
			}
			st := openStream(t, u+"/v1/completions", "", withStream(req, true))
			s := st.readAll(t, nil)
			if !s.done || s.errObj != nil || s.text != wantText || s.finish != want.FinishReason || s.objects["text_completion"] == 0 {
				t.Fatalf("node %d stream: %+v; want %q", i, s, wantText)
			}
			if s.usage != nil {
				t.Fatalf("usage in a stream that did not ask for it")
			}
			if s.ids != nil || r.Choices[0].TokenIDs != nil {
				t.Fatalf("token IDs nobody asked for")
			}
		}
		// return_token_ids: the sampled tokens, streamed or whole.
		withIDs := withStream(req, true)
		withIDs["return_token_ids"] = true
		s := openStream(t, c.urls[1]+"/v1/completions", "", withIDs).readAll(t, nil)
		if !slices.Equal(s.ids, want.Tokens) || s.text != wantText {
			t.Fatalf("stream token_ids %v %q, in-process %v %q", s.ids, s.text, want.Tokens, wantText)
		}
		withIDs["stream"] = false
		if r := completion(t, c.urls[2]+"/v1/completions", withIDs); !slices.Equal(r.Choices[0].TokenIDs, want.Tokens) {
			t.Fatalf("token_ids %v, in-process %v", r.Choices[0].TokenIDs, want.Tokens)
		}
		t.Logf("%v: %d tokens, %q", sp, len(want.Tokens), wantText)
	}

	// max_tokens: the cap, and finish_reason "length".
	r := completion(t, c.urls[0]+"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 5, "temperature": 0})
	if u := r.Usage.(*usageJSON); u.CompletionTokens != 5 || *r.Choices[0].FinishReason != node.FinishLength {
		t.Fatalf("max_tokens 5: usage %+v, finish %s", u, *r.Choices[0].FinishReason)
	}
	// A token prompt gives the same as its text.
	tok, err := engine.LoadTokenizer(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("Hello", true, false)
	rt := completion(t, c.urls[1]+"/v1/completions", map[string]any{"prompt": ids, "max_tokens": 5, "temperature": 0})
	if textOf(rt) != textOf(r) {
		t.Fatalf("token prompt %q, text prompt %q", textOf(rt), textOf(r))
	}
	// stop: the text ends before the stop string, with finish "stop",
	// streamed or not.
	long := completion(t, c.urls[0]+"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 60, "temperature": 0})
	full := textOf(long)
	stop := ""
	for _, w := range strings.Fields(full) {
		if i := strings.Index(full, w); i > 4 && len(w) >= 2 && !strings.ContainsRune(w, '\uFFFD') {
			stop = w
			break
		}
	}
	if stop == "" {
		t.Fatalf("no stop string candidate in %q", full)
	}
	want := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		req := map[string]any{"prompt": "Hello", "max_tokens": 60, "temperature": 0, "stop": []string{"\x00never", stop}, "stream": stream}
		var got, finish string
		if stream {
			s := openStream(t, c.urls[2]+"/v1/completions", "", req).readAll(t, nil)
			got, finish = s.text, s.finish
		} else {
			r := completion(t, c.urls[2]+"/v1/completions", req)
			got, finish = textOf(r), *r.Choices[0].FinishReason
		}
		if got != want || finish != node.FinishStop {
			t.Fatalf("stop %q (stream %v): %q %s, want %q stop", stop, stream, got, finish, want)
		}
	}
}

// TestChatStreamingEqualsWhole: a streamed chat completion's text is the
// whole one's, it opens with the assistant role, ends with [DONE], and
// reports usage when asked.
func TestChatStreamingEqualsWhole(t *testing.T) {
	c := shared.get(t)
	msgs := []map[string]any{
		{"role": "system", "content": "You are terse."},
		{"role": "user", "content": "Tell me a story."},
		{"role": "assistant", "content": "Once upon a time"},
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "Go "}, {"type": "text", "text": "on."}}},
	}
	for _, seed := range []int{0, -7} {
		req := map[string]any{"model": c.nodes[0].Model().Name, "messages": msgs, "max_tokens": 48, "seed": seed, "temperature": 0.8,
			"unknown_field": map[string]any{"ignored": true}, "user": "test", "frequency_penalty": 0}
		whole := completion(t, c.urls[1]+"/v1/chat/completions", req)
		if whole.Object != "chat.completion" || whole.Choices[0].Message.Role != "assistant" || !strings.HasPrefix(whole.ID, "chatcmpl-") {
			t.Fatalf("chat response %+v", whole)
		}
		sr := withStream(req, true)
		sr["stream_options"] = map[string]any{"include_usage": true}
		var pieces int
		s := openStream(t, c.urls[2]+"/v1/chat/completions", "", sr).readAll(t, func(string) { pieces++ })
		text := textOf(whole)
		if !s.done || s.errObj != nil || s.text != text || s.role != "assistant" || s.finish != *whole.Choices[0].FinishReason {
			t.Fatalf("seed %d: stream %+v\nwhole %q", seed, s, text)
		}
		if s.usage == nil || *s.usage != *whole.Usage.(*usageJSON) {
			t.Fatalf("stream usage %+v, whole %+v", s.usage, whole.Usage)
		}
		if s.objects["chat.completion.chunk"] < 3 || pieces < 2 {
			t.Fatalf("stream of %d chunks, %d with text: not streamed", s.objects["chat.completion.chunk"], pieces)
		}
		t.Logf("seed %d: %d completion tokens in %d text chunks, %q", seed, whole.Usage.(*usageJSON).CompletionTokens, pieces, text)
	}
}

// TestConcurrentStreams: streams on every entry at once, each equal to
// its whole answer.
func TestConcurrentStreams(t *testing.T) {
	c := shared.get(t)
	prompts := []string{"Once upon a time", "Hello", "The quick brown fox", "It was a dark and stormy night"}
	want := make([]string, len(prompts))
	for i, p := range prompts {
		want[i] = textOf(completion(t, c.urls[0]+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 64, "temperature": 0}))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := i % len(prompts)
			req := map[string]any{"prompt": prompts[p], "max_tokens": 64, "temperature": 0, "stream": true}
			s := openStream(t, c.urls[i%len(c.urls)]+"/v1/completions", "", req).readAll(t, nil)
			if !s.done || s.text != want[p] {
				errs <- s.text + " ≠ " + want[p]
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func withStream(req map[string]any, on bool) map[string]any {
	out := map[string]any{}
	for k, v := range req {
		out[k] = v
	}
	out["stream"] = on
	return out
}

// samplingOf is what the API makes of a request's sampling fields.
func samplingOf(m map[string]any) engine.SamplingParams {
	sp := engine.SamplingParams{Temperature: 1}
	if v, ok := m["temperature"]; ok {
		sp.Temperature = float32(toF(v))
	}
	if v, ok := m["top_p"]; ok {
		sp.TopP = float32(toF(v))
	}
	if v, ok := m["seed"]; ok {
		sp.Seed = uint64(int64(toF(v)))
	}
	return sp
}

func toF(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	}
	panic("number")
}

// jsonText is s as it comes out of JSON: invalid UTF-8 (a random model
// emits it) turned into U+FFFD.
func jsonText(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

func TestHealthz(t *testing.T) {
	c := shared.get(t)
	status, _, body := get(t, c.urls[0]+"/healthz?ready=1", "")
	var h healthJSON
	if err := json.Unmarshal(body, &h); err != nil || status != http.StatusOK || h.Status != "ok" || !h.MapCovers || !h.Routable || h.Epoch == 0 {
		t.Fatalf("healthz: %d %s", status, body)
	}
	if h.Node != c.nodes[0].ID().String() || h.LayersHeld.Len() == 0 || h.Peers != 2 {
		t.Fatalf("healthz %+v", h)
	}
}

// TestKeepAlive: a quiet stream gets SSE comments, which clients skip.
func TestKeepAlive(t *testing.T) {
	c := shared.get(t)
	s, err := New(NodeBackend(c.nodes[0]), WithKeepAlive(time.Millisecond), WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addr, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := openStream(t, "http://"+addr.String()+"/v1/completions", "", map[string]any{"prompt": "Hello", "max_tokens": 200, "temperature": 0, "stream": true})
	defer st.close()
	comments, done := 0, false
	for st.sc.Scan() {
		line := st.sc.Text()
		if line == ": keep-alive" {
			comments++
		}
		if line == "data: [DONE]" {
			done = true
		}
	}
	if comments == 0 || !done {
		t.Fatalf("%d keep-alive comments, done %v", comments, done)
	}
	t.Logf("%d keep-alive comments in a 200-token stream at a 1 ms interval", comments)
}

// TestChatToolsRefusedWithoutSyntax: the shared model's template (Llama
// 2's format) has no tool-call syntax, so tools get a 400 naming the
// field rather than being silently ignored; with tool_choice "none" the
// chat is served without them, and a past assistant tool call and tool
// result still render through the template.
func TestChatToolsRefusedWithoutSyntax(t *testing.T) {
	c := shared.get(t)
	tools := `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`
	call := engine.ToolCall{ID: "call_1", Type: "function"}
	call.Function.Name, call.Function.Arguments = "get_weather", `{"city": "Paris"}`
	msgs := []engine.Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []engine.ToolCall{call}},
		{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"temperature": 21}`},
	}
	url := c.urls[0] + "/v1/chat/completions"
	for _, stream := range []bool{false, true} {
		status, _, body := post(t, url, "", map[string]any{"messages": msgs, "tools": json.RawMessage(tools), "max_tokens": 2, "stream": stream})
		e := errorOf(t, body)
		if status != http.StatusBadRequest || str(e.Param) != "tools" || !strings.Contains(e.Message, "tool-call syntax") {
			t.Fatalf("stream %v: %d %s; want a 400 naming tools", stream, status, body)
		}
	}
	r := completion(t, url, map[string]any{"messages": msgs, "tools": json.RawMessage(tools), "tool_choice": "none", "max_tokens": 2, "temperature": 0})
	tok, err := engine.LoadTokenizer(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := tok.EncodeChat(msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Usage.(*usageJSON).PromptTokens; got != len(want) {
		t.Errorf("prompt of %d tokens, want the template's %d", got, len(want))
	}
	if m := r.Choices[0].Message; m.ToolCalls != nil || m.ReasoningContent != nil || *r.Choices[0].FinishReason == FinishToolCalls {
		t.Errorf("a model without syntax answered %+v", m)
	}
}
