package api

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
	"github.com/stratanet/strata/node"
)

// Request decoding: OpenAI's bodies, with the union types it allows
// (prompt as a string, a list of one string or token IDs; stop as a
// string or a list; content as a string or text parts), into one
// node.Request. Unknown fields are ignored, as OpenAI's clients send
// fields that servers may not know; known fields that would change the
// answer in a way this server cannot honour (n past maxChoices, echo,
// a schema the grammar cannot enforce, tools for a model whose
// template has no tool-call syntax) are refused rather than silently
// ignored.

// Limits on what a request may carry, beyond the body cap: bounds that
// keep a hostile request from costing more than its bytes.
const (
	maxStops       = 16
	maxStopLen     = 256
	maxMessages    = 4096
	maxTemperature = 2
	// maxChoices bounds n: each choice is a generation of its own.
	maxChoices = 8
	// maxChatTopLogprobs and maxCompletionLogprobs are OpenAI's bounds
	// on chat's top_logprobs and the legacy completions' logprobs.
	maxChatTopLogprobs    = 20
	maxCompletionLogprobs = 5
)

// genRequest is a decoded generation request.
type genRequest struct {
	req          node.Request
	chat         bool
	stream       bool
	includeUsage bool
	// tokenIDs: the answer carries each choice's sampled token IDs
	// (return_token_ids, vLLM's extension).
	tokenIDs bool
	// tools: the chat offers tools the model may call (tool_choice auto),
	// so tool calls are parsed out of its output.
	tools bool
	// n is the number of choices (1..maxChoices), each a generation of
	// its own with seed engine.ChoiceSeed(seed, index).
	n int
	// logprobs: the answer carries each token's log-probability and
	// req.TopLogProbs alternatives (chat's logprobs and top_logprobs,
	// the legacy completions' logprobs N).
	logprobs bool
	// shape writes the answer of an API other than OpenAI's chat and
	// completions (/v1/responses, /v1/messages); nil for those two.
	shape shape
	// cons is what the output must be (response_format, a forced tool
	// call): chatParser turns it into req.Grammar for the model's syntax.
	cons constraint
}

