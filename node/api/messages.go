package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// POST /v1/messages: Anthropic's Messages API, as a translation onto the
// chat path. system becomes a system message; a message's text blocks
// its content, an assistant's tool_use blocks its tool calls, a user's
// tool_result blocks tool messages; tools ({name, description,
// input_schema}) the chat's function tools. The answer's parsed output
// becomes content blocks (thinking, text, tool_use), with Anthropic's
// stop reasons, and its stream Anthropic's named events. Errors take
// Anthropic's shape, {"type": "error", "error": {"type", "message"}}.

const (
	endpointMessages    = "messages"
	endpointCountTokens = "messages_count_tokens"
)

type messagesBody struct {
	Model         string          `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []messagesMsg   `json:"messages"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	Stream        *bool           `json:"stream"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	// OutputFormat is Anthropic's structured outputs: {"type":
	// "json_schema", "schema": {...}}.
	OutputFormat json.RawMessage `json:"output_format"`

	// Refused: they need the server to run tools.
	MCPServers json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage `json:"container"`

	// Strata's extensions, as in chat completions.
	Seed               *int64          `json:"seed"`
	Profile            *string         `json:"profile"`
	QueueTimeout       *float64        `json:"queue_timeout"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

type messagesMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesBlock is a content block of a request's message.
type messagesBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

type messagesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// decodeMessages decodes a POST /v1/messages body.
func decodeMessages(b []byte) (genRequest, *apiError) { return decodeMessagesBody(b, false) }

// decodeMessagesBody decodes a Messages API body; counting (a
// count_tokens body) needs no max_tokens.
func decodeMessagesBody(b []byte, counting bool) (genRequest, *apiError) {
	var body messagesBody
	if e := decodeBytes(b, &body); e != nil {
		return genRequest{}, e
	}
	g := genRequest{chat: true}
	if counting && body.MaxTokens == nil {
		one := int64(1)
		body.MaxTokens = &one
	}
	switch {
	case body.MaxTokens == nil:
		return g, invalid("max_tokens", "max_tokens is required")
	case !isNull(body.MCPServers) && !bytes.Equal(bytes.TrimSpace(body.MCPServers), []byte("[]")):
		return g, invalid("mcp_servers", "mcp_servers are not supported: this server runs only the model; run the tools in the client")
	case !isNull(body.Container):
		return g, invalid("container", "container is not supported: this server runs no code")
	case len(body.Messages) == 0:
		return g, invalid("messages", "messages is required and must not be empty")
	case len(body.Messages) > maxMessages:
		return g, invalid("messages", "%d messages: at most %d", len(body.Messages), maxMessages)
	}
	sb := samplingBody{Model: body.Model, Temperature: body.Temperature, TopP: body.TopP, TopK: body.TopK, Seed: body.Seed,
		Stream: body.Stream, Profile: body.Profile, QueueTimeout: body.QueueTimeout}
	if e := sb.apply(&g, body.MaxTokens); e != nil {
		return g, e
	}
	stop, e := decodeStop(body.StopSequences)
	if e != nil {
		e.Param = "stop_sequences"
		e.Message = strings.Replace(e.Message, "stop must be", "stop_sequences must be", 1)
		return g, e
	}
	g.req.Stop = stop
	system, e := messagesSystem(body.System)
	if e != nil {
		return g, e
	}
	msgs, e := messagesInput(body.Messages)
	if e != nil {
		return g, e
	}
	if system != "" {
		msgs = append([]engine.Message{{Role: "system", Content: system}}, msgs...)
	}
	g.req.Messages = msgs
	if g.cons.schema, e = decodeFormat(body.OutputFormat, "output_format", true); e != nil {
		return g, e
	}
	tools, e := messagesTools(body.Tools)
	if e != nil {
		return g, e
	}
	choice, e := messagesToolChoice(body.ToolChoice)
	if e != nil {
		return g, e
	}
	if e := decodeTools(tools, choice, &g); e != nil {
		return g, e
	}
	if e := decodeTemplateKwargs(body.ChatTemplateKwargs, &g.req); e != nil {
		return g, e
	}
	// "enabled" changes nothing: a model thinks as its template lets it,
	// and budget_tokens is not enforced.
	if t := body.Thinking; t != nil && t.Type == "disabled" {
		noThinking(&g.req)
	}
	g.shape = &messagesShape{bs: blocks{callPrefix: "toolu_"}}
	return g, nil
}

// messagesSystem reads system: a string or a list of text blocks.
func messagesSystem(raw json.RawMessage) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var bls []messagesBlock
	if err := json.Unmarshal(raw, &bls); err != nil {
		return "", invalid("system", "system must be a string or a list of text blocks")
	}
	var b strings.Builder
	for i, bl := range bls {
		if bl.Type != "text" || bl.Text == nil {
			return "", invalid(fmt.Sprintf("system[%d]", i), "system[%d]: only text blocks are supported (got type %q)", i, bl.Type)
		}
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(*bl.Text)
	}
	return b.String(), nil
}

