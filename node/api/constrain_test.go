package api

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/engine/grammar"
	"github.com/stratanet/strata/node"
)

// bytesVocab has one token per byte value.
var bytesVocab = func() *grammar.Vocab {
	p := make([][]byte, 256)
	for i := range p {
		p[i] = []byte{byte(i)}
	}
	return grammar.NewVocab(p, nil)
}()

// walk writes a random document of g, byte by byte (each byte one the
// grammar allows), until it is complete and the coin says stop.
func walk(t *testing.T, g *grammar.Grammar, rng *rand.Rand) string {
	t.Helper()
	m := g.NewMatcher()
	allowed := make([]uint64, 4)
	var doc []byte
	for len(doc) < 4096 {
		if m.Done() && (m.Dead() || rng.IntN(4) == 0) {
			return string(doc)
		}
		var ok []byte
		m.Mask(bytesVocab, allowed)
		for c := 0; c < 256; c++ {
			if allowed[c>>6]&(1<<(c&63)) != 0 {
				ok = append(ok, byte(c))
			}
		}
		// Prefer closing bytes, so that walks end.
		c := ok[rng.IntN(len(ok))]
		for _, p := range []byte(`"}]`) {
			for _, o := range ok {
				if o == p && rng.IntN(2) == 0 {
					c = p
				}
			}
		}
		if err := m.Advance([]byte{c}); err != nil {
			t.Fatal(err)
		}
		doc = append(doc, c)
	}
	t.Fatalf("no end after %q", doc)
	return ""
}

// TestForcedCallSyntax: for each family, the documents of a forced call's
// grammar are read back by the family's own parser as exactly one call
// of the tool, with arguments that are JSON of the parameters' shape.
func TestForcedCallSyntax(t *testing.T) {
	tools := `[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
		"properties": {"city": {"type": "string", "maxLength": 5}, "days": {"type": "integer"}}, "required": ["city", "days"], "additionalProperties": false}}},
		{"type": "function", "function": {"name": "get_time"}}]`
	rng := rand.New(rand.NewPCG(5, 6))
	for _, syn := range []engine.ChatSyntax{
		{Tools: engine.ToolsHermes},
		{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink},
		{Tools: engine.ToolsLlama3, Keep: []string{"<|python_tag|>"}},
		{Tools: engine.ToolsMistral, Keep: []string{"[TOOL_CALLS]"}},
		{Tools: engine.ToolsMistral, Keep: []string{"[TOOL_CALLS]", "[ARGS]"}},
		{Tools: engine.ToolsDeepSeek},
		{Tools: engine.ToolsDeepSeek, Reasoning: engine.ReasoningThink, ThinkingOpen: true},
		{Tools: engine.ToolsHarmony, Reasoning: engine.ReasoningHarmony, Keep: []string{"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"}},
	} {
		for _, choice := range []string{`"required"`, `{"type": "function", "function": {"name": "get_weather"}}`} {
			body := `{"messages": [{"role": "user", "content": "hi"}], "tools": ` + tools + `, "tool_choice": ` + choice + `}`
			g, e := decodeChat([]byte(body))
			if e != nil {
				t.Fatal(e.Message)
			}
			if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: syn}, &g); e != nil {
				t.Fatalf("%+v: %s", syn, e.Message)
			}
			if g.req.Grammar == nil {
				t.Fatalf("%+v %s: no grammar", syn, choice)
			}
			gr, err := grammar.Compile(g.req.Grammar)
			if err != nil {
				t.Fatal(err)
			}
			for range 20 {
				doc := walk(t, gr, rng)
				res := chatparse.Parse(syn, true, doc)
				if len(res.Calls) != 1 || res.Content != "" {
					t.Fatalf("%+v: %q parsed as %+v", syn, doc, res)
				}
				c := res.Calls[0]
				if choice != `"required"` && c.Name != "get_weather" {
					t.Fatalf("%+v: %q calls %q", syn, doc, c.Name)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
					t.Fatalf("%+v: arguments %q: %v", syn, c.Arguments, err)
				}
				if c.Name == "get_weather" {
					city, ok := args["city"].(string)
					if _, isNum := args["days"].(float64); !ok || !isNum || len([]rune(city)) > 5 || len(args) != 2 {
						t.Fatalf("%+v: arguments %s", syn, c.Arguments)
					}
				}
			}
		}
	}
	// A family with no tool syntax: a 400 naming tools.
	g, _ := decodeChat([]byte(`{"messages": [{"role": "user", "content": "hi"}], "tools": ` + tools + `, "tool_choice": "required"}`))
	if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true}, &g); e == nil || e.Param != "tools" {
		t.Fatalf("no syntax: %+v", e)
	}
	// A named function that is not offered.
	g, _ = decodeChat([]byte(`{"messages": [{"role": "user", "content": "hi"}], "tools": ` + tools + `, "tool_choice": {"type": "function", "function": {"name": "nope"}}}`))
	if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: engine.ChatSyntax{Tools: engine.ToolsHermes}}, &g); e == nil || e.Param != "tool_choice" {
		t.Fatalf("unknown name: %+v", e)
	}
	// Parameters the grammar cannot enforce: a 400 naming the tool.
	g, _ = decodeChat([]byte(`{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f",
		"parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}}}}], "tool_choice": "required"}`))
	if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: engine.ChatSyntax{Tools: engine.ToolsHermes}}, &g); e == nil || e.Param != "tools[0]" {
		t.Fatalf("pattern: %+v", e)
	}
}

