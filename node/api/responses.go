package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// POST /v1/responses: OpenAI's Responses API, as a translation onto the
// chat path. The input items become chat messages (instructions a system
// message, function_call items an assistant turn's tool calls,
// function_call_output items tool messages), the flat function tools
// the chat's tools; the answer's parsed output (chatparse, through
// blocks) becomes output items: a reasoning item for the thought, a
// message with output_text for the text, a function_call item per call.
// Nothing is stored: a request that needs the server to remember an
// earlier one (previous_response_id, conversation, item_reference,
// background) is refused, naming the field; store is accepted and the
// answer says "store": false.

const endpointResponses = "responses"

// responsesBody is a POST /v1/responses body.
type responsesBody struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	Tools           json.RawMessage `json:"tools"`
	ToolChoice      json.RawMessage `json:"tool_choice"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Stream          *bool           `json:"stream"`
	Reasoning       *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Text *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	Metadata          map[string]string `json:"metadata"`
	Store             *bool             `json:"store"`
	Include           []string          `json:"include"`
	Truncation        *string           `json:"truncation"`
	TopLogprobs       *int64            `json:"top_logprobs"`

	// Refused: they need state or work this server does not have.
	PreviousResponseID *string         `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	Background         *bool           `json:"background"`
	Prompt             json.RawMessage `json:"prompt"`

	// Strata's extensions, as in chat completions.
	Seed               *int64          `json:"seed"`
	TopK               *int64          `json:"top_k"`
	Profile            *string         `json:"profile"`
	QueueTimeout       *float64        `json:"queue_timeout"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// responsesItem is one input item: a message (type "message" or none),
// a function call the model made, or a call's output.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesTool is a tool in the Responses API's flat shape.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatTool is a tool in chat completions' shape, as templates take it.
type chatTool struct {
	Type     string     `json:"type"`
	Function chatToolFn `json:"function"`
}

type chatToolFn struct {
	Name        string          `json:"name"`
	Description *string         `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// decodeResponses decodes a POST /v1/responses body.
func decodeResponses(b []byte) (genRequest, *apiError) {
	var body responsesBody
	if e := decodeBytes(b, &body); e != nil {
		return genRequest{}, e
	}
	g := genRequest{chat: true}
	switch {
	case body.PreviousResponseID != nil && *body.PreviousResponseID != "":
		return g, invalid("previous_response_id", "previous_response_id is not supported: this server keeps no responses; send the whole conversation in input")
	case !isNull(body.Conversation):
		return g, invalid("conversation", "conversation is not supported: this server keeps no conversations; send the whole conversation in input")
	case body.Background != nil && *body.Background:
		return g, invalid("background", "background responses are not supported: this server keeps no responses; stream instead")
	case !isNull(body.Prompt):
		return g, invalid("prompt", "prompt (a stored prompt template) is not supported: send instructions and input")
	case body.MaxOutputTokens != nil && *body.MaxOutputTokens < 1:
		return g, invalid("max_output_tokens", "max_output_tokens must be at least 1 (got %d)", *body.MaxOutputTokens)
	case body.Truncation != nil && *body.Truncation != "disabled":
		return g, invalid("truncation", "truncation %q is not supported (only disabled: a conversation over the context is a 413)", *body.Truncation)
	case body.TopLogprobs != nil && *body.TopLogprobs != 0:
		return g, invalid("top_logprobs", "top_logprobs: logprobs are not supported")
	}
	for _, inc := range body.Include {
		if inc == "message.output_text.logprobs" {
			return g, invalid("include", "include %q: logprobs are not supported", inc)
		}
	}
	sb := samplingBody{Model: body.Model, Temperature: body.Temperature, TopP: body.TopP, TopK: body.TopK, Seed: body.Seed,
		Stream: body.Stream, Profile: body.Profile, QueueTimeout: body.QueueTimeout}
	if e := sb.apply(&g, body.MaxOutputTokens); e != nil {
		return g, e
	}
	msgs, e := responsesInput(body.Input)
	if e != nil {
		return g, e
	}
	if body.Instructions != nil && *body.Instructions != "" {
		msgs = append([]engine.Message{{Role: "system", Content: *body.Instructions}}, msgs...)
	}
	g.req.Messages = leadingSystem(msgs)
	if body.Text != nil {
		if g.cons.schema, e = decodeFormat(body.Text.Format, "text.format", true); e != nil {
			return g, e
		}
	}
	tools, e := responsesTools(body.Tools)
	if e != nil {
		return g, e
	}
	choice, e := responsesToolChoice(body.ToolChoice)
	if e != nil {
		return g, e
	}
	if e := decodeTools(tools, choice, &g); e != nil {
		return g, e
	}
	if e := decodeTemplateKwargs(body.ChatTemplateKwargs, &g.req); e != nil {
		return g, e
	}
	// Effort "none" asks for no thinking; other efforts change nothing.
	if r := body.Reasoning; r != nil && r.Effort != nil && *r.Effort == "none" {
		noThinking(&g.req)
	}
	g.shape = newResponsesShape(&body)
	return g, nil
}

