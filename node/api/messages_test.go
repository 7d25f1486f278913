package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// TestDecodeMessages: an Anthropic request's system, messages and blocks,
// tools and tool_choice become the chat's messages and tools; what the
// server cannot honour is refused, naming its field.
func TestDecodeMessages(t *testing.T) {
	weather := `{"name": "get_weather", "description": "Weather in a city", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}`
	weatherChat := `[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	user := `{"role": "user", "content": "hi"}`
	for _, c := range []struct {
		name  string
		body  string
		msgs  []engine.Message
		tools string
		stop  []string
		param string
	}{
		{name: "string content", body: `{"max_tokens": 8, "messages": [` + user + `]}`, msgs: []engine.Message{{Role: "user", Content: "hi"}}},
		{name: "system string", body: `{"max_tokens": 8, "system": "Be brief.", "messages": [` + user + `]}`,
			msgs: []engine.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "hi"}}},
		{name: "system blocks", body: `{"max_tokens": 8, "system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "b"}], "messages": [` + user + `]}`,
			msgs: []engine.Message{{Role: "system", Content: "a\n\nb"}, {Role: "user", Content: "hi"}}},
		{name: "text blocks", body: `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "c"}]}, ` + user + `]}`,
			msgs: []engine.Message{{Role: "user", Content: "ab"}, {Role: "assistant", Content: "c"}, {Role: "user", Content: "hi"}}},
		{name: "a tool round trip",
			body: `{"max_tokens": 8, "tools": [` + weather + `], "tool_choice": {"type": "auto"}, "stop_sequences": ["\n\n", "END"], "messages": [
				{"role": "user", "content": "Weather in Paris and Rome?"},
				{"role": "assistant", "content": [{"type": "text", "text": "Looking."}, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
					{"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city":  "Rome"}}]},
				{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 C"},
					{"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "25 C"}], "is_error": false},
					{"type": "text", "text": "Thanks."}]}]}`,
			msgs: []engine.Message{{Role: "user", Content: "Weather in Paris and Rome?"},
				{Role: "assistant", Content: "Looking.", ToolCalls: []engine.ToolCall{toolCall("toolu_1", "get_weather", `{"city":"Paris"}`), toolCall("toolu_2", "get_weather", `{"city":"Rome"}`)}},
				{Role: "tool", Content: "22 C", ToolCallID: "toolu_1", Name: "get_weather"},
				{Role: "tool", Content: "25 C", ToolCallID: "toolu_2", Name: "get_weather"},
				{Role: "user", Content: "Thanks."}},
			tools: weatherChat, stop: []string{"\n\n", "END"}},
		{name: "tool_choice none offers no tools", body: `{"max_tokens": 8, "tools": [` + weather + `], "tool_choice": {"type": "none"}, "messages": [` + user + `]}`,
			msgs: []engine.Message{{Role: "user", Content: "hi"}}},
		{name: "custom tool type", body: `{"max_tokens": 8, "tools": [{"type": "custom", "name": "f", "input_schema": {}}], "messages": [` + user + `]}`,
			msgs: []engine.Message{{Role: "user", Content: "hi"}}, tools: `[{"type":"function","function":{"name":"f","parameters":{}}}]`},

		{name: "no max_tokens", body: `{"messages": [` + user + `]}`, param: "max_tokens"},
		{name: "max_tokens 0", body: `{"max_tokens": 0, "messages": [` + user + `]}`, param: "max_tokens"},
		{name: "no messages", body: `{"max_tokens": 8}`, param: "messages"},
		{name: "system role", body: `{"max_tokens": 8, "messages": [{"role": "system", "content": "x"}, ` + user + `]}`, param: "messages[0].role"},
		{name: "no content", body: `{"max_tokens": 8, "messages": [{"role": "user"}]}`, param: "messages[0].content"},
		{name: "image", body: `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]}`, param: "messages[0].content[0].type"},
		{name: "document", body: `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "document", "source": {}}]}]}`, param: "messages[0].content[1].type"},
		{name: "image in a tool result", body: `{"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}]}]}`, param: "messages[1].content[0].content[0].type"},
		{name: "tool_use from the user", body: `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}`, param: "messages[0].content[0].type"},
		{name: "tool_use input not an object", body: `{"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}, ` + user + `]}`, param: "messages[0].content[0].input"},
		{name: "tool_result without id", body: `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}`, param: "messages[0].content[0].tool_use_id"},
		{name: "a prefill", body: `{"max_tokens": 8, "messages": [` + user + `, {"role": "assistant", "content": "Once"}]}`, param: "messages[1].role"},
		{name: "server tool", body: `{"max_tokens": 8, "tools": [{"type": "web_search_20250305", "name": "web_search"}], "messages": [` + user + `]}`, param: "tools[0].type"},
		{name: "tool without name", body: `{"max_tokens": 8, "tools": [{"input_schema": {}}], "messages": [` + user + `]}`, param: "tools[0].name"},
		{name: "any without tools", body: `{"max_tokens": 8, "tool_choice": {"type": "any"}, "messages": [` + user + `]}`, param: "tool_choice"},
		{name: "a tool without its name", body: `{"max_tokens": 8, "tools": [` + weather + `], "tool_choice": {"type": "tool"}, "messages": [` + user + `]}`, param: "tool_choice"},
		{name: "stop_sequences not strings", body: `{"max_tokens": 8, "stop_sequences": [1], "messages": [` + user + `]}`, param: "stop_sequences"},
		{name: "mcp servers", body: `{"max_tokens": 8, "mcp_servers": [{"type": "url", "url": "x", "name": "n"}], "messages": [` + user + `]}`, param: "mcp_servers"},
		{name: "top_p", body: `{"max_tokens": 8, "top_p": 2, "messages": [` + user + `]}`, param: "top_p"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, e := decodeMessages([]byte(c.body))
			if c.param != "" {
				if e == nil || e.Param != c.param || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, strings.Split(c.param, "[")[0]) {
					t.Fatalf("%+v; want a 400 naming %s", e, c.param)
				}
				return
			}
			if e != nil {
				t.Fatalf("refused: %s (%s)", e.Message, e.Param)
			}
			if !reflect.DeepEqual(g.req.Messages, c.msgs) {
				t.Errorf("messages\n%+v\nwant\n%+v", g.req.Messages, c.msgs)
			}
			if string(g.req.Tools) != c.tools || g.tools != (c.tools != "") {
				t.Errorf("tools %s (%v); want %s", g.req.Tools, g.tools, c.tools)
			}
			if !reflect.DeepEqual(g.req.Stop, c.stop) {
				t.Errorf("stop %q; want %q", g.req.Stop, c.stop)
			}
		})
	}
	g, e := decodeMessages([]byte(`{"model": "m", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 4, "stream": true, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "hi"}]}`))
	if e != nil {
		t.Fatal(e)
	}
	if sp := g.req.Sampling; g.req.Model != "m" || g.req.MaxTokens != 7 || sp.Temperature != 0.5 || sp.TopP != 0.9 || sp.TopK != 4 || !g.stream ||
		g.req.ChatVars["enable_thinking"] != false {
		t.Errorf("decoded %+v stream %v", g.req, g.stream)
	}
}