// TestFormatSpecs: each endpoint's structured-output field (chat's
// response_format, the Responses API's text.format, Anthropic's
// output_format) becomes the grammar of its schema; the answer of a
// model that opens its thought in the prompt closes it first.
func TestFormatSpecs(t *testing.T) {
	schema := `{"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": false}`
	for _, c := range []struct {
		decode func([]byte) (genRequest, *apiError)
		body   string
		want   string
	}{
		{decodeChat, `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": ` + schema + `}}}`, schema},
		{decodeChat, `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}}`, `{"type": "object"}`},
		{decodeCompletion, `{"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": ` + schema + `}}}`, schema},
		{decodeResponses, `{"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": ` + schema + `}}}`, schema},
		{decodeResponses, `{"input": "hi", "text": {"format": {"type": "json_object"}}}`, `{"type": "object"}`},
		{decodeMessages, `{"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "output_format": {"type": "json_schema", "schema": ` + schema + `}}`, schema},
	} {
		g, e := c.decode([]byte(c.body))
		if e != nil {
			t.Fatalf("%s: %s", c.body, e.Message)
		}
		if g.chat {
			if _, e := chatParser(node.ModelInfo{Name: "m"}, &g); e != nil {
				t.Fatal(e.Message)
			}
		}
		if g.req.Grammar == nil || string(g.req.Grammar.Schema) != c.want {
			t.Fatalf("%s: grammar %+v", c.body, g.req.Grammar)
		}
		open := engine.ChatSyntax{Reasoning: engine.ReasoningThink, ThinkingOpen: true}
		if !g.chat {
			continue
		}
		if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: open}, &g); e != nil {
			t.Fatal(e.Message)
		}
		if s := g.req.Grammar; len(s.Calls) != 1 || s.Calls[0].Prefix != "</think>\n\n" || string(s.Calls[0].Schema) != c.want {
			t.Fatalf("thinking open: %+v", s)
		}
	}
	// A format with tools offered (auto): the answer is the document or a
	// call, each read back as the parser reads it.
	g, e := decodeChat([]byte(`{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": ` + schema + `}},
		"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"z": {"type": "null"}}, "required": ["z"]}}}]}`))
	if e != nil {
		t.Fatal(e.Message)
	}
	syn := engine.ChatSyntax{Tools: engine.ToolsHermes}
	if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: syn}, &g); e != nil {
		t.Fatal(e.Message)
	}
	gr, err := grammar.Compile(g.req.Grammar)
	if err != nil {
		t.Fatal(err)
	}
	m := gr.NewMatcher()
	if m.Advance([]byte(`{"a": true}`)) != nil || !m.Done() {
		t.Fatal("the document is refused")
	}
	call := "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"z\": null}}\n</tool_call>"
	if m := gr.NewMatcher(); m.Advance([]byte(call)) != nil || !m.Done() {
		t.Fatal("the call is refused")
	}
	if res := chatparse.Parse(syn, true, call); len(res.Calls) != 1 || res.Calls[0].Name != "f" {
		t.Fatalf("parsed %+v", res)
	}
	if m := gr.NewMatcher(); m.Advance([]byte(`hello`)) == nil {
		t.Fatal("free text passed")
	}
	// Harmony (gpt-oss): the document is a message on the final channel,
	// read back as the answer.
	hs := engine.ChatSyntax{Tools: engine.ToolsHarmony, Reasoning: engine.ReasoningHarmony, Keep: []string{"<|channel|>", "<|message|>"}}
	g, e = decodeChat([]byte(`{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": ` + schema + `}}}`))
	if e != nil {
		t.Fatal(e.Message)
	}
	if _, e := chatParser(node.ModelInfo{Name: "m", ChatTemplate: true, ChatSyntax: hs}, &g); e != nil {
		t.Fatal(e.Message)
	}
	if gr, err = grammar.Compile(g.req.Grammar); err != nil {
		t.Fatal(err)
	}
	doc := "<|channel|>final<|message|>{\"a\": true}"
	if m := gr.NewMatcher(); m.Advance([]byte(doc)) != nil || !m.Done() {
		t.Fatal("harmony: the final message is refused")
	}
	if m := gr.NewMatcher(); m.Advance([]byte(`{"a": true}`)) == nil && m.Done() {
		t.Fatal("harmony: a document outside the final channel passed")
	}
	if res := chatparse.Parse(hs, true, doc); res.Content != `{"a": true}` || len(res.Calls) != 0 || res.Reasoning != "" {
		t.Fatalf("harmony: parsed %+v", res)
	}
}