// responsesInput turns input (a string, or a list of items) into chat
// messages.
func responsesInput(raw json.RawMessage) ([]engine.Message, *apiError) {
	if isNull(raw) {
		return nil, invalid("input", "input is required: a string or a list of input items")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []engine.Message{{Role: "user", Content: s}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("input", "input must be a string or a list of input items")
	}
	switch {
	case len(items) == 0:
		return nil, invalid("input", "input is empty")
	case len(items) > maxMessages:
		return nil, invalid("input", "%d input items: at most %d", len(items), maxMessages)
	}
	var msgs []engine.Message
	names := map[string]string{} // call_id → the function's name
	for i, rawItem := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it responsesItem
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return nil, invalid(param, "%s must be an input item object", param)
		}
		switch it.Type {
		case "", "message":
			role := it.Role
			switch role {
			case "user", "assistant", "system":
			case "developer":
				role = "system"
			case "":
				return nil, invalid(param+".role", "%s.role is required", param)
			default:
				return nil, invalid(param+".role", "%s.role %q is not supported (user, assistant, system or developer)", param, role)
			}
			text, e := responsesContent(it.Content, param+".content")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, engine.Message{Role: role, Content: text})
		case "function_call":
			switch {
			case it.CallID == "":
				return nil, invalid(param+".call_id", "%s.call_id is required", param)
			case it.Name == "":
				return nil, invalid(param+".name", "%s.name is required", param)
			}
			args := "{}"
			if it.Arguments != nil && *it.Arguments != "" {
				args = *it.Arguments
			}
			var tc engine.ToolCall
			tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments = it.CallID, "function", it.Name, args
			names[it.CallID] = it.Name
			// Calls in a row, and a call after the assistant's text, are
			// one assistant turn.
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, tc)
			} else {
				msgs = append(msgs, engine.Message{Role: "assistant", ToolCalls: []engine.ToolCall{tc}})
			}
		case "function_call_output":
			if it.CallID == "" {
				return nil, invalid(param+".call_id", "%s.call_id is required", param)
			}
			out, e := responsesContent(it.Output, param+".output")
			if e != nil {
				return nil, e
			}
			msgs = append(msgs, engine.Message{Role: "tool", Content: out, ToolCallID: it.CallID, Name: names[it.CallID]})
		case "reasoning":
			// An earlier answer's thought, sent back: dropped, as chat
			// templates drop past thoughts.
		case "item_reference":
			return nil, invalid(param+".type", "%s: item_reference is not supported: this server keeps no items; send the item itself", param)
		default:
			return nil, invalid(param+".type", "%s.type %q is not supported (message, function_call, function_call_output, reasoning)", param, it.Type)
		}
	}
	if len(msgs) == 0 {
		return nil, invalid("input", "input has no message")
	}
	return msgs, nil
}

// responsesContent reads a message's content or a call's output: a
// string, or a list of text parts (input_text, output_text), joined.
func responsesContent(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type    string  `json:"type"`
		Text    *string `json:"text"`
		Refusal *string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "%s must be a string or a list of text parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, i)
		switch {
		case (p.Type == "input_text" || p.Type == "output_text" || p.Type == "text") && p.Text != nil:
			b.WriteString(*p.Text)
		case p.Type == "refusal" && p.Refusal != nil:
			b.WriteString(*p.Refusal)
		case p.Type == "input_text" || p.Type == "output_text" || p.Type == "text" || p.Type == "refusal":
			return "", invalid(pp, "%s: a %s part needs its text", pp, p.Type)
		default:
			return "", invalid(pp+".type", "%s.type %q is not supported: only text parts (input_text, output_text); images, files and audio are not", pp, p.Type)
		}
	}
	return b.String(), nil
}