// messagesInput turns the messages into chat messages: a user's
// tool_result blocks into tool messages (in their place among its text),
// an assistant's tool_use blocks into its turn's tool calls.
func messagesInput(in []messagesMsg) ([]engine.Message, *apiError) {
	var msgs []engine.Message
	names := map[string]string{} // tool_use id → the tool's name
	for i, m := range in {
		param := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "user", "assistant":
		case "":
			return nil, invalid(param+".role", "%s.role is required", param)
		case "system":
			return nil, invalid(param+".role", "%s.role \"system\" is not a message role here: use the top-level system parameter", param)
		default:
			return nil, invalid(param+".role", "%s.role %q is not supported (user or assistant)", param, m.Role)
		}
		if isNull(m.Content) {
			return nil, invalid(param+".content", "%s.content is required", param)
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			msgs = append(msgs, engine.Message{Role: m.Role, Content: s})
			continue
		}
		var bls []messagesBlock
		if err := json.Unmarshal(m.Content, &bls); err != nil {
			return nil, invalid(param+".content", "%s.content must be a string or a list of content blocks", param)
		}
		var text strings.Builder
		var calls []engine.ToolCall
		pending := false // text (or calls) not yet in a message
		flush := func() {
			if pending {
				msgs = append(msgs, engine.Message{Role: m.Role, Content: text.String(), ToolCalls: calls})
			}
			text.Reset()
			calls, pending = nil, false
		}
		for j, bl := range bls {
			bp := fmt.Sprintf("%s.content[%d]", param, j)
			switch bl.Type {
			case "text":
				if bl.Text == nil {
					return nil, invalid(bp+".text", "%s.text is required", bp)
				}
				text.WriteString(*bl.Text)
				pending = true
			case "tool_use":
				switch {
				case m.Role != "assistant":
					return nil, invalid(bp+".type", "%s: tool_use blocks belong in assistant messages", bp)
				case bl.ID == "":
					return nil, invalid(bp+".id", "%s.id is required", bp)
				case bl.Name == "":
					return nil, invalid(bp+".name", "%s.name is required", bp)
				}
				args := "{}"
				if !isNull(bl.Input) {
					if t := bytes.TrimSpace(bl.Input); t[0] != '{' {
						return nil, invalid(bp+".input", "%s.input must be an object", bp)
					}
					var c bytes.Buffer
					if err := json.Compact(&c, bl.Input); err != nil {
						return nil, invalid(bp+".input", "%s.input: %v", bp, err)
					}
					args = c.String()
				}
				var tc engine.ToolCall
				tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = bl.ID, "function", bl.Name, args
				names[bl.ID] = bl.Name
				calls = append(calls, tc)
				pending = true
			case "tool_result":
				switch {
				case m.Role != "user":
					return nil, invalid(bp+".type", "%s: tool_result blocks belong in user messages", bp)
				case bl.ToolUseID == "":
					return nil, invalid(bp+".tool_use_id", "%s.tool_use_id is required", bp)
				}
				out, e := messagesResult(bl.Content, bp+".content")
				if e != nil {
					return nil, e
				}
				flush() // the user's text before it stays before it
				msgs = append(msgs, engine.Message{Role: "tool", Content: out, ToolCallID: bl.ToolUseID, Name: names[bl.ToolUseID]})
			case "thinking", "redacted_thinking":
				// An earlier answer's thought, sent back: dropped, as chat
				// templates drop past thoughts.
				if m.Role != "assistant" {
					return nil, invalid(bp+".type", "%s: %s blocks belong in assistant messages", bp, bl.Type)
				}
			case "image", "document", "search_result":
				return nil, invalid(bp+".type", "%s.type %q is not supported: only text, tool_use and tool_result blocks (the model reads text)", bp, bl.Type)
			default:
				return nil, invalid(bp+".type", "%s.type %q is not supported (text, tool_use, tool_result, thinking)", bp, bl.Type)
			}
		}
		if len(bls) == 0 {
			pending = true // an empty turn is still a turn
		}
		flush()
	}
	if n := len(in); in[n-1].Role == "assistant" {
		return nil, invalid(fmt.Sprintf("messages[%d].role", n-1), "messages[%d]: a last assistant message (a prefill for the answer to continue) is not supported: the answer is always a new turn; end with a user message", n-1)
	}
	return msgs, nil
}

