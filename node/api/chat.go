package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// Tool calls and reasoning in chat answers. The model's chat template
// renders the tools into the prompt; its family's syntax (read from the
// template, engine.ChatSyntax) says how the model writes calls and
// thoughts, and chatparse reads them back out of the output: calls into
// OpenAI's tool_calls (finish_reason "tool_calls"), thoughts into
// reasoning_content, as vLLM's and llama.cpp's servers answer.

// Wire shapes of calls and thoughts.
type (
	toolCallJSON struct {
		// Index is set in stream deltas only.
		Index    *int           `json:"index,omitempty"`
		ID       string         `json:"id,omitempty"`
		Type     string         `json:"type,omitempty"`
		Function toolCallFnJSON `json:"function"`
	}
	toolCallFnJSON struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	}
)

// FinishToolCalls is OpenAI's finish reason of an answer that calls tools.
const FinishToolCalls = "tool_calls"

// maxTools bounds the tools a request may offer.
const maxTools = 128

// templateReserved are the template variables the renderer sets itself.
var templateReserved = map[string]bool{"messages": true, "tools": true, "add_generation_prompt": true,
	"bos_token": true, "eos_token": true, "raise_exception": true, "strftime_now": true}

// decodeTools checks tools and tool_choice. Calls are parsed for "auto"
// (the default); "none" offers no tools at all (the template renders none
// and nothing is parsed). "required" and a named function constrain the
// output to one call (of any tool, or of the named one) in the model's
// syntax, with arguments valid against the tool's parameters (g.cons).
func decodeTools(raw, choice json.RawMessage, g *genRequest) *apiError {
	var tools []json.RawMessage
	if !isNull(raw) {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return invalid("tools", "tools must be an array of {\"type\": \"function\", \"function\": {...}}")
		}
	}
	if len(tools) > maxTools {
		return invalid("tools", "%d tools: at most %d", len(tools), maxTools)
	}
	for i, t := range tools {
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		param := fmt.Sprintf("tools[%d]", i)
		switch err := json.Unmarshal(t, &tool); {
		case err != nil:
			return invalid(param, "%s must be an object", param)
		case tool.Type != "function":
			return invalid(param+".type", "%s.type %q is not supported (only function)", param, tool.Type)
		case tool.Function == nil || tool.Function.Name == "":
			return invalid(param+".function.name", "%s.function.name is required", param)
		}
	}
	mode := "auto"
	if !isNull(choice) {
		var s string
		if err := json.Unmarshal(choice, &s); err != nil {
			var named struct {
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(choice, &named) != nil || named.Function.Name == "" || named.Type != "function" {
				return invalid("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
			}
			mode, g.cons.force, g.cons.name = "named", true, named.Function.Name
			s = mode
		}
		switch s {
		case "named":
		case "none", "auto":
			mode = s
		case "required":
			mode, g.cons.force = s, true
		default:
			return invalid("tool_choice", `tool_choice %q is not one of "none", "auto", "required"`, s)
		}
	}
	if g.cons.force && len(tools) == 0 {
		return invalid("tool_choice", "tool_choice %s forces a call, but no tools are offered", mode)
	}
	if g.cons.force && g.cons.schema != nil {
		return invalid("response_format", "response_format with tool_choice %s: the answer is a call, so its format cannot apply; send one or the other", mode)
	}
	if len(tools) == 0 || mode == "none" {
		return nil
	}
	g.req.Tools = raw
	g.tools = true
	if g.cons.force || g.cons.schema != nil {
		g.cons.tools = toolSchemas(raw)
	}
	return nil
}

// decodeTemplateKwargs takes chat_template_kwargs: an object of template
// variables.
func decodeTemplateKwargs(raw json.RawMessage, req *node.Request) *apiError {
	if isNull(raw) {
		return nil
	}
	var vars map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&vars); err != nil {
		return invalid("chat_template_kwargs", "chat_template_kwargs must be an object of template variables")
	}
	for k, v := range vars {
		if templateReserved[k] {
			return invalid("chat_template_kwargs", "chat_template_kwargs may not set %q: the server sets it", k)
		}
		vars[k] = jinjaNumbers(v)
	}
	req.ChatVars = vars
	return nil
}

// jinjaNumbers turns JSON numbers into the ints and floats templates
// compare with.
func jinjaNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = jinjaNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = jinjaNumbers(e)
		}
	}
	return v
}

