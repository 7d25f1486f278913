package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

func toolCall(id, name, args string) engine.ToolCall {
	var tc engine.ToolCall
	tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = id, "function", name, args
	return tc
}

// TestDecodeResponses: a Responses request's input items, instructions,
// tools and tool_choice become the chat's messages and tools; what the
// server cannot honour is refused, naming its field.
func TestDecodeResponses(t *testing.T) {
	weather := `{"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}`
	weatherChat := `[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	for _, c := range []struct {
		name  string
		body  string
		msgs  []engine.Message
		tools string // the chat's tools JSON ("": none)
		param string // the field a refusal names
	}{
		{name: "string input", body: `{"input": "hi"}`, msgs: []engine.Message{{Role: "user", Content: "hi"}}},
		{name: "instructions", body: `{"instructions": "Be brief.", "input": "hi"}`,
			msgs: []engine.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "hi"}}},
		{name: "instructions and a developer message are one system prompt",
			body: `{"instructions": "a", "input": [{"role": "developer", "content": "b"}, {"role": "user", "content": "hi"}, {"role": "system", "content": "c"}]}`,
			msgs: []engine.Message{{Role: "system", Content: "a\n\nb"}, {Role: "user", Content: "hi"}, {Role: "system", Content: "c"}}},
		{name: "text parts",
			body: `{"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}, {"role": "assistant", "content": [{"type": "output_text", "text": "c", "annotations": []}]}, {"role": "user", "content": "d"}]}`,
			msgs: []engine.Message{{Role: "user", Content: "ab"}, {Role: "assistant", Content: "c"}, {Role: "user", Content: "d"}}},
		{name: "a function call round trip",
			body: `{"input": [{"role": "user", "content": "Weather and time in Paris?"},
				{"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
				{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
				{"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": ""},
				{"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
				{"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]}],
				"tools": [` + weather + `], "tool_choice": "auto"}`,
			msgs: []engine.Message{{Role: "user", Content: "Weather and time in Paris?"},
				{Role: "assistant", ToolCalls: []engine.ToolCall{toolCall("call_1", "get_weather", `{"city":"Paris"}`), toolCall("call_2", "get_time", "{}")}},
				{Role: "tool", Content: "22 C", ToolCallID: "call_1", Name: "get_weather"},
				{Role: "tool", Content: "noon", ToolCallID: "call_2", Name: "get_time"}},
			tools: weatherChat},
		{name: "text and a call are one assistant turn",
			body: `{"input": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Let me look."}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c", "output": "r"}]}`,
			msgs: []engine.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "Let me look.", ToolCalls: []engine.ToolCall{toolCall("c", "f", "{}")}},
				{Role: "tool", Content: "r", ToolCallID: "c", Name: "f"}}},
		{name: "tool_choice none offers no tools", body: `{"input": "hi", "tools": [` + weather + `], "tool_choice": "none"}`,
			msgs: []engine.Message{{Role: "user", Content: "hi"}}},
		{name: "store, include, metadata and effort are accepted",
			body: `{"input": "hi", "store": true, "include": ["reasoning.encrypted_content"], "metadata": {"k": "v"}, "reasoning": {"effort": "high"}, "parallel_tool_calls": false, "truncation": "disabled", "text": {"format": {"type": "text"}}}`,
			msgs: []engine.Message{{Role: "user", Content: "hi"}}},

		{name: "previous_response_id", body: `{"input": "hi", "previous_response_id": "resp_1"}`, param: "previous_response_id"},
		{name: "conversation", body: `{"input": "hi", "conversation": "conv_1"}`, param: "conversation"},
		{name: "background", body: `{"input": "hi", "background": true}`, param: "background"},
		{name: "stored prompt", body: `{"prompt": {"id": "pmpt_1"}, "input": "hi"}`, param: "prompt"},
		{name: "no input", body: `{"model": "m"}`, param: "input"},
		{name: "empty input", body: `{"input": []}`, param: "input"},
		{name: "input of numbers", body: `{"input": 7}`, param: "input"},
		{name: "only reasoning", body: `{"input": [{"type": "reasoning", "summary": []}]}`, param: "input"},
		{name: "item reference", body: `{"input": [{"type": "item_reference", "id": "msg_1"}]}`, param: "input[0].type"},
		{name: "built-in item", body: `{"input": [{"type": "web_search_call", "id": "ws_1"}]}`, param: "input[0].type"},
		{name: "image", body: `{"input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": "data:"}]}]}`, param: "input[0].content[1].type"},
		{name: "text part without text", body: `{"input": [{"role": "user", "content": [{"type": "input_text"}]}]}`, param: "input[0].content[0]"},
		{name: "bad role", body: `{"input": [{"role": "tool", "content": "x"}]}`, param: "input[0].role"},
		{name: "no role", body: `{"input": [{"content": "x"}]}`, param: "input[0].role"},
		{name: "call without call_id", body: `{"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}`, param: "input[0].call_id"},
		{name: "call without name", body: `{"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}`, param: "input[0].name"},
		{name: "output without call_id", body: `{"input": [{"type": "function_call_output", "output": "x"}]}`, param: "input[0].call_id"},
		{name: "built-in tool", body: `{"input": "hi", "tools": [{"type": "web_search"}]}`, param: "tools[0].type"},
		{name: "chat-shaped tool", body: `{"input": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}`, param: "tools[0].name"},
		{name: "tools not a list", body: `{"input": "hi", "tools": {"type": "function"}}`, param: "tools"},
		{name: "required without tools", body: `{"input": "hi", "tool_choice": "required"}`, param: "tool_choice"},
		{name: "allowed tools", body: `{"input": "hi", "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}`, param: "tool_choice"},
		{name: "json schema with a pattern", body: `{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "string", "pattern": "a+"}}}}`, param: "text.format"},
		{name: "json schema without a schema", body: `{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}`, param: "text.format"},
		{name: "max_output_tokens 0", body: `{"input": "hi", "max_output_tokens": 0}`, param: "max_output_tokens"},
		{name: "temperature", body: `{"input": "hi", "temperature": 3}`, param: "temperature"},
		{name: "truncation auto", body: `{"input": "hi", "truncation": "auto"}`, param: "truncation"},
		{name: "logprobs", body: `{"input": "hi", "include": ["message.output_text.logprobs"]}`, param: "include"},
		{name: "top_logprobs", body: `{"input": "hi", "top_logprobs": 2}`, param: "top_logprobs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, e := decodeResponses([]byte(c.body))
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
			if !g.chat || g.shape == nil {
				t.Errorf("chat %v, shape %v", g.chat, g.shape)
			}
		})
	}

	// Sampling fields and reasoning effort.
	g, e := decodeResponses([]byte(`{"model": "m", "input": "hi", "max_output_tokens": 7, "temperature": 0, "top_p": 0.5, "stream": true, "reasoning": {"effort": "none"}, "seed": 3}`))
	if e != nil {
		t.Fatal(e)
	}
	if g.req.Model != "m" || g.req.MaxTokens != 7 || g.req.Sampling.Temperature != 0 || g.req.Sampling.TopP != 0.5 || g.req.Sampling.Seed != 3 || !g.stream ||
		g.req.ChatVars["enable_thinking"] != false {
		t.Errorf("decoded %+v stream %v vars %v", g.req, g.stream, g.req.ChatVars)
	}
	g, _ = decodeResponses([]byte(`{"input": "hi", "reasoning": {"effort": "none"}, "chat_template_kwargs": {"enable_thinking": true}}`))
	if g.req.ChatVars["enable_thinking"] != true {
		t.Errorf("the kwargs did not win: %v", g.req.ChatVars)
	}
}