// messagesResult reads a tool_result's content: a string or text blocks.
func messagesResult(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var bls []messagesBlock
	if err := json.Unmarshal(raw, &bls); err != nil {
		return "", invalid(param, "%s must be a string or a list of text blocks", param)
	}
	var b strings.Builder
	for i, bl := range bls {
		if bl.Type != "text" || bl.Text == nil {
			return "", invalid(fmt.Sprintf("%s[%d].type", param, i), "%s[%d]: only text blocks are supported in a tool result (got type %q)", param, i, bl.Type)
		}
		b.WriteString(*bl.Text)
	}
	return b.String(), nil
}

// messagesTools turns tools into chat's shape. A server tool (bash,
// text_editor, web_search, ...: a versioned type) would need the server
// to run it: refused.
func messagesTools(raw json.RawMessage) (json.RawMessage, *apiError) {
	return toolsToChat(raw, `{"name": ..., "description": ..., "input_schema": {...}}`, func(t json.RawMessage, param string) (chatToolFn, *apiError) {
		var tool messagesTool
		switch err := json.Unmarshal(t, &tool); {
		case err != nil:
			return chatToolFn{}, invalid(param, "%s must be an object", param)
		case tool.Type != "" && tool.Type != "custom":
			return chatToolFn{}, invalid(param+".type", "%s.type %q is not supported: server tools need the server to run them, and this one runs only the model; define the tool with name, description and input_schema", param, tool.Type)
		case tool.Name == "":
			return chatToolFn{}, invalid(param+".name", "%s.name is required", param)
		}
		return chatToolFn{Name: tool.Name, Description: tool.Description, Parameters: tool.InputSchema}, nil
	})
}

// messagesToolChoice maps tool_choice to chat's: "any" is "required", a
// named tool a named function (both constrain the output to a call).
func messagesToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		return nil, invalid("tool_choice", `tool_choice must be {"type": "auto"}, {"type": "none"}, {"type": "any"} or {"type": "tool", "name": ...}`)
	}
	switch tc.Type {
	case "auto", "none":
		return json.RawMessage(`"` + tc.Type + `"`), nil
	case "any":
		return json.RawMessage(`"required"`), nil
	case "tool":
		if tc.Name == "" {
			return nil, invalid("tool_choice", `tool_choice {"type": "tool"} needs the tool's name`)
		}
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		return b, nil
	}
	return nil, invalid("tool_choice", `tool_choice type %q is not one of "auto", "none", "any", "tool"`, tc.Type)
}