// leadingSystem merges the system messages a conversation starts with
// (instructions, then a developer message) into one: templates take the
// first message as the system prompt.
func leadingSystem(msgs []engine.Message) []engine.Message {
	n := 0
	for n < len(msgs) && msgs[n].Role == "system" {
		n++
	}
	if n < 2 {
		return msgs
	}
	parts := make([]string, n)
	for i := range n {
		parts[i] = msgs[i].Content
	}
	return append([]engine.Message{{Role: "system", Content: strings.Join(parts, "\n\n")}}, msgs[n:]...)
}

// responsesTools turns the flat function tools into chat's shape. A
// built-in tool (web_search, file_search, ...) would need the server to
// run it: refused.
func responsesTools(raw json.RawMessage) (json.RawMessage, *apiError) {
	return toolsToChat(raw, `{"type": "function", "name": ..., "parameters": {...}}`, func(t json.RawMessage, param string) (chatToolFn, *apiError) {
		var tool responsesTool
		switch err := json.Unmarshal(t, &tool); {
		case err != nil:
			return chatToolFn{}, invalid(param, "%s must be an object", param)
		case tool.Type == "":
			return chatToolFn{}, invalid(param+".type", "%s.type is required", param)
		case tool.Type != "function":
			return chatToolFn{}, invalid(param+".type", "%s.type %q is not supported: built-in tools need the server to run them, and this one runs only the model; offer function tools", param, tool.Type)
		case tool.Name == "":
			return chatToolFn{}, invalid(param+".name", "%s.name is required (the Responses API's function tools are flat: {\"type\": \"function\", \"name\": ...})", param)
		}
		return chatToolFn{Name: tool.Name, Description: tool.Description, Parameters: tool.Parameters}, nil
	})
}

// responsesToolChoice turns tool_choice into chat's: the same strings,
// and a named function in chat's nested shape.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return raw, nil
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return nil, invalid("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "name": ...}`)
	}
	if named.Type != "function" || named.Name == "" {
		return nil, invalid("tool_choice", "tool_choice of type %q is not supported: use \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}", named.Type)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	return b, nil
}

// Wire shapes of the answer.
type (
	// responseObject is a Response: the answer, and in a stream's
	// response.created, response.in_progress and response.completed.
	responseObject struct {
		ID                 string             `json:"id"`
		Object             string             `json:"object"`
		CreatedAt          int64              `json:"created_at"`
		Status             string             `json:"status"`
		Error              *responsesErrJSON  `json:"error"`
		IncompleteDetails  *incompleteJSON    `json:"incomplete_details"`
		Instructions       *string            `json:"instructions"`
		MaxOutputTokens    *int64             `json:"max_output_tokens"`
		Model              string             `json:"model"`
		Output             []any              `json:"output"`
		ParallelToolCalls  bool               `json:"parallel_tool_calls"`
		PreviousResponseID *string            `json:"previous_response_id"`
		Reasoning          reasoningParamJSON `json:"reasoning"`
		Store              bool               `json:"store"`
		Temperature        float64            `json:"temperature"`
		Text               textParamJSON      `json:"text"`
		ToolChoice         json.RawMessage    `json:"tool_choice"`
		Tools              json.RawMessage    `json:"tools"`
		TopP               float64            `json:"top_p"`
		Truncation         string             `json:"truncation"`
		Usage              *responsesUsage    `json:"usage"`
		Metadata           map[string]string  `json:"metadata"`
		Strata             *strataJSON        `json:"strata,omitempty"`
	}
	responsesErrJSON struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	incompleteJSON struct {
		Reason string `json:"reason"`
	}
	reasoningParamJSON struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	}
	textParamJSON struct {
		Format json.RawMessage `json:"format"`
	}
	responsesUsage struct {
		InputTokens        int `json:"input_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens        int `json:"output_tokens"`
		OutputTokensDetails struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
		TotalTokens int `json:"total_tokens"`
	}

	messageItem struct {
		Type    string       `json:"type"` // "message"
		ID      string       `json:"id"`
		Status  string       `json:"status"`
		Role    string       `json:"role"`
		Content []outputText `json:"content"`
	}
	outputText struct {
		Type        string `json:"type"` // "output_text"
		Text        string `json:"text"`
		Annotations []any  `json:"annotations"`
		Logprobs    []any  `json:"logprobs"`
	}
	reasoningItem struct {
		Type    string          `json:"type"` // "reasoning"
		ID      string          `json:"id"`
		Status  string          `json:"status"`
		Summary []any           `json:"summary"`
		Content []reasoningText `json:"content"`
	}
	reasoningText struct {
		Type string `json:"type"` // "reasoning_text"
		Text string `json:"text"`
	}
	functionCallItem struct {
		Type      string `json:"type"` // "function_call"
		ID        string `json:"id"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Status    string `json:"status"`
	}
)

