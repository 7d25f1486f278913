package api

import (
	"encoding/json"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestOpenAIClientToolLoop: a tool-calling loop through the official
// openai client (testdata/openai-client/loop.mjs), whole and streamed,
// on a random-weight model whose template has Hermes tool syntax: the
// first answer is one get_weather call (forced by name) whose arguments
// fit the tool's schema; the script runs the tool and sends the result
// back; the second answer (tool_choice "none") is text. Each request's
// prompt is exactly the template's rendering of the conversation so far,
// the tool's result included (usage.prompt_tokens against EncodeChatVars).
func TestOpenAIClientToolLoop(t *testing.T) {
	needClient(t, "openai-client", "openai")
	tc, tok := getToolsSwarm(t)
	outb := nodeScript(t, "openai-client", "openai", "loop.mjs", tc.urls[0]+"/v1")
	type step struct {
		Finish  string
		Content *string
		Calls   []struct {
			ID       string
			Type     string
			Function struct{ Name, Arguments string }
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		}
		Sent []json.RawMessage
	}
	var got struct{ Whole, Streamed []step }
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("loop output %q: %v", outb, err)
	}
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
		"parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}}, "required": ["city"], "additionalProperties": false}}}]`)
	for name, steps := range map[string][]step{"whole": got.Whole, "streamed": got.Streamed} {
		if len(steps) != 2 {
			t.Fatalf("%s: %d steps", name, len(steps))
		}
		first, second := steps[0], steps[1]
		if first.Finish != "tool_calls" || len(first.Calls) != 1 || first.Calls[0].Function.Name != "get_weather" || first.Calls[0].ID == "" {
			t.Fatalf("%s: first answer %+v", name, first)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(first.Calls[0].Function.Arguments), &args); err != nil || len(args) != 1 || (args["city"] != "Paris" && args["city"] != "Tokyo") {
			t.Errorf("%s: arguments %q do not fit the schema", name, first.Calls[0].Function.Arguments)
		}
		if len(second.Calls) != 0 || second.Content == nil || *second.Content == "" || (second.Finish != "stop" && second.Finish != "length") {
			t.Errorf("%s: second answer %+v", name, second)
		}
		if len(second.Sent) != 3 {
			t.Fatalf("%s: the second request sent %d messages", name, len(second.Sent))
		}
		var result struct {
			Role, Content string
			ToolCallID    string `json:"tool_call_id"`
		}
		if err := json.Unmarshal(second.Sent[2], &result); err != nil || result.Role != "tool" || result.ToolCallID != first.Calls[0].ID {
			t.Fatalf("%s: the tool's result went back as %s", name, second.Sent[2])
		}
		call := first.Calls[0]
		conv := []engine.Message{{Role: "user", Content: "What is the weather in Paris?"},
			{Role: "assistant", ToolCalls: []engine.ToolCall{toolCall(call.ID, call.Function.Name, call.Function.Arguments)}},
			{Role: "tool", Content: result.Content, ToolCallID: call.ID}}
		for i, n := range []int{1, 3} {
			want := tools
			if i == 1 {
				want = nil // tool_choice "none" renders no tools
			}
			ids, err := tok.EncodeChatVars(conv[:n], want, nil)
			if err != nil {
				t.Fatal(err)
			}
			if u := steps[i].Usage; u.PromptTokens != len(ids) || u.CompletionTokens == 0 {
				t.Errorf("%s step %d: usage %+v; the template renders %d prompt tokens", name, i, u, len(ids))
			}
		}
		t.Logf("%s: %s(%q) → %s; answer %q (%s)", name, call.Function.Name, call.Function.Arguments, result.Content,
			(*second.Content)[:min(len(*second.Content), 24)], second.Finish)
	}
}