// samplingBody holds the fields both endpoints share.
type samplingBody struct {
	Model         string          `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`              // an extension (vLLM's)
	RepeatPenalty *float64        `json:"repetition_penalty"` // an extension (vLLM's)
	Seed          *int64          `json:"seed"`
	Stop          json.RawMessage `json:"stop"`
	N             *int64          `json:"n"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Logprobs json.RawMessage `json:"logprobs"`
	// Profile names the scheduling profile (an extension; the header
	// X-Strata-Profile says the same, and the body wins).
	Profile *string `json:"profile"`
	// QueueTimeout is how many seconds the request may wait in the
	// entry's queue for capacity (an extension; 0: do not wait; absent:
	// the node's --queue-timeout; the header X-Strata-Queue-Timeout says
	// the same, and the body wins).
	QueueTimeout *float64 `json:"queue_timeout"`
	// ReturnTokenIDs adds the sampled token IDs to each choice and
	// chunk (token_ids), as vLLM's extension does: a client can compare
	// an answer with a reference token by token.
	ReturnTokenIDs *bool `json:"return_token_ids"`
}

type completionBody struct {
	samplingBody
	Prompt json.RawMessage `json:"prompt"`
	// ResponseFormat is vLLM's extension of the legacy endpoint, in
	// chat's shape.
	ResponseFormat json.RawMessage `json:"response_format"`
	Echo           *bool           `json:"echo"`
	BestOf         *int64          `json:"best_of"`
	Suffix         *string         `json:"suffix"`
}

type chatBody struct {
	samplingBody
	Messages            []chatMessage   `json:"messages"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	TopLogprobs         *int64          `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Functions           json.RawMessage `json:"functions"`
	ResponseFormat      json.RawMessage `json:"response_format"`

	// ChatTemplateKwargs are more variables for the chat template, as
	// vLLM's and llama.cpp's servers take them (Qwen3's enable_thinking).
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

type chatMessage struct {
	Role       string            `json:"role"`
	Content    json.RawMessage   `json:"content"`
	ToolCalls  []engine.ToolCall `json:"tool_calls"`
	ToolCallID string            `json:"tool_call_id"`
	Name       string            `json:"name"`
}

func tooLarge(limit int64) *apiError {
	msg := fmt.Sprintf("request body over the %d-byte limit", limit)
	return &apiError{Status: http.StatusRequestEntityTooLarge, Message: msg, Type: typeInvalid, Code: "request_too_large",
		err: fmt.Errorf("%w: %s", ErrTooLarge, msg)}
}

func decodeBytes(b []byte, v any) *apiError {
	if len(bytes.TrimSpace(b)) == 0 {
		return invalid("", "the body is empty: send a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return invalid("", "malformed JSON at byte %d: %v", se.Offset, se)
		case errors.As(err, &te):
			if te.Field == "" {
				return invalid("", "the body must be a JSON object, not %s", te.Value)
			}
			// The path names an embedded struct by its Go name; a client
			// knows only the JSON one.
			field := strings.TrimPrefix(te.Field, "samplingBody.")
			return invalid(field, "%s: expected %s, got %s", field, jsonKind(te.Type.Kind().String()), te.Value)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return invalid("", "malformed JSON: the body ends early")
		}
		return invalid("", "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("", "malformed JSON: data after the object")
	}
	return nil
}

// jsonKind names a Go kind as a JSON user knows it.
func jsonKind(k string) string {
	switch {
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"):
		return "an integer"
	case strings.HasPrefix(k, "float"):
		return "a number"
	case k == "bool":
		return "a boolean"
	case k == "string":
		return "a string"
	case k == "slice":
		return "an array"
	case k == "struct", k == "map":
		return "an object"
	}
	return k
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// decodeCompletion decodes a POST /v1/completions body.
func decodeCompletion(b []byte) (genRequest, *apiError) {
	var body completionBody
	if e := decodeBytes(b, &body); e != nil {
		return genRequest{}, e
	}
	g := genRequest{}
	if e := body.samplingBody.apply(&g, body.MaxTokens); e != nil {
		return g, e
	}
	switch {
	case body.Echo != nil && *body.Echo:
		return g, invalid("echo", "echo is not supported")
	case body.BestOf != nil && *body.BestOf != 1:
		return g, invalid("best_of", "best_of must be 1 (got %d)", *body.BestOf)
	case body.Suffix != nil && *body.Suffix != "":
		return g, invalid("suffix", "suffix is not supported")
	}
	if !isNull(body.Logprobs) && !bytes.Equal(bytes.TrimSpace(body.Logprobs), []byte("false")) {
		var k int64
		if err := json.Unmarshal(body.Logprobs, &k); err != nil || k < 0 || k > maxCompletionLogprobs {
			return g, invalid("logprobs", "logprobs must be an integer from 0 to %d (got %s)", maxCompletionLogprobs, bytes.TrimSpace(body.Logprobs))
		}
		g.logprobs, g.req.LogProbs, g.req.TopLogProbs = true, true, int(k)
	}
	if e := decodePrompt(body.Prompt, &g.req); e != nil {
		return g, e
	}
	schema, e := decodeFormat(body.ResponseFormat, "response_format", false)
	if e != nil {
		return g, e
	}
	if schema != nil {
		g.req.Grammar = &grammar.Spec{Schema: schema}
	}
	return g, nil
}

// decodePrompt accepts what OpenAI's prompt may be, for one completion:
// a string, a list of one string, a list of token IDs, or a list of one
// list of token IDs.
func decodePrompt(raw json.RawMessage, req *node.Request) *apiError {
	if isNull(raw) {
		return invalid("prompt", "prompt is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return invalid("prompt", "prompt is empty")
		}
		req.Prompt = s
		return nil
	}
	var ss []string
	if err := json.Unmarshal(raw, &ss); err == nil {
		if len(ss) != 1 {
			return invalid("prompt", "a list of %d prompts: give one (one prompt per request)", len(ss))
		}
		if ss[0] == "" {
			return invalid("prompt", "prompt is empty")
		}
		req.Prompt = ss[0]
		return nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err != nil {
		var idss [][]int64
		if err := json.Unmarshal(raw, &idss); err != nil {
			return invalid("prompt", "prompt must be a string, a list of one string, or token IDs")
		}
		if len(idss) != 1 {
			return invalid("prompt", "a list of %d token prompts: give one", len(idss))
		}
		ids = idss[0]
	}
	if len(ids) == 0 {
		return invalid("prompt", "prompt has no tokens")
	}
	req.Tokens = make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return invalid("prompt", "token %d at index %d is not a token ID", id, i)
		}
		req.Tokens[i] = int32(id)
	}
	return nil
}

// decodeChat decodes a POST /v1/chat/completions body.
func decodeChat(b []byte) (genRequest, *apiError) {
	var body chatBody
	if e := decodeBytes(b, &body); e != nil {
		return genRequest{}, e
	}
	g := genRequest{chat: true}
	maxTok := body.MaxTokens
	if body.MaxCompletionTokens != nil {
		maxTok = body.MaxCompletionTokens // the newer name wins
	}
	if e := body.samplingBody.apply(&g, maxTok); e != nil {
		return g, e
	}
	if body.MaxCompletionTokens != nil && *body.MaxCompletionTokens < 1 {
		return g, invalid("max_completion_tokens", "max_completion_tokens must be at least 1 (got %d)", *body.MaxCompletionTokens)
	}
	if !isNull(body.Logprobs) {
		var on bool
		if err := json.Unmarshal(body.Logprobs, &on); err != nil {
			return g, invalid("logprobs", "logprobs must be a boolean (got %s)", bytes.TrimSpace(body.Logprobs))
		}
		g.logprobs, g.req.LogProbs = on, on
	}
	if k := body.TopLogprobs; k != nil {
		switch {
		case *k < 0 || *k > maxChatTopLogprobs:
			return g, invalid("top_logprobs", "top_logprobs must be an integer from 0 to %d (got %d)", maxChatTopLogprobs, *k)
		case !g.logprobs:
			return g, invalid("top_logprobs", "top_logprobs needs logprobs: true")
		}
		g.req.TopLogProbs = int(*k)
	}
	switch {
	case !isNull(body.Tools) && !bytes.HasPrefix(bytes.TrimSpace(body.Tools), []byte("[")):
		return g, invalid("tools", "tools must be an array")
	case !isNull(body.Functions) && !bytes.Equal(bytes.TrimSpace(body.Functions), []byte("[]")):
		return g, invalid("functions", "functions are not supported")
	case len(body.Messages) == 0:
		return g, invalid("messages", "messages is required and must not be empty")
	case len(body.Messages) > maxMessages:
		return g, invalid("messages", "%d messages: at most %d", len(body.Messages), maxMessages)
	}
	msgs := make([]engine.Message, len(body.Messages))
	for i, m := range body.Messages {
		param := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "user", "assistant", "tool":
		case "developer": // OpenAI's newer name for system
			m.Role = "system"
		case "":
			return g, invalid(param+".role", "%s.role is required", param)
		default:
			return g, invalid(param+".role", "%s.role %q is not supported (system, developer, user, assistant or tool)", param, m.Role)
		}
		text, e := decodeContent(m.Content, param+".content")
		if e != nil {
			return g, e
		}
		msgs[i] = engine.Message{Role: m.Role, Content: text, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID, Name: m.Name}
	}
	g.req.Messages = msgs
	schema, e := decodeFormat(body.ResponseFormat, "response_format", false)
	if e != nil {
		return g, e
	}
	g.cons.schema = schema
	// The model's chat template renders the tools; the server parses the
	// calls out of the output in the template's syntax (see chatParser).
	if e := decodeTools(body.Tools, body.ToolChoice, &g); e != nil {
		return g, e
	}
	if e := decodeTemplateKwargs(body.ChatTemplateKwargs, &g.req); e != nil {
		return g, e
	}
	return g, nil
}

// decodeContent accepts a message's content: a string, null (an empty
// turn) or a list of text parts, joined.
func decodeContent(raw json.RawMessage, param string) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param, "%s must be a string or a list of text parts", param)
	}
	var b strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", invalid(fmt.Sprintf("%s[%d]", param, i), "%s[%d]: only text parts are supported (got type %q)", param, i, p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

// apply checks the shared fields and sets them on g. maxTok is the
// output cap the endpoint uses.
func (s *samplingBody) apply(g *genRequest, maxTok *int64) *apiError {
	req := &g.req
	req.Model = s.Model
	g.n = 1
	if s.N != nil {
		if *s.N < 1 || *s.N > maxChoices {
			return invalid("n", "n must be from 1 to %d (got %d)", maxChoices, *s.N)
		}
		g.n = int(*s.N)
	}
	if s.Profile != nil {
		if e := checkProfile(*s.Profile); e != nil {
			return e
		}
		req.Profile = *s.Profile
	}
	if s.QueueTimeout != nil {
		d, e := queueTimeout(*s.QueueTimeout)
		if e != nil {
			return e
		}
		req.QueueTimeout = d
	}
	if maxTok != nil {
		if *maxTok < 1 {
			return invalid("max_tokens", "max_tokens must be at least 1 (got %d)", *maxTok)
		}
		// Past int32 it is beyond any context; the node says 413.
		req.MaxTokens = int(min(*maxTok, math.MaxInt32))
	}
	sp := engine.SamplingParams{Temperature: 1} // OpenAI's default
	if t := s.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > maxTemperature {
			return invalid("temperature", "temperature must be in [0, %d] (got %v)", maxTemperature, *t)
		}
		sp.Temperature = float32(*t)
	}
	if p := s.TopP; p != nil {
		if math.IsNaN(*p) || *p < 0 || *p > 1 {
			return invalid("top_p", "top_p must be in [0, 1] (got %v)", *p)
		}
		if *p == 0 {
			sp.Temperature = 0 // a nucleus of one token: greedy
		} else {
			sp.TopP = float32(*p)
		}
	}
	if k := s.TopK; k != nil {
		if *k < -1 || *k > math.MaxInt32 {
			return invalid("top_k", "top_k must be -1, 0 (all tokens) or positive (got %d)", *k)
		}
		sp.TopK = int(max(*k, 0))
	}
	if r := s.RepeatPenalty; r != nil {
		if math.IsNaN(*r) || *r <= 0 || *r > 10 {
			return invalid("repetition_penalty", "repetition_penalty must be in (0, 10] (got %v)", *r)
		}
		sp.RepeatPenalty = float32(*r)
	}
	if s.Seed != nil {
		sp.Seed = uint64(*s.Seed) // OpenAI's seeds are signed; any value is a seed
	} else {
		// No seed: a fresh one, as OpenAI's answers differ run to run.
		var b [8]byte
		_, _ = rand.Read(b[:])
		sp.Seed = binary.LittleEndian.Uint64(b[:])
	}
	req.Sampling = sp
	stop, e := decodeStop(s.Stop)
	if e != nil {
		return e
	}
	req.Stop = stop
	if s.Stream != nil {
		g.stream = *s.Stream
	}
	if s.StreamOptions != nil {
		if !g.stream {
			return invalid("stream_options", "stream_options is only allowed with stream: true")
		}
		g.includeUsage = s.StreamOptions.IncludeUsage != nil && *s.StreamOptions.IncludeUsage
	}
	g.tokenIDs = s.ReturnTokenIDs != nil && *s.ReturnTokenIDs
	return nil
}

// decodeStop accepts a string or a list of strings.
func decodeStop(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var stops []string
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		stops = []string{s}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, invalid("stop", "stop must be a string or a list of strings")
	}
	if len(stops) > maxStops {
		return nil, invalid("stop", "%d stop strings: at most %d", len(stops), maxStops)
	}
	out := stops[:0]
	for _, s := range stops {
		if len(s) > maxStopLen {
			return nil, invalid("stop", "a stop string of %d bytes: at most %d", len(s), maxStopLen)
		}
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// ProfileHeader names a request's scheduling profile when its body does
// not.
const ProfileHeader = "X-Strata-Profile"

// QueueTimeoutHeader is a request's queue timeout in seconds when its
// body does not say (queue_timeout).
const QueueTimeoutHeader = "X-Strata-Queue-Timeout"

// QueueWaitHeader on a response is how long its request waited for
// admission (the entry's queue), in seconds.
const QueueWaitHeader = "X-Strata-Queue-Wait"

// maxQueueTimeout bounds what a request may ask to wait.
const maxQueueTimeout = 3600.0

// queueTimeout turns a queue_timeout in seconds into the node's
// Request.QueueTimeout: 0 is "do not wait", which the node spells
// negative.
func queueTimeout(secs float64) (time.Duration, *apiError) {
	if math.IsNaN(secs) || secs < 0 || secs > maxQueueTimeout {
		return 0, invalid("queue_timeout", "queue_timeout must be between 0 and %g seconds (got %g)", maxQueueTimeout, secs)
	}
	if secs == 0 {
		return -1, nil
	}
	return max(time.Duration(secs*float64(time.Second)), time.Millisecond), nil
}

// maxProfileLen bounds a profile name before the node looks it up, so
// that an error message never echoes a huge one.
const maxProfileLen = 256

// checkProfile refuses a profile name no configuration can hold; whether
// the node has it is the node's answer (unknown_profile).
func checkProfile(name string) *apiError {
	if len(name) > maxProfileLen {
		return invalid("profile", "profile is %d bytes: at most %d", len(name), maxProfileLen)
	}
	return nil
}