// Item statuses.
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusIncomplete = "incomplete"
)

// responsesShape writes a request's answer as a Response, and its
// stream as the Responses API's typed events.
type responsesShape struct {
	echo responseObject // the request's parameters, as the answer repeats them
	bs   blocks
	out  *sse
	seq  int // the next event's sequence_number
}

func newResponsesShape(body *responsesBody) *responsesShape {
	r := &responsesShape{bs: blocks{ids: [3]string{chatparse.Content: "msg_", chatparse.Reasoning: "rs_", chatparse.ToolCall: "fc_"},
		callPrefix: "call_"}}
	e := &r.echo
	e.Object, e.Instructions, e.MaxOutputTokens, e.Metadata = "response", body.Instructions, body.MaxOutputTokens, body.Metadata
	e.ParallelToolCalls = body.ParallelToolCalls == nil || *body.ParallelToolCalls
	if body.Reasoning != nil {
		e.Reasoning.Effort = body.Reasoning.Effort
	}
	e.Temperature, e.TopP = 1, 1
	if body.Temperature != nil {
		e.Temperature = *body.Temperature
	}
	if body.TopP != nil {
		e.TopP = *body.TopP
	}
	e.Text.Format = json.RawMessage(`{"type":"text"}`)
	if body.Text != nil && !isNull(body.Text.Format) {
		e.Text.Format = body.Text.Format
	}
	e.ToolChoice, e.Tools = json.RawMessage(`"auto"`), json.RawMessage(`[]`)
	if !isNull(body.ToolChoice) {
		e.ToolChoice = body.ToolChoice
	}
	if !isNull(body.Tools) {
		e.Tools = body.Tools
	}
	e.Truncation = "disabled"
	if e.Metadata == nil {
		e.Metadata = map[string]string{}
	}
	return r
}

func (r *responsesShape) idPrefix() string { return "resp_" }
func (r *responsesShape) param() string    { return "input" }

// response is the Response at a point of the answer: in progress (no
// result yet) or finished.
func (r *responsesShape) response(c *call, res *node.Result) responseObject {
	o := r.echo
	o.ID, o.CreatedAt, o.Model, o.Status, o.Output = c.id, c.created, c.model.Name, statusInProgress, []any{}
	if res == nil {
		return o
	}
	o.Status = statusCompleted
	if res.FinishReason == node.FinishLength {
		o.Status, o.IncompleteDetails = statusIncomplete, &incompleteJSON{Reason: "max_output_tokens"}
	}
	for _, b := range r.bs.list {
		o.Output = append(o.Output, responsesItemOf(b, statusCompleted))
	}
	u := &responsesUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens, TotalTokens: res.Usage.TotalTokens}
	o.Usage = u
	o.Strata = &strataJSON{Replays: res.Replays, Paths: res.Paths, TTFTMs: float64(res.TTFT.Microseconds()) / 1000}
	return o
}

// responsesItemOf is a block as an output item.
func responsesItemOf(b *block, status string) any {
	switch b.kind {
	case chatparse.Reasoning:
		it := reasoningItem{Type: "reasoning", ID: b.id, Status: status, Summary: []any{}, Content: []reasoningText{}}
		if status != statusInProgress {
			it.Content = append(it.Content, reasoningText{Type: "reasoning_text", Text: b.text.String()})
		}
		return it
	case chatparse.ToolCall:
		it := functionCallItem{Type: "function_call", ID: b.id, CallID: b.callID, Name: b.call.Name, Status: status}
		if status != statusInProgress {
			it.Arguments = b.call.Arguments
		}
		return it
	}
	it := messageItem{Type: "message", ID: b.id, Status: status, Role: "assistant", Content: []outputText{}}
	if status != statusInProgress {
		it.Content = append(it.Content, newOutputText(b.text.String()))
	}
	return it
}