// messageOut is an Anthropic message as a client reads it.
type messageOut struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Signature *string         `json:"signature"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func (m messageOut) summary() string {
	var parts []string
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			parts = append(parts, "text:"+b.Text)
		case "thinking":
			parts = append(parts, "thinking:"+b.Thinking)
		case "tool_use":
			var in any
			_ = json.Unmarshal(b.Input, &in)
			canon, _ := json.Marshal(in)
			parts = append(parts, "tool_use:"+b.Name+":"+string(canon))
		default:
			parts = append(parts, b.Type)
		}
	}
	return strings.Join(parts, " | ")
}

// accumulateMessage rebuilds the message a stream describes from its
// events, as Anthropic's client does, checking their order on the way;
// it returns the event names (runs of deltas as one) and the message.
func accumulateMessage(t *testing.T, evs []namedEvent) ([]string, messageOut) {
	t.Helper()
	var names []string
	var msg map[string]any
	var content []map[string]any
	var jsonBuf []string
	open := -1
	for i, ev := range evs {
		if len(names) == 0 || names[len(names)-1] != ev.name || ev.name != "content_block_delta" {
			names = append(names, ev.name)
		}
		idx := -1
		if v, ok := ev.data["index"].(float64); ok {
			idx = int(v)
		}
		switch ev.name {
		case "message_start":
			if i != 0 {
				t.Fatal("message_start is not first")
			}
			msg = ev.data["message"].(map[string]any)
			if msg["stop_reason"] != nil || len(msg["content"].([]any)) != 0 {
				t.Fatalf("message_start %s", ev.raw)
			}
		case "ping":
		case "content_block_start":
			if open != -1 || idx != len(content) {
				t.Fatalf("block %d starts while %d is open, after %d blocks", idx, open, len(content))
			}
			open = idx
			content = append(content, ev.data["content_block"].(map[string]any))
			jsonBuf = append(jsonBuf, "")
		case "content_block_delta":
			if idx != open {
				t.Fatalf("a delta of block %d while %d is open", idx, open)
			}
			d := ev.data["delta"].(map[string]any)
			b := content[idx]
			switch d["type"] {
			case "text_delta":
				b["text"] = b["text"].(string) + d["text"].(string)
			case "thinking_delta":
				b["thinking"] = b["thinking"].(string) + d["thinking"].(string)
			case "input_json_delta":
				jsonBuf[idx] += d["partial_json"].(string)
			default:
				t.Fatalf("delta %s", ev.raw)
			}
		case "content_block_stop":
			if idx != open {
				t.Fatalf("block %d stops while %d is open", idx, open)
			}
			if content[idx]["type"] == "tool_use" {
				var in any
				if err := json.Unmarshal([]byte(jsonBuf[idx]), &in); err != nil {
					t.Fatalf("tool_use input %q: %v", jsonBuf[idx], err)
				}
				content[idx]["input"] = in
			}
			open = -1
		case "message_delta":
			if open != -1 {
				t.Fatal("message_delta with a block open")
			}
			d := ev.data["delta"].(map[string]any)
			msg["stop_reason"], msg["stop_sequence"] = d["stop_reason"], d["stop_sequence"]
			msg["usage"].(map[string]any)["output_tokens"] = ev.data["usage"].(map[string]any)["output_tokens"]
		case "message_stop":
			if i != len(evs)-1 {
				t.Fatal("message_stop is not last")
			}
		default:
			t.Fatalf("unexpected event %s", ev.raw)
		}
	}
	msg["content"] = content
	b, _ := json.Marshal(msg)
	var out messageOut
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return names, out
}

// TestMessagesShape: a model's parsed output as an Anthropic message,
// whole and streamed: content blocks in the output's order (thinking,
// text, tool_use), Anthropic's stop reasons, the stream's events in
// Anthropic's order, adding up to the whole answer.
func TestMessagesShape(t *testing.T) {
	qwen3 := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	stop := node.Result{FinishReason: node.FinishStop, Usage: node.Usage{PromptTokens: 9, CompletionTokens: 5, TotalTokens: 14}}
	length, seq := stop, stop
	length.FinishReason = node.FinishLength
	seq.StopSequence = "END"
	tools := `"tools": [{"name": "get_weather", "input_schema": {}}, {"name": "get_time", "input_schema": {}}]`
	user := `"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]`
	textEvents := "message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop"
	for _, c := range []struct {
		name, body, output string
		syn                engine.ChatSyntax
		res                node.Result
		summary, events    string
		reason, stopSeq    string
	}{
		{"end_turn", `{` + user + `}`, "Hello, wörld.", engine.ChatSyntax{}, stop, "text:Hello, wörld.", textEvents, "end_turn", ""},
		{"max_tokens", `{` + user + `}`, "Hello", engine.ChatSyntax{}, length, "text:Hello", textEvents, "max_tokens", ""},
		{"stop_sequence", `{"stop_sequences": ["END"], ` + user + `}`, "Hello", engine.ChatSyntax{}, seq, "text:Hello", textEvents, "stop_sequence", "END"},
		{"nothing", `{` + user + `}`, "", engine.ChatSyntax{}, stop, "text:",
			"message_start ping content_block_start content_block_stop message_delta message_stop", "end_turn", ""},
		{"qwen3 thought and tool use", `{` + tools + `, ` + user + `}`, qwen3Output, qwen3, stop,
			"thinking:The user wants the weather and the time.\nI will call both tools.\n | " +
				`tool_use:get_weather:{"city":"Paris","unit":"celsius"} | tool_use:get_time:{"city":"Tōkyō \"東京\""}`,
			"message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop",
			"tool_use", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := fixture(c.syn, c.output, c.res, 3)
			code, body := runFixture(t, h, "/v1/messages", c.body)
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			var whole messageOut
			if err := json.Unmarshal([]byte(body), &whole); err != nil {
				t.Fatal(err)
			}
			if whole.Type != "message" || whole.Role != "assistant" || !strings.HasPrefix(whole.ID, "msg_") || whole.Model != "fixture" ||
				whole.Usage.InputTokens != 9 || whole.Usage.OutputTokens != 5 || str(whole.StopReason) != c.reason ||
				(c.stopSeq == "") != (whole.StopSequence == nil) || (c.stopSeq != "" && *whole.StopSequence != c.stopSeq) {
				t.Fatalf("whole %s", body)
			}
			if whole.summary() != c.summary {
				t.Fatalf("content %s\nwant    %s", whole.summary(), c.summary)
			}
			for _, b := range whole.Content {
				if b.Type == "tool_use" && !strings.HasPrefix(b.ID, "toolu_") || b.Type == "thinking" && b.Signature == nil {
					t.Fatalf("block %+v", b)
				}
			}
			code, body = runFixture(t, h, "/v1/messages", strings.Replace(c.body, "{", `{"stream": true, `, 1))
			if code != http.StatusOK {
				t.Fatalf("stream: %d %s", code, body)
			}
			names, final := accumulateMessage(t, readEvents(t, body))
			if strings.Join(names, " ") != c.events {
				t.Fatalf("events\n%s\nwant\n%s", strings.Join(names, " "), c.events)
			}
			if final.summary() != c.summary || str(final.StopReason) != c.reason || final.Usage.OutputTokens != 5 || final.Usage.InputTokens != 9 {
				t.Fatalf("streamed %s (%s)\nwhole    %s", final.summary(), str(final.StopReason), c.summary)
			}
		})
	}
}