// responseOut is a Response as a client reads it.
type responseOut struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	CreatedAt         int64  `json:"created_at"`
	Status            string `json:"status"`
	Model             string `json:"model"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"output"`
	Usage *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Store bool            `json:"store"`
	Tools json.RawMessage `json:"tools"`
}

// text is the output_text a client shows: its messages' text.
func (r responseOut) text() string {
	var b strings.Builder
	for _, it := range r.Output {
		if it.Type == "message" {
			for _, p := range it.Content {
				b.WriteString(p.Text)
			}
		}
	}
	return b.String()
}

// summary describes the output items without their IDs.
func (r responseOut) summary() string {
	var parts []string
	for _, it := range r.Output {
		s := it.Type + "/" + it.Status
		switch it.Type {
		case "function_call":
			s += "/" + it.Name + "/" + it.Arguments
		default:
			for _, p := range it.Content {
				s += "/" + p.Type + ":" + p.Text
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " | ")
}

// accumulate rebuilds the Response a stream describes from its events,
// as the openai client's stream helper does, checking the order and
// numbering of the events on the way; it returns the event types (runs
// of deltas as one) and the final response.completed's Response.
func accumulate(t *testing.T, evs []namedEvent) ([]string, responseOut) {
	t.Helper()
	type item = map[string]any
	var output []item
	var types []string
	var final responseOut
	for i, ev := range evs {
		if seq := ev.data["sequence_number"]; seq != float64(i) {
			t.Fatalf("event %d (%s) has sequence_number %v", i, ev.name, seq)
		}
		if len(types) == 0 || types[len(types)-1] != ev.name || !strings.HasSuffix(ev.name, ".delta") {
			types = append(types, ev.name)
		}
		idx := -1
		if v, ok := ev.data["output_index"].(float64); ok {
			idx = int(v)
		}
		switch ev.name {
		case "response.created", "response.in_progress":
			resp := ev.data["response"].(map[string]any)
			if resp["status"] != "in_progress" || len(resp["output"].([]any)) != 0 || resp["usage"] != nil {
				t.Fatalf("%s: %s", ev.name, ev.raw)
			}
		case "response.output_item.added":
			if idx != len(output) {
				t.Fatalf("item added at %d after %d items", idx, len(output))
			}
			output = append(output, ev.data["item"].(map[string]any))
		case "response.content_part.added":
			it := output[idx]
			it["content"] = append(it["content"].([]any), ev.data["part"])
		case "response.output_text.delta", "response.reasoning_text.delta":
			part := output[idx]["content"].([]any)[int(ev.data["content_index"].(float64))].(map[string]any)
			part["text"] = part["text"].(string) + ev.data["delta"].(string)
		case "response.function_call_arguments.delta":
			output[idx]["arguments"] = output[idx]["arguments"].(string) + ev.data["delta"].(string)
		case "response.output_text.done", "response.reasoning_text.done":
			part := output[idx]["content"].([]any)[0].(map[string]any)
			if part["text"] != ev.data["text"] {
				t.Fatalf("%s: text %q, the deltas made %q", ev.name, ev.data["text"], part["text"])
			}
		case "response.function_call_arguments.done":
			if output[idx]["arguments"] != ev.data["arguments"] || output[idx]["name"] != ev.data["name"] {
				t.Fatalf("%s: %s; the deltas made %v", ev.name, ev.raw, output[idx])
			}
		case "response.content_part.done":
		case "response.output_item.done":
			done := ev.data["item"].(map[string]any)
			if done["id"] != output[idx]["id"] || done["status"] != "completed" {
				t.Fatalf("item %d done: %v, added %v", idx, done, output[idx])
			}
			output[idx] = done
		case "response.completed":
			if i != len(evs)-1 {
				t.Fatalf("response.completed is event %d of %d", i, len(evs))
			}
			b, _ := json.Marshal(ev.data["response"])
			if err := json.Unmarshal(b, &final); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(output)
			want, _ := json.Marshal(ev.data["response"].(map[string]any)["output"])
			if string(got) != string(want) {
				t.Fatalf("the events built\n%s\nresponse.completed has\n%s", got, want)
			}
		default:
			t.Fatalf("unexpected event %s", ev.name)
		}
	}
	return types, final
}

// TestResponsesShape: a model's parsed output as a Response, whole and
// streamed: items in the output's order (reasoning, message,
// function_call), the stream's typed events in OpenAI's order and
// numbering, adding up to the whole answer.
func TestResponsesShape(t *testing.T) {
	qwen3 := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	stop := node.Result{FinishReason: node.FinishStop, Usage: node.Usage{PromptTokens: 9, CompletionTokens: 5, TotalTokens: 14}}
	length := stop
	length.FinishReason = node.FinishLength
	tools := `"tools": [{"type": "function", "name": "get_weather", "parameters": {}}, {"type": "function", "name": "get_time", "parameters": {}}]`
	for _, c := range []struct {
		name, body, output string
		syn                engine.ChatSyntax
		res                node.Result
		summary            string
		types              string
		status             string
	}{
		{"text", `{"input": "hi"}`, "Hello, wörld.", engine.ChatSyntax{}, stop,
			"message/completed/output_text:Hello, wörld.",
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed",
			"completed"},
		{"cut by max_output_tokens", `{"input": "hi", "max_output_tokens": 5}`, "Hello", engine.ChatSyntax{}, length,
			"message/completed/output_text:Hello",
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed",
			"incomplete"},
		{"nothing", `{"input": "hi"}`, "", engine.ChatSyntax{}, stop,
			"message/completed/output_text:",
			"response.created response.in_progress response.output_item.added response.content_part.added response.output_text.done response.content_part.done response.output_item.done response.completed",
			"completed"},
		{"qwen3 thought and calls", `{"input": "Weather and time?", ` + tools + `}`, qwen3Output, qwen3, stop,
			"reasoning/completed/reasoning_text:The user wants the weather and the time.\nI will call both tools.\n | " +
				`function_call/completed/get_weather/{"city": "Paris", "unit": "celsius"} | function_call/completed/get_time/{"city": "Tōkyō \"東京\""}`,
			"response.created response.in_progress response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
				"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
				"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done response.completed",
			"completed"},
		{"qwen3 without tools: calls stay text", `{"input": "Weather?"}`, "<think>\nhm\n</think>\n\nSunny.", qwen3, stop,
			"reasoning/completed/reasoning_text:hm\n | message/completed/output_text:Sunny.",
			"response.created response.in_progress response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done " +
				"response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.completed",
			"completed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := fixture(c.syn, c.output, c.res, 3)
			code, body := runFixture(t, h, "/v1/responses", c.body)
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			var whole responseOut
			if err := json.Unmarshal([]byte(body), &whole); err != nil {
				t.Fatal(err)
			}
			if whole.Object != "response" || !strings.HasPrefix(whole.ID, "resp_") || whole.Model != "fixture" || whole.Status != c.status ||
				whole.Usage == nil || whole.Usage.InputTokens != 9 || whole.Usage.OutputTokens != 5 || whole.Usage.TotalTokens != 14 || whole.Store {
				t.Fatalf("whole %s", body)
			}
			if (c.status == "incomplete") != (whole.IncompleteDetails != nil && whole.IncompleteDetails.Reason == "max_output_tokens") {
				t.Fatalf("incomplete_details: %s", body)
			}
			if whole.summary() != c.summary {
				t.Fatalf("output %s\nwant   %s", whole.summary(), c.summary)
			}
			for _, it := range whole.Output {
				prefix := map[string]string{"message": "msg_", "reasoning": "rs_", "function_call": "fc_"}[it.Type]
				if !strings.HasPrefix(it.ID, prefix) || (it.Type == "function_call" && !strings.HasPrefix(it.CallID, "call_")) {
					t.Fatalf("item IDs: %+v", it)
				}
			}
			code, body = runFixture(t, h, "/v1/responses", strings.Replace(c.body, "{", `{"stream": true, `, 1))
			if code != http.StatusOK {
				t.Fatalf("stream: %d %s", code, body)
			}
			types, final := accumulate(t, readEvents(t, body))
			if strings.Join(types, " ") != c.types {
				t.Fatalf("events\n%s\nwant\n%s", strings.Join(types, " "), c.types)
			}
			if final.summary() != c.summary || final.Status != c.status || final.Usage == nil || final.Usage.OutputTokens != 5 {
				t.Fatalf("streamed %s (%s)\nwhole    %s", final.summary(), final.Status, c.summary)
			}
		})
	}
}

// TestResponsesStreamError: a stream that fails after it started ends
// with an error event carrying the code and OpenAI's error object, and
// nothing after it.
func TestResponsesStreamError(t *testing.T) {
	g, e := decodeResponses([]byte(`{"input": "hi", "stream": true}`))
	if e != nil {
		t.Fatal(e)
	}
	rec := httptest.NewRecorder()
	out := &sse{w: rec, rc: http.NewResponseController(rec)}
	c := &call{g: g, id: "resp_x", model: node.ModelInfo{Name: "m"}}
	g.shape.open(out, c)
	g.shape.events(out, c, c.feed("Hel"))
	g.shape.fail(out, c, fromError(node.ErrSessionLost, "input"))
	evs := readEvents(t, rec.Body.String())
	last := evs[len(evs)-1]
	errObj, _ := last.data["error"].(map[string]any)
	if last.name != "error" || last.data["code"] != "session_lost" || last.data["message"] == "" || errObj["code"] != "session_lost" ||
		last.data["sequence_number"] != float64(len(evs)-1) {
		t.Fatalf("last event %s", last.raw)
	}
}
