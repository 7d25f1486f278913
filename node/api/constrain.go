package api

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
)

// Constrained decoding: response_format (json_object, json_schema) and a
// tool_choice that forces a call ("required", a named function, and the
// other APIs' equivalents) become a grammar.Spec on the request, which
// the last hop of the path masks its sampling with, so that even a model
// that would write anything writes a document of the language. What the
// grammar cannot express is refused here, naming the field.

// constraint is what a request asks its output to be.
type constraint struct {
	// schema: a JSON document valid against it (response_format).
	schema json.RawMessage
	// force: a tool call; name, when set, is the one tool allowed.
	force bool
	name  string
	// tools are the offered tools' parameters schemas by name, in order.
	tools []toolSchema
}

type toolSchema struct {
	name   string
	params json.RawMessage
}

// anyObject is the schema of json_object, and of a tool without
// parameters.
var anyObject = json.RawMessage(`{"type": "object"}`)

// decodeFormat reads a chat response_format (param names the field:
// response_format, or text.format in the Responses API, whose
// json_schema fields sit beside type instead of inside json_schema).
func decodeFormat(raw json.RawMessage, param string, flat bool) (json.RawMessage, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var f struct {
		Type       string          `json:"type"`
		Schema     json.RawMessage `json:"schema"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, invalid(param, `%s must be {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", ...}`, param)
	}
	switch f.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return anyObject, nil
	case "json_schema":
	default:
		return nil, invalid(param, "%s type %q is not supported (text, json_object or json_schema)", param, f.Type)
	}
	schema := f.Schema
	if !flat {
		if f.JSONSchema == nil {
			return nil, invalid(param, "%s of type json_schema needs json_schema: {\"name\": ..., \"schema\": {...}}", param)
		}
		schema = f.JSONSchema.Schema
	}
	if isNull(schema) {
		return nil, invalid(param, "%s of type json_schema needs a schema", param)
	}
	if err := grammar.CheckSchema(schema); err != nil {
		return nil, invalid(param, "%s: the schema cannot be enforced: %v", param, schemaWhy(err))
	}
	return schema, nil
}

// schemaWhy is a grammar error without its package's prefix.
func schemaWhy(err error) string {
	s := err.Error()
	for _, p := range []string{grammar.ErrUnsupported.Error() + ": ", grammar.ErrTooLarge.Error() + ": "} {
		if i := bytes.Index([]byte(s), []byte(p)); i >= 0 {
			return s[:i] + s[i+len(p):]
		}
	}
	return s
}

// toolSchemas reads the offered tools' names and parameters (chat's
// shape: the other APIs' tools are turned into it first).
func toolSchemas(raw json.RawMessage) []toolSchema {
	var tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	_ = json.Unmarshal(raw, &tools) // decodeTools checked the shape
	out := make([]toolSchema, 0, len(tools))
	for _, t := range tools {
		p := t.Function.Parameters
		if isNull(p) {
			p = anyObject
		}
		out = append(out, toolSchema{t.Function.Name, p})
	}
	return out
}

// callSyntax is the text around one call's arguments in a family's
// syntax, as its parser (chatparse) reads it back.
func callSyntax(syn engine.ChatSyntax, name string) (prefix, suffix string, ok bool) {
	q, _ := json.Marshal(name)
	switch syn.Tools {
	case engine.ToolsHermes:
		return "<tool_call>\n{\"name\": " + string(q) + ", \"arguments\": ", "}\n</tool_call>", true
	case engine.ToolsLlama3:
		return "{\"name\": " + string(q) + ", \"parameters\": ", "}", true
	case engine.ToolsMistral:
		for _, k := range syn.Keep {
			if k == "[ARGS]" { // the newer tokenizers' name[ARGS]{...}
				return "[TOOL_CALLS]" + name + "[ARGS]", "", true
			}
		}
		return "[TOOL_CALLS][{\"name\": " + string(q) + ", \"arguments\": ", "}]", true
	case engine.ToolsDeepSeek:
		return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>" + name + "\n```json\n",
			"\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", true
	case engine.ToolsHarmony:
		// As OpenAI's harmony docs write a call: the recipient after the
		// channel, the arguments' type after <|constrain|>. No suffix:
		// <|call|> is an end token, which the grammar allows once the
		// arguments close, and which prints nothing.
		return "<|channel|>commentary to=functions." + name + " <|constrain|>json<|message|>", "", true
	}
	return "", "", false
}

// spec builds the grammar of c for a model whose output syntax is syn
// (thinking: the output begins inside an open thought, which the
// document must close first); nil when c asks nothing. A format with
// tools offered (tool_choice auto) allows the document or a call, as
// OpenAI's models answer in the format or call a tool.
func (c *constraint) spec(syn engine.ChatSyntax, thinking bool, keep []string) (*grammar.Spec, *apiError) {
	lead := ""
	if thinking {
		lead = "</think>\n\n"
	}
	// docLead opens the document: harmony's answer is a message on the
	// final channel, which its parser reads as content.
	docLead := lead
	if syn.Reasoning == engine.ReasoningHarmony {
		docLead = "<|channel|>final<|message|>"
	}
	if !c.force && c.schema == nil {
		return nil, nil
	}
	// The calls the answer may be: the forced ones, or with a format and
	// tools offered (tool_choice auto), any, beside the document.
	var calls []grammar.Call
	for i, t := range c.tools {
		if c.name != "" && t.name != c.name {
			continue
		}
		pre, suf, ok := callSyntax(syn, t.name)
		if !ok {
			return nil, invalid("tool_choice", "the answer must be a call, but the model has no tool-call syntax this server can write (%s)", syn.Family())
		}
		if err := grammar.CheckSchema(t.params); err != nil {
			return nil, invalid(fmt.Sprintf("tools[%d]", i), "tools[%d] (%q): its parameters cannot be enforced: %v", i, t.name, schemaWhy(err))
		}
		calls = append(calls, grammar.Call{Prefix: lead + pre, Schema: t.params, Suffix: suf})
	}
	switch {
	case c.force && len(calls) == 0:
		return nil, invalid("tool_choice", "tool_choice names %q, which is not among the tools", c.name)
	case c.force:
		return &grammar.Spec{Calls: calls, Keep: keep}, nil
	case docLead != "" || len(calls) > 0:
		calls = append(calls, grammar.Call{Prefix: docLead, Schema: c.schema})
		return &grammar.Spec{Calls: calls, Keep: keep}, nil
	}
	return &grammar.Spec{Schema: c.schema, Keep: keep}, nil
}