func newOutputText(s string) outputText {
	return outputText{Type: "output_text", Text: s, Annotations: []any{}, Logprobs: []any{}}
}

func (r *responsesShape) whole(w http.ResponseWriter, c *call, res node.Result, evs []chatparse.Event) {
	r.bs.add(evs)
	r.bs.end()
	writeJSON(w, http.StatusOK, r.response(c, &res))
}

// Stream events.

// emit writes one typed event, numbered.
func (r *responsesShape) emit(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = r.seq
	r.seq++
	r.out.named(typ, fields)
}

func (r *responsesShape) open(out *sse, c *call) {
	r.out = out
	r.bs.sink = r
	resp := r.response(c, nil)
	r.emit("response.created", map[string]any{"response": resp})
	r.emit("response.in_progress", map[string]any{"response": resp})
}

func (r *responsesShape) events(_ *sse, _ *call, evs []chatparse.Event) { r.bs.add(evs) }

func (r *responsesShape) close(_ *sse, c *call, res node.Result) {
	r.bs.end()
	r.emit("response.completed", map[string]any{"response": r.response(c, &res)})
}

// fail ends the stream with an error event: OpenAI's stream error
// (type, code, message, param), with the error object beside it that
// OpenAI's clients raise as an APIError.
func (r *responsesShape) fail(out *sse, _ *call, e *apiError) {
	r.out = out
	f := map[string]any{"code": e.Code, "message": e.Message, "param": nil, "error": e.body().Error}
	if e.Param != "" {
		f["param"] = e.Param
	}
	r.emit("error", f)
}

// The blocks' sink: each block as the Responses API streams an item.

func (r *responsesShape) opened(i int, b *block) {
	r.emit("response.output_item.added", map[string]any{"output_index": i, "item": responsesItemOf(b, statusInProgress)})
	switch b.kind {
	case chatparse.Content:
		r.emit("response.content_part.added", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0,
			"part": newOutputText("")})
	case chatparse.Reasoning:
		r.emit("response.content_part.added", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0,
			"part": reasoningText{Type: "reasoning_text"}})
	}
}

func (r *responsesShape) grew(i int, b *block, text string) {
	if b.kind == chatparse.ToolCall {
		r.emit("response.function_call_arguments.delta", map[string]any{"item_id": b.id, "output_index": i, "delta": text})
		return
	}
	typ := "response.output_text.delta"
	f := map[string]any{"item_id": b.id, "output_index": i, "content_index": 0, "delta": text}
	if b.kind == chatparse.Reasoning {
		typ = "response.reasoning_text.delta"
	} else {
		f["logprobs"] = []any{}
	}
	r.emit(typ, f)
}

func (r *responsesShape) closed(i int, b *block) {
	switch b.kind {
	case chatparse.ToolCall:
		if rest := b.call.Arguments[b.sent:]; rest != "" {
			r.emit("response.function_call_arguments.delta", map[string]any{"item_id": b.id, "output_index": i, "delta": rest})
		}
		r.emit("response.function_call_arguments.done", map[string]any{"item_id": b.id, "output_index": i, "name": b.call.Name,
			"arguments": b.call.Arguments})
	case chatparse.Reasoning:
		text := b.text.String()
		r.emit("response.reasoning_text.done", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0, "text": text})
		r.emit("response.content_part.done", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0,
			"part": reasoningText{Type: "reasoning_text", Text: text}})
	default:
		text := b.text.String()
		r.emit("response.output_text.done", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0, "text": text,
			"logprobs": []any{}})
		r.emit("response.content_part.done", map[string]any{"item_id": b.id, "output_index": i, "content_index": 0,
			"part": newOutputText(text)})
	}
	r.emit("response.output_item.done", map[string]any{"output_index": i, "item": responsesItemOf(b, statusCompleted)})
}