// TestConstrainedRefusalsSwarm: on a real swarm, a schema too ambiguous
// to sample with is a 400 once the last hop and the entry agree, and a
// forced call on a model without tool syntax is a 400 naming tools.
func TestConstrainedRefusalsSwarm(t *testing.T) {
	c := shared.get(t)
	var alts []string
	for i := range 300 {
		alts = append(alts, fmt.Sprintf(`{"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"const": %d}}, "required": ["a", "b"]}`, i))
	}
	var schema any
	if err := json.Unmarshal([]byte(`{"anyOf": [`+strings.Join(alts, ",")+`]}`), &schema); err != nil {
		t.Fatal(err)
	}
	status, _, body := post(t, c.urls[0]+"/v1/chat/completions", "", map[string]any{"max_tokens": 8,
		"messages":        []map[string]string{{"role": "user", "content": "hi"}},
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": schema}}})
	if e := errorOf(t, body); status != http.StatusBadRequest || !strings.Contains(e.Message, "parses alive") {
		t.Fatalf("ambiguous: %d %s", status, body)
	}
	status, _, body = post(t, c.urls[0]+"/v1/chat/completions", "", map[string]any{"max_tokens": 8,
		"messages":    []map[string]string{{"role": "user", "content": "hi"}},
		"tools":       []any{map[string]any{"type": "function", "function": map[string]any{"name": "f"}}},
		"tool_choice": "required"})
	if e := errorOf(t, body); status != http.StatusBadRequest || e.Param == nil || *e.Param != "tools" {
		t.Fatalf("no tool syntax: %d %s", status, body)
	}
}