// anthropicErrorOf decodes an error response in Anthropic's shape.
func anthropicErrorOf(t *testing.T, body []byte) anthropicErrorBody {
	t.Helper()
	var e struct {
		Type  string                     `json:"type"`
		Error map[string]json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || len(e.Error) != 2 {
		t.Fatalf("error body %s: %v", body, err)
	}
	var out anthropicErrorBody
	_ = json.Unmarshal(e.Error["type"], &out.Type)
	_ = json.Unmarshal(e.Error["message"], &out.Message)
	if out.Type == "" || out.Message == "" {
		t.Fatalf("error body %s", body)
	}
	return out
}

// TestMessagesErrors: /v1/messages answers every error in Anthropic's
// shape with the status the server gives it (a bad body, the wrong
// method, a missing key, no capacity), takes the key as x-api-key or
// Bearer, and leaves the other endpoints' errors in OpenAI's shape.
func TestMessagesErrors(t *testing.T) {
	f := &fakeBackend{genErr: node.ErrNoCapacity}
	s, err := New(f, WithLogger(testLog()), WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() { hs.Close(); s.Close() }()
	send := func(method, path, body string, hdr ...string) (int, []byte) {
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		code, _, b := do(t, req)
		return code, b
	}
	good := `{"model": "fake-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}`
	for _, c := range []struct {
		name, method, body string
		hdr                []string
		status             int
		typ                string
	}{
		{"no key", http.MethodPost, good, nil, http.StatusUnauthorized, "authentication_error"},
		{"wrong x-api-key", http.MethodPost, good, []string{"x-api-key", "nope"}, http.StatusUnauthorized, "authentication_error"},
		{"bad request", http.MethodPost, `{"messages": []}`, []string{"x-api-key", "k"}, http.StatusBadRequest, "invalid_request_error"},
		{"malformed", http.MethodPost, `{`, []string{"x-api-key", "k"}, http.StatusBadRequest, "invalid_request_error"},
		{"image", http.MethodPost, `{"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`, []string{"x-api-key", "k"},
			http.StatusBadRequest, "invalid_request_error"},
		{"wrong method", http.MethodGet, "", []string{"x-api-key", "k"}, http.StatusMethodNotAllowed, "invalid_request_error"},
		{"no capacity, Bearer", http.MethodPost, good, []string{"Authorization", "Bearer k"}, http.StatusServiceUnavailable, "overloaded_error"},
		{"no capacity, x-api-key", http.MethodPost, good, []string{"x-api-key", "k"}, http.StatusServiceUnavailable, "overloaded_error"},
	} {
		code, body := send(c.method, "/v1/messages", c.body, c.hdr...)
		e := anthropicErrorOf(t, body)
		if code != c.status || e.Type != c.typ {
			t.Errorf("%s: %d %s; want %d %s", c.name, code, body, c.status, c.typ)
		}
	}
	// x-api-key opens the other endpoints too; their errors stay OpenAI's.
	if code, body := send(http.MethodGet, "/v1/models", "", "x-api-key", "k"); code != http.StatusOK {
		t.Errorf("models with x-api-key: %d %s", code, body)
	}
	code, body := send(http.MethodPost, "/v1/responses", `{"input": "hi", "previous_response_id": "resp_1"}`, "x-api-key", "k")
	if e := errorOf(t, body); code != http.StatusBadRequest || str(e.Param) != "previous_response_id" {
		t.Errorf("responses: %d %s", code, body)
	}
	code, body = send(http.MethodPost, "/v1/responses", `{"input": "hi"}`, "x-api-key", "k")
	if e := errorOf(t, body); code != http.StatusServiceUnavailable || str(e.Code) != "no_capacity" {
		t.Errorf("responses: %d %s", code, body)
	}
}

// TestCountTokensAndLongPrompt: /v1/messages/count_tokens answers
// {"input_tokens": n} from the backend's count (no max_tokens needed)
// and its errors in Anthropic's shape; a prompt over the context is
// Anthropic's 400 on both endpoints, where OpenAI's answer 413.
func TestCountTokensAndLongPrompt(t *testing.T) {
	f := &fakeBackend{}
	s, err := New(f, WithLogger(testLog()))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer func() { hs.Close(); s.Close() }()
	send := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+path, strings.NewReader(body))
		code, _, b := do(t, req)
		return code, b
	}
	body := `{"model": "fake-model", "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"}]}`
	code, b := send("/v1/messages/count_tokens", body)
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	// The fake counts messages: the system message and the three.
	if err := json.Unmarshal(b, &n); err != nil || code != http.StatusOK || n.InputTokens != 4 {
		t.Errorf("count_tokens: %d %s", code, b)
	}
	if code, b := send("/v1/messages/count_tokens", `{"messages": []}`); code != http.StatusBadRequest || anthropicErrorOf(t, b).Type != "invalid_request_error" {
		t.Errorf("count_tokens of no messages: %d %s", code, b)
	}
	f.mu.Lock()
	f.genErr = fmt.Errorf("%w: 9000 prompt tokens + 1 to generate > 1024", node.ErrPromptTooLong)
	f.mu.Unlock()
	for _, path := range []string{"/v1/messages/count_tokens", "/v1/messages"} {
		if code, b := send(path, strings.Replace(body, "{", `{"max_tokens": 8, `, 1)); code != http.StatusBadRequest || anthropicErrorOf(t, b).Type != "invalid_request_error" {
			t.Errorf("%s, prompt too long: %d %s", path, code, b)
		}
	}
	if code, b := send("/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("chat, prompt too long: %d %s", code, b)
	}
}