// chatParser picks the parser of a chat's output from the model's
// template syntax, or refuses tools the model's family has no syntax
// for. nil: the output is all content, as it is.
func chatParser(in node.ModelInfo, g *genRequest) (*chatparse.Parser, *apiError) {
	syn := in.ChatSyntax
	if g.tools && syn.Tools == engine.ToolsNone {
		why := "its chat template renders no tool-call syntax this server can read back"
		if !in.ChatTemplate {
			why = "it has no chat template"
		}
		return nil, invalid("tools", "tools are not supported for model %q: %s (supported: Llama 3.1+ JSON calls, Qwen2.5/Qwen3 <tool_call>, Mistral [TOOL_CALLS], DeepSeek V3/R1 tool-call tokens)", in.Name, why)
	}
	if v, ok := g.req.ChatVars["enable_thinking"].(bool); ok && !v {
		// Qwen's switch: the template closes the thought in the prompt
		// (or opens none), so the output is all answer.
		syn.ThinkingOpen = false
	}
	// Streamed arguments for every answer, whole or streamed, so that
	// the two read the same calls (a call whose head is read stays one).
	p := chatparse.New(syn, g.tools, chatparse.WithArgumentDeltas())
	if p.Active() {
		g.req.Keep = p.Keep()
	} else {
		p = nil
	}
	spec, e := g.cons.spec(syn, syn.ThinkingOpen, g.req.Keep)
	if e != nil {
		return nil, e
	}
	g.req.Grammar = spec
	return p, nil
}

// answer is a chat answer taking shape from parser events.
type answer struct {
	content, reasoning strings.Builder
	calls              []toolCallJSON
}

// add takes events; newID names a call whose syntax carries no ID.
func (a *answer) add(evs []chatparse.Event) {
	for _, e := range evs {
		switch e.Kind {
		case chatparse.Content:
			a.content.WriteString(e.Text)
		case chatparse.Reasoning:
			a.reasoning.WriteString(e.Text)
		case chatparse.ToolCall:
			a.calls = append(a.calls, callJSON(e.Call))
		}
	}
}

// callJSON is a call as OpenAI writes it in a message, named
// "call_..." unless the model named it.
func callJSON(c chatparse.Call) toolCallJSON {
	id := c.ID
	if id == "" {
		id = newID("call_")
	}
	return toolCallJSON{ID: id, Type: "function", Function: toolCallFnJSON{Name: c.Name, Arguments: c.Arguments}}
}

// message is the answer as a whole response's message: content null when
// the answer is only calls, as OpenAI's.
func (a *answer) message() *chatMsgJSON {
	m := &chatMsgJSON{Role: "assistant", ToolCalls: a.calls}
	if s := a.content.String(); s != "" || len(a.calls) == 0 {
		m.Content = &s
	}
	if s := a.reasoning.String(); s != "" {
		m.ReasoningContent = &s
	}
	return m
}

// finish is the finish reason of an answer that called tools.
func finishOf(reason string, calls int) string {
	if calls > 0 && reason == node.FinishStop {
		return FinishToolCalls
	}
	return reason
}

// deltas are the stream deltas of events, in order: text as content or
// reasoning_content, and each call as OpenAI streams one (a first delta
// with its index, id, type, name and empty arguments, then ones with its
// arguments: fragments as the model writes them where the parser
// streams them, then the rest). open holds the IDs of the calls started
// and not yet ended, by index.
func deltas(evs []chatparse.Event, open map[int]string) []*deltaJSON {
	var out []*deltaJSON
	args := func(i int, s string) {
		if s != "" {
			out = append(out, &deltaJSON{ToolCalls: []toolCallJSON{{Index: &i, Function: toolCallFnJSON{Arguments: s}}}})
		}
	}
	for _, e := range evs {
		text := e.Text
		switch e.Kind {
		case chatparse.Content:
			out = append(out, &deltaJSON{Content: &text})
		case chatparse.Reasoning:
			out = append(out, &deltaJSON{ReasoningContent: &text})
		case chatparse.CallStart:
			i := e.Call.Index
			c := callJSON(e.Call)
			c.Index = &i
			open[i] = c.ID
			out = append(out, &deltaJSON{ToolCalls: []toolCallJSON{c}})
		case chatparse.CallArgs:
			args(e.Call.Index, e.Text)
		case chatparse.ToolCall:
			i := e.Call.Index
			if _, started := open[i]; started {
				delete(open, i)
				args(i, e.Call.Arguments[e.Sent:])
				continue
			}
			c := callJSON(e.Call)
			c.Index = &i
			c.Function.Arguments = ""
			out = append(out, &deltaJSON{ToolCalls: []toolCallJSON{c}})
			// A call with empty arguments still gets its arguments delta.
			out = append(out, &deltaJSON{ToolCalls: []toolCallJSON{{Index: &i, Function: toolCallFnJSON{Arguments: e.Call.Arguments}}}})
		}
	}
	return out
}