// Wire shapes of the answer.
type (
	messagesAnswer struct {
		ID           string        `json:"id"`
		Type         string        `json:"type"` // "message"
		Role         string        `json:"role"`
		Model        string        `json:"model"`
		Content      []any         `json:"content"`
		StopReason   *string       `json:"stop_reason"`
		StopSequence *string       `json:"stop_sequence"`
		Usage        messagesUsage `json:"usage"`
		Strata       *strataJSON   `json:"strata,omitempty"`
	}
	messagesUsage struct {
		InputTokens              int `json:"input_tokens"`
		CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int `json:"cache_read_input_tokens"`
		OutputTokens             int `json:"output_tokens"`
	}
	textBlock struct {
		Type string `json:"type"` // "text"
		Text string `json:"text"`
	}
	thinkingBlock struct {
		Type      string `json:"type"` // "thinking"
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	toolUseBlock struct {
		Type  string          `json:"type"` // "tool_use"
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
)

// Anthropic's stop reasons.
const (
	stopEndTurn      = "end_turn"
	stopMaxTokens    = "max_tokens"
	stopStopSequence = "stop_sequence"
	stopToolUse      = "tool_use"
)

// stopReason is Anthropic's stop reason of a result with calls tool
// calls, and the stop sequence that ended it (nil: none).
func stopReason(res node.Result, calls int) (string, *string) {
	switch {
	case res.FinishReason == node.FinishLength:
		return stopMaxTokens, nil
	case calls > 0:
		return stopToolUse, nil
	case res.StopSequence != "":
		s := res.StopSequence
		return stopStopSequence, &s
	}
	return stopEndTurn, nil
}

// messagesShape writes a request's answer as an Anthropic message, and
// its stream as Anthropic's events.
type messagesShape struct {
	bs  blocks
	out *sse
}

func (m *messagesShape) idPrefix() string { return "msg_" }
func (m *messagesShape) param() string    { return "messages" }

// contentOf is a block as a content block; done: with its text or input
// (a stream's content_block_start has neither).
func contentOf(b *block, done bool) any {
	switch b.kind {
	case chatparse.Reasoning:
		t := thinkingBlock{Type: "thinking"}
		if done {
			t.Thinking = b.text.String()
		}
		return t
	case chatparse.ToolCall:
		t := toolUseBlock{Type: "tool_use", ID: b.callID, Name: b.call.Name, Input: json.RawMessage(`{}`)}
		if done {
			t.Input = toolInput(b.call.Arguments)
		}
		return t
	}
	t := textBlock{Type: "text"}
	if done {
		t.Text = b.text.String()
	}
	return t
}

// toolInput is a call's arguments as tool_use input, which must be an
// object: arguments that are JSON of another kind are wrapped as
// {"arguments": ...}.
func toolInput(args string) json.RawMessage {
	t := bytes.TrimSpace([]byte(args))
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t
	}
	if !json.Valid(t) {
		b, _ := json.Marshal(args)
		t = b
	}
	return json.RawMessage(`{"arguments":` + string(t) + `}`)
}

func (m *messagesShape) answer(c *call, res node.Result) messagesAnswer {
	a := messagesAnswer{ID: c.id, Type: "message", Role: "assistant", Model: c.model.Name, Content: []any{},
		Usage:  messagesUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens},
		Strata: &strataJSON{Replays: res.Replays, Paths: res.Paths, TTFTMs: float64(res.TTFT.Microseconds()) / 1000}}
	for _, b := range m.bs.list {
		a.Content = append(a.Content, contentOf(b, true))
	}
	reason, seq := stopReason(res, m.bs.calls())
	a.StopReason, a.StopSequence = &reason, seq
	return a
}

func (m *messagesShape) whole(w http.ResponseWriter, c *call, res node.Result, evs []chatparse.Event) {
	m.bs.add(evs)
	m.bs.end()
	writeJSON(w, http.StatusOK, m.answer(c, res))
}

