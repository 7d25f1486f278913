package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stratanet/strata/engine"
)

// The Go client of the API, as `strata chat` and `strata status` use it:
// only what they need (the models, chat and plain completions streamed or
// whole, the swarm view and readiness). Any OpenAI client works against the
// server as well.

// APIError is an error response of the server, or an error event that
// ended a stream.
type APIError struct {
	Status     int // 0 for an error event in a stream
	Message    string
	Type       string
	Param      string
	Code       string
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	var b strings.Builder
	if e.Status != 0 {
		fmt.Fprintf(&b, "%d ", e.Status)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, "%s: ", e.Code)
	}
	b.WriteString(e.Message)
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	return b.String()
}

// Client talks to one node's API.
type Client struct {
	base string // scheme://host[:port], without /v1
	key  string
	hc   *http.Client
}

// ClientOption configures NewClient.
type ClientOption func(*Client) error

// WithClientKey sends "Authorization: Bearer key".
func WithClientKey(key string) ClientOption {
	return func(c *Client) error { c.key = key; return nil }
}

// WithHTTPClient uses hc (default: a client without an overall timeout,
// as a stream lasts as long as its reply).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("api client: nil http client")
		}
		c.hc = hc
		return nil
	}
}

// NewClient returns a client of the API at base: "http://host:port",
// with or without a trailing "/v1"; "host:port" means http.
func NewClient(base string, opts ...ClientOption) (*Client, error) {
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("api client: bad URL %q: want http(s)://host:port", base)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1")
	c := &Client{base: strings.TrimSuffix(u.String(), "/"), hc: &http.Client{}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// responseError reads an error response.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &APIError{Status: resp.StatusCode}
	var eb struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
		// A health check's answer: its status and why it is not ready.
		Status   string `json:"status"`
		NotReady string `json:"not_ready"`
	}
	switch {
	case json.Unmarshal(b, &eb) == nil && eb.Error.Message != "":
		e.Message, e.Type = eb.Error.Message, eb.Error.Type
		if eb.Error.Param != nil {
			e.Param = *eb.Error.Param
		}
		if eb.Error.Code != nil {
			e.Code = *eb.Error.Code
		}
	case eb.Status != "":
		e.Code, e.Message = eb.Status, eb.NotReady
		if e.Message == "" {
			e.Message = "the node is " + eb.Status // draining, closing
		}
	default:
		e.Message = strings.TrimSpace(string(b))
		if e.Message == "" {
			e.Message = http.StatusText(resp.StatusCode)
		}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// ModelEntry is a served model as /v1/models lists it: what a client
// needs to choose how to ask it.
type ModelEntry struct {
	ID        string `json:"id"`
	Simulated bool   `json:"simulated"`
	// ChatTemplate: the model's file has its own chat template; nil when
	// the server does not say (a node from before the field).
	ChatTemplate *bool `json:"chat_template"`
}

// PlainCompletion reports whether the model is to be asked with plain
// completion rather than chat: a real model whose file has no chat
// template is not tuned for chat (stories260K, a base model), and the
// built-in format the server would render a chat in is text it never
// saw. A simulated model's text means nothing either way and it stands
// for a chat model, so it stays with chat, as does a model of a server
// that does not say.
func (m ModelEntry) PlainCompletion() bool {
	return m.ChatTemplate != nil && !*m.ChatTemplate && !m.Simulated
}

// ModelEntries lists the served models.
func (c *Client) ModelEntries(ctx context.Context) ([]ModelEntry, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/models", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		Data []ModelEntry `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("api client: models: %w", err)
	}
	return l.Data, nil
}

// Models lists the served models' IDs.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	l, err := c.ModelEntries(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(l))
	for i, m := range l {
		ids[i] = m.ID
	}
	return ids, nil
}

// ChatRequest is a chat completion to stream. Nil fields take the
// server's defaults.
type ChatRequest struct {
	Model       string
	Messages    []engine.Message
	MaxTokens   int // 0: the server's default
	Temperature *float64
	TopP        *float64
	Seed        *int64
	Stop        []string
	Profile     string // the scheduling profile ("": the node's default)
}

