package api

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stratanet/strata/engine"
)

// agentRun is what testdata/ai-sdk-client/agent.mjs prints of one run
// of the AI SDK's tool loop.
type agentRun struct {
	Text, Deltas string
	InputDeltas  map[string][]string
	Requests     []struct {
		URL  string
		Body struct {
			Messages []struct {
				Role       string  `json:"role"`
				Content    *string `json:"content"`
				ToolCallID string  `json:"tool_call_id"`
				ToolCalls  []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"messages"`
			Tools      json.RawMessage `json:"tools"`
			ToolChoice json.RawMessage `json:"tool_choice"`
		}
	}
	Steps []struct {
		FinishReason, RawFinishReason, Text string
		Usage                               struct{ InputTokens, OutputTokens int }
		ToolCalls                           []struct {
			ToolCallID, ToolName string
			Input                json.RawMessage
			Invalid              bool
		}
		ToolResults []struct {
			ToolCallID, ToolName string
			Output               json.RawMessage
		}
	}
}

// TestAISDKAgent: the Vercel AI SDK's own multi-step tool loop
// (generateText, and streamText) through @ai-sdk/openai-compatible,
// pinned in testdata/ai-sdk-client, completes a two-tool task on a
// random-weight model whose template has Hermes tool syntax: step 0
// forces get_weather, step 1 forces convert, step 2 ("none") answers in
// text. Each call is the forced tool with input valid against the
// schema the SDK sent (checked here, not by the SDK); the tool's result
// goes back in the next request, and that request's prompt is exactly
// the template's rendering of the conversation with the result in it
// (usage.prompt_tokens against engine's EncodeChatVars); streamed, each
// call's input reaches the SDK in pieces (tool-input-delta parts).
func TestAISDKAgent(t *testing.T) {
	needClient(t, "ai-sdk-client", "ai")
	needClient(t, "ai-sdk-client", "@ai-sdk/openai-compatible")
	tc, tok := getToolsSwarm(t)
	outb := nodeScript(t, "ai-sdk-client", "ai", "agent.mjs", tc.urls[0]+"/v1")
	var got struct{ Whole, Streamed agentRun }
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("agent output %q: %v", outb, err)
	}
	for name, run := range map[string]agentRun{"generateText": got.Whole, "streamText": got.Streamed} {
		checkAgentRun(t, name, tok, run)
	}
	// The same seeded requests sample the same tokens, streamed or not.
	w, s := got.Whole, got.Streamed
	if len(w.Steps) == 3 && len(s.Steps) == 3 {
		for i := range 2 {
			if len(w.Steps[i].ToolCalls) == 1 && len(s.Steps[i].ToolCalls) == 1 &&
				string(w.Steps[i].ToolCalls[0].Input) != string(s.Steps[i].ToolCalls[0].Input) {
				t.Errorf("step %d: generateText called with %s, streamText with %s", i, w.Steps[i].ToolCalls[0].Input, s.Steps[i].ToolCalls[0].Input)
			}
		}
		// The server streamed each call's arguments in pieces, which the
		// SDK put together into the input it called the tool with.
		for i := range 2 {
			if len(s.Steps[i].ToolCalls) != 1 {
				continue
			}
			call := s.Steps[i].ToolCalls[0]
			frags := s.InputDeltas[call.ToolCallID]
			t.Logf("streamText step %d: %s's input came in %d deltas", i, call.ToolName, len(frags))
			if len(frags) < 2 || !jsonEqual(strings.Join(frags, ""), string(call.Input)) {
				t.Errorf("streamText step %d: input deltas %q; input %s", i, frags, call.Input)
			}
		}
		if w.Text != s.Text || s.Deltas != s.Text {
			t.Errorf("final text: generateText %q, streamText %q (deltas %q)", w.Text, s.Text, s.Deltas)
		}
	}
}

func checkAgentRun(t *testing.T, name string, tok *engine.Tokenizer, run agentRun) {
	t.Helper()
	if len(run.Steps) != 3 || len(run.Requests) != 3 {
		t.Errorf("%s: %d steps, %d requests; want 3 of each", name, len(run.Steps), len(run.Requests))
		return
	}
	// The conversation as the SDK must have sent it, built from the
	// steps: the prompt, then each call and its result.
	msgs := []engine.Message{{Role: "user", Content: "What is the temperature in Paris in Fahrenheit?"}}
	for i, want := range []string{"get_weather", "convert"} {
		st := run.Steps[i]
		if st.FinishReason != "tool-calls" || st.RawFinishReason != "tool_calls" || len(st.ToolCalls) != 1 || len(st.ToolResults) != 1 {
			t.Errorf("%s step %d: finish %s (%s), %d calls, %d results", name, i, st.FinishReason, st.RawFinishReason, len(st.ToolCalls), len(st.ToolResults))
			return
		}
		call, res := st.ToolCalls[0], st.ToolResults[0]
		t.Logf("%s step %d: %s(%s) -> %s; finish %s, usage %+v", name, i, call.ToolName, call.Input, res.Output, st.RawFinishReason, st.Usage)
		if call.ToolName != want || call.Invalid || res.ToolCallID != call.ToolCallID || res.ToolName != want {
			t.Errorf("%s step %d: call %+v, result %+v; want %s", name, i, call, res, want)
		}
		if err := agentInputValid(want, run.Requests[i].Body.Tools, call.Input); err != nil {
			t.Errorf("%s step %d: %v", name, i, err)
		}
		// The result is the tool's, run on this input (it echoes city / unit).
		var in, out map[string]any
		if json.Unmarshal(call.Input, &in) != nil || json.Unmarshal(res.Output, &out) != nil {
			t.Errorf("%s step %d: input %s, output %s", name, i, call.Input, res.Output)
		} else if echo := map[string]string{"get_weather": "city", "convert": "unit"}[want]; out[echo] != in[echo] {
			t.Errorf("%s step %d: the tool answered %s to %s", name, i, res.Output, call.Input)
		}
		// The next request carries the call and its result back.
		next := run.Requests[i+1].Body.Messages
		if len(next) != len(msgs)+2 {
			t.Errorf("%s request %d: %d messages, want %d", name, i+1, len(next), len(msgs)+2)
			return
		}
		a, r := next[len(msgs)], next[len(msgs)+1]
		if a.Role != "assistant" || len(a.ToolCalls) != 1 || a.ToolCalls[0].ID != call.ToolCallID || a.ToolCalls[0].Function.Name != want ||
			!jsonEqual(a.ToolCalls[0].Function.Arguments, string(call.Input)) {
			t.Errorf("%s request %d: assistant turn %+v; the call was %+v", name, i+1, a, call)
			return
		}
		if r.Role != "tool" || r.ToolCallID != call.ToolCallID || r.Content == nil || !jsonEqual(*r.Content, string(res.Output)) {
			t.Errorf("%s request %d: tool turn %+v; the result was %s", name, i+1, r, res.Output)
			return
		}
		msgs = append(msgs, engine.Message{Role: "assistant", ToolCalls: []engine.ToolCall{toolCall(call.ToolCallID, want, a.ToolCalls[0].Function.Arguments)}},
			engine.Message{Role: "tool", Content: *r.Content, ToolCallID: call.ToolCallID})
	}
	// Each request's prompt is the template's rendering of the
	// conversation so far: the tools offered, except under "none",
	// which offers none.
	for i, st := range run.Steps {
		n := 1 + 2*i
		tools := run.Requests[i].Body.Tools
		if string(run.Requests[i].Body.ToolChoice) == `"none"` {
			tools = nil
		}
		ids, err := tok.EncodeChatVars(msgs[:n], tools, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st.Usage.InputTokens != len(ids) || st.Usage.OutputTokens == 0 {
			t.Errorf("%s step %d: usage %+v; the template renders %d prompt tokens", name, i, st.Usage, len(ids))
		}
	}
	if got := string(run.Requests[2].Body.ToolChoice); got != `"none"` {
		t.Errorf("%s: the last request's tool_choice is %s", name, got)
	}
	last := run.Steps[2]
	t.Logf("%s step 2: text %q...; finish %s, usage %+v", name, last.Text[:min(len(last.Text), 24)], last.RawFinishReason, last.Usage)
	if len(last.ToolCalls) != 0 || last.Text == "" || run.Text != last.Text ||
		!(last.FinishReason == "stop" && last.RawFinishReason == "stop" || last.FinishReason == "length" && last.RawFinishReason == "length") {
		t.Errorf("%s final step: finish %s (%s), calls %+v, text %q (run's %q)", name, last.FinishReason, last.RawFinishReason, last.ToolCalls, last.Text, run.Text)
	}
}

// agentInputValid checks input against the tool's parameters as the SDK
// sent them, for the two schemas agent.mjs defines: it first checks the
// schema is that one, then the input by hand.
func agentInputValid(name string, tools json.RawMessage, input json.RawMessage) error {
	var defs []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(tools, &defs); err != nil {
		return err
	}
	want := map[string]string{
		"get_weather": `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}`,
		"convert":     `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"temperature":{"type":"number"},"unit":{"type":"string","enum":["fahrenheit","kelvin"]}},"required":["temperature","unit"],"additionalProperties":false}`,
	}[name]
	found := false
	for _, d := range defs {
		if d.Function.Name == name {
			found = true
			if !jsonEqual(string(d.Function.Parameters), want) {
				return fmt.Errorf("the SDK sent %s's parameters as %s", name, d.Function.Parameters)
			}
		}
	}
	if !found {
		return fmt.Errorf("%s was not offered", name)
	}
	var in map[string]any
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	bad := fmt.Errorf("%s input %s is not valid against %s", name, input, want)
	switch name {
	case "get_weather":
		city, ok := in["city"].(string)
		if len(in) != 1 || !ok || utf8.RuneCountInString(city) > 8 {
			return bad
		}
	case "convert":
		temp, ok := in["temperature"].(float64)
		unit, _ := in["unit"].(string)
		if len(in) != 2 || !ok || math.IsInf(temp, 0) || unit != "fahrenheit" && unit != "kelvin" {
			return bad
		}
	}
	return nil
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}