// Stream events.

func (m *messagesShape) open(out *sse, c *call) {
	m.out = out
	m.bs.sink = m
	out.named("message_start", map[string]any{"type": "message_start", "message": messagesAnswer{ID: c.id, Type: "message",
		Role: "assistant", Model: c.model.Name, Content: []any{}, Usage: messagesUsage{InputTokens: c.prompt}}})
	out.named("ping", map[string]any{"type": "ping"})
}

func (m *messagesShape) events(_ *sse, _ *call, evs []chatparse.Event) { m.bs.add(evs) }

func (m *messagesShape) close(out *sse, _ *call, res node.Result) {
	m.bs.end()
	reason, seq := stopReason(res, m.bs.calls())
	out.named("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": messagesUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens}})
	out.named("message_stop", map[string]any{"type": "message_stop"})
}

func (m *messagesShape) fail(out *sse, _ *call, e *apiError) {
	out.named("error", anthropicBody(e))
}

// The blocks' sink: each block as Anthropic streams a content block.

func (m *messagesShape) opened(i int, b *block) {
	m.out.named("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": contentOf(b, false)})
}

func (m *messagesShape) grew(i int, b *block, text string) {
	delta := map[string]any{"type": "text_delta", "text": text}
	switch b.kind {
	case chatparse.Reasoning:
		delta = map[string]any{"type": "thinking_delta", "thinking": text}
	case chatparse.ToolCall:
		delta = map[string]any{"type": "input_json_delta", "partial_json": text}
	}
	m.out.named("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": delta})
}

func (m *messagesShape) closed(i int, b *block) {
	if b.kind == chatparse.ToolCall {
		// Streamed arguments are an object, which toolInput leaves as it
		// is, so the rest follows what went out.
		if rest := string(toolInput(b.call.Arguments))[b.sent:]; rest != "" {
			m.out.named("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": rest}})
		}
	}
	m.out.named("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
}

// Errors in Anthropic's shape.

type anthropicError struct {
	Type  string             `json:"type"` // "error"
	Error anthropicErrorBody `json:"error"`
}

type anthropicErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicBody is e as Anthropic's error JSON, its type from the
// status as Anthropic names them.
func anthropicBody(e *apiError) anthropicError {
	typ := "api_error"
	switch {
	case e.Code == "request_too_large":
		typ = "request_too_large"
	case e.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	case e.Status == http.StatusForbidden:
		typ = "permission_error"
	case e.Status == http.StatusNotFound:
		typ = "not_found_error"
	case e.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case e.Status == http.StatusServiceUnavailable:
		typ = "overloaded_error"
	case e.Status >= 400 && e.Status < 500:
		typ = "invalid_request_error"
	}
	return anthropicError{Type: "error", Error: anthropicErrorBody{Type: typ, Message: e.Message}}
}

// writeAnthropicError sends e as the whole response, in Anthropic's
// shape.
// A prompt over the context is Anthropic's 400 ("prompt is too long"),
// where OpenAI's endpoints answer 413.
func writeAnthropicError(w http.ResponseWriter, e *apiError) {
	if e.Code == "context_length_exceeded" {
		c := *e
		c.Status = http.StatusBadRequest
		e = &c
	}
	writeErrorBody(w, e, anthropicBody(e))
}

// handleCountTokens serves POST /v1/messages/count_tokens: the prompt
// tokens a Messages request would take (system, messages and tools
// rendered by the model's chat template), {"input_tokens": n}.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	b, e := readBody(w, r, s.o.maxBody)
	if e == nil {
		var g genRequest
		if g, e = decodeMessagesBody(b, true); e == nil {
			n, err := s.b.CountTokens(g.req)
			if err == nil {
				writeJSON(w, http.StatusOK, map[string]int{"input_tokens": n})
				return
			}
			e = fromError(err, "messages")
		}
	}
	writeAnthropicError(w, e)
}