// body is the request's JSON body; unset fields are left out.
func (r ChatRequest) body() map[string]any {
	body := map[string]any{"model": r.Model, "messages": r.Messages}
	if r.MaxTokens > 0 {
		body["max_tokens"] = r.MaxTokens
	}
	if r.Temperature != nil {
		body["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		body["top_p"] = *r.TopP
	}
	if r.Seed != nil {
		body["seed"] = *r.Seed
	}
	if len(r.Stop) > 0 {
		body["stop"] = r.Stop
	}
	if r.Profile != "" {
		body["profile"] = r.Profile
	}
	return body
}

// CompletionRequest is a plain completion (/v1/completions): the model
// continues Prompt. Nil fields take the server's defaults.
type CompletionRequest struct {
	Model       string
	Prompt      string
	MaxTokens   int // 0: the server's default
	Temperature *float64
	TopP        *float64
	Seed        *int64
	Stop        []string
	Profile     string // the scheduling profile ("": the node's default)
}

// body is the request's JSON body: a chat's sampling fields, with a
// prompt in place of the messages.
func (r CompletionRequest) body() map[string]any {
	body := ChatRequest{Model: r.Model, MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, Seed: r.Seed,
		Stop: r.Stop, Profile: r.Profile}.body()
	delete(body, "messages")
	body["prompt"] = r.Prompt
	return body
}

// FirstModel is the first model the server lists, for a client that
// names none.
func (c *Client) FirstModel(ctx context.Context) (string, error) {
	ids, err := c.Models(ctx)
	if err != nil {
		return "", fmt.Errorf("listing models: %w", err)
	}
	if len(ids) == 0 {
		return "", errors.New("the server lists no model")
	}
	return ids[0], nil
}

// ChatResult is a streamed reply, whole.
type ChatResult struct {
	Text             string
	FinishReason     string
	PromptTokens     int
	CompletionTokens int
}

// ChatStream runs a streaming chat completion, calling onText with each
// piece of the reply as it arrives. A stream that ends with an error
// event returns it as an *APIError; one that ends without "[DONE]" is an
// error too.
func (c *Client) ChatStream(ctx context.Context, r ChatRequest, onText func(string) error) (ChatResult, error) {
	return c.stream(ctx, "/v1/chat/completions", r.body(), onText)
}

// CompleteStream runs a streaming plain completion, calling onText with
// each piece of the continuation as it arrives, as ChatStream does.
func (c *Client) CompleteStream(ctx context.Context, r CompletionRequest, onText func(string) error) (ChatResult, error) {
	return c.stream(ctx, "/v1/completions", r.body(), onText)
}

// stream runs a streaming generation at path: a chat's chunks carry
// their text in delta.content, a completion's in text.
func (c *Client) stream(ctx context.Context, path string, body map[string]any, onText func(string) error) (ChatResult, error) {
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	var res ChatResult
	resp, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue // comments (keep-alives), event names, blank separators
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			res.Text = text.String()
			return res, nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
				Text         *string `json:"text"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usageJSON `json:"usage"`
			Error *struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return res, fmt.Errorf("api client: bad stream event %.80q: %w", data, err)
		}
		if chunk.Error != nil {
			e := &APIError{Message: chunk.Error.Message, Type: chunk.Error.Type}
			if chunk.Error.Code != nil {
				e.Code = *chunk.Error.Code
			}
			res.Text = text.String()
			return res, e
		}
		if chunk.Usage != nil {
			res.PromptTokens, res.CompletionTokens = chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens
		}
		for _, ch := range chunk.Choices {
			if ch.FinishReason != nil {
				res.FinishReason = *ch.FinishReason
			}
			piece := ch.Delta.Content
			if piece == nil {
				piece = ch.Text
			}
			if piece != nil && *piece != "" {
				text.WriteString(*piece)
				if onText != nil {
					if err := onText(*piece); err != nil {
						return res, err
					}
				}
			}
		}
	}
	res.Text = text.String()
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("api client: stream: %w", err)
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, errors.New("api client: the stream ended without [DONE]")
}

// ChatReply is a whole (not streamed) chat or plain completion, with how
// it went through the swarm.
type ChatReply struct {
	ChatResult
	Paths   []string      // the pipeline paths used, in order (more than one after a replay)
	Replays int           // how often the generation moved to another path
	TTFT    time.Duration // the entry node's time to first token
}

// Chat runs one chat completion and returns it whole.
func (c *Client) Chat(ctx context.Context, r ChatRequest) (ChatReply, error) {
	return c.whole(ctx, "/v1/chat/completions", r.body())
}

// Complete runs one plain completion and returns the continuation whole.
func (c *Client) Complete(ctx context.Context, r CompletionRequest) (ChatReply, error) {
	return c.whole(ctx, "/v1/completions", r.body())
}

// whole runs a generation at path without streaming: a chat's choice
// carries its text in message.content, a completion's in text.
func (c *Client) whole(ctx context.Context, path string, body map[string]any) (ChatReply, error) {
	var out ChatReply
	resp, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	var cr struct {
		Choices []struct {
			Message      *chatMsgJSON `json:"message"`
			Text         *string      `json:"text"`
			FinishReason *string      `json:"finish_reason"`
		} `json:"choices"`
		Usage  *usageJSON  `json:"usage"`
		Strata *strataJSON `json:"strata"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil {
		return out, fmt.Errorf("api client: %s: %w", path, err)
	}
	if len(cr.Choices) == 0 {
		return out, fmt.Errorf("api client: %s: a reply without choices", path)
	}
	switch ch := cr.Choices[0]; {
	case ch.Message != nil && ch.Message.Content != nil:
		out.Text = *ch.Message.Content
	case ch.Text != nil:
		out.Text = *ch.Text
	}
	if f := cr.Choices[0].FinishReason; f != nil {
		out.FinishReason = *f
	}
	if u := cr.Usage; u != nil {
		out.PromptTokens, out.CompletionTokens = u.PromptTokens, u.CompletionTokens
	}
	if s := cr.Strata; s != nil {
		out.Paths, out.Replays = s.Paths, s.Replays
		out.TTFT = time.Duration(s.TTFTMs * float64(time.Millisecond))
	}
	return out, nil
}

// Swarm decodes the node's view of the swarm (GET /v1/swarm) into v.
func (c *Client) Swarm(ctx context.Context, v any) error {
	resp, err := c.do(ctx, http.MethodGet, "/v1/swarm", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("api client: swarm: %w", err)
	}
	return nil
}

// Verify decodes the node's spot-check counters and check log (GET
// /v1/swarm/verify) into v.
func (c *Client) Verify(ctx context.Context, v any) error {
	resp, err := c.do(ctx, http.MethodGet, "/v1/swarm/verify", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("api client: verify: %w", err)
	}
	return nil
}

// SetSwarmVerifyRate sets the swarm's replicated verify rate (POST
// /v1/swarm/config). Only the leader's API can: another node's answers
// an APIError of status 409 (code not_leader) that names the leader.
func (c *Client) SetSwarmVerifyRate(ctx context.Context, r float64) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/swarm/config", map[string]float64{"verify_rate": r})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// SetSwarmSessionTokens sets the mean session length the swarm's planner
// caps each node's KV memory by, 0 for no cap (POST /v1/swarm/config).
// Only the leader's API can, as with SetSwarmVerifyRate.
func (c *Client) SetSwarmSessionTokens(ctx context.Context, n int) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/swarm/config", map[string]int{"plan_session_tokens": n})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// SetSwarmStewards makes ids the swarm's stewards (POST
// /v1/swarm/config), signed by the leader's host key: only the leader's
// API can, and only when the leader is the swarm's founder (the first
// set) or a steward.
func (c *Client) SetSwarmStewards(ctx context.Context, ids []string) error {
	resp, err := c.do(ctx, http.MethodPost, "/v1/swarm/config", map[string][]string{"stewards": ids})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Ready reports whether the node serves and can route a full path on its
// own view now (GET /healthz?ready=1). A node that answers "not yet" is
// not an error; one that cannot be reached is.
func (c *Client) Ready(ctx context.Context) (bool, error) {
	why, err := c.NotReady(ctx)
	return err == nil && why == "", err
}

// NotReady is why the node cannot serve now, as GET /healthz?ready=1
// says (no map committed yet and the layers no node can hold, a layer
// without a live holder, draining, ...), or "" when it can. A node that
// cannot be reached is an error.
func (c *Client) NotReady(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/healthz?ready=1", nil)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable {
			return ae.Message, nil
		}
		return "", err
	}
	resp.Body.Close()
	return "", nil
}
