package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// The OpenAI-compatible endpoints: models, completions and chat
// completions, streamed as server-sent events or answered whole.

// Wire shapes.
type (
	modelJSON struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
		// Strata's own fields; OpenAI clients ignore them.
		Layers      int    `json:"layers"`
		Context     int    `json:"context_length"`
		Simulated   bool   `json:"simulated"`
		Fingerprint string `json:"fingerprint"`
		// ChatTemplate: the model's file has its own chat template. A
		// chat request to a model without one is still served, in the
		// engine's built-in format; clients (strata chat, the
		// dashboard) use /v1/completions instead.
		ChatTemplate bool `json:"chat_template"`
	}
	modelList struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}
	usageJSON struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	// strataJSON tells how a generation went through the swarm.
	strataJSON struct {
		Replays int      `json:"replays"`
		Paths   []string `json:"paths,omitempty"`
		TTFTMs  float64  `json:"ttft_ms"`
	}
	chatMsgJSON struct {
		Role string `json:"role"`
		// Content is null in an answer that only calls tools.
		Content          *string        `json:"content"`
		ReasoningContent *string        `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
	}
	deltaJSON struct {
		Role             string         `json:"role,omitempty"`
		Content          *string        `json:"content,omitempty"`
		ReasoningContent *string        `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
	}
	choiceJSON struct {
		Index        int          `json:"index"`
		Text         *string      `json:"text,omitempty"`    // completions
		Message      *chatMsgJSON `json:"message,omitempty"` // chat
		Delta        *deltaJSON   `json:"delta,omitempty"`   // chat chunks
		Logprobs     any          `json:"logprobs"`
		FinishReason *string      `json:"finish_reason"`
		// TokenIDs are the tokens sampled for this choice or chunk, end
		// token included (return_token_ids).
		TokenIDs []int32 `json:"token_ids,omitempty"`
	}
	responseJSON struct {
		ID                string       `json:"id"`
		Object            string       `json:"object"`
		Created           int64        `json:"created"`
		Model             string       `json:"model"`
		SystemFingerprint string       `json:"system_fingerprint,omitempty"`
		Choices           []choiceJSON `json:"choices"`
		// Usage: a whole response always has it; a chunk has it (null
		// until the last) only with stream_options.include_usage.
		Usage  any         `json:"usage,omitempty"`
		Strata *strataJSON `json:"strata,omitempty"`
	}
)

func (v views) modelJSON() modelJSON {
	in := v.b.Model()
	return modelJSON{ID: in.Name, Object: "model", Created: v.started.Unix(), OwnedBy: "strata",
		Layers: in.Layers, Context: in.Context, Simulated: in.Simulated, Fingerprint: in.Fingerprint, ChatTemplate: in.ChatTemplate}
}

func (v views) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelJSON{v.modelJSON()}})
}

func (v views) handleModel(w http.ResponseWriter, r *http.Request) {
	m := v.modelJSON()
	if id := r.PathValue("id"); id != m.ID {
		writeError(w, fromError(fmt.Errorf("%w: %q (this swarm serves %q)", node.ErrUnknownModel, id, m.ID), ""))
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, fromError(err, ""))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// readBody reads a body under the cap maxBody: a declared length over
// the cap is refused before a byte is read.
func readBody(w http.ResponseWriter, r *http.Request, maxBody int64) ([]byte, *apiError) {
	if r.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	body := http.MaxBytesReader(w, r.Body, maxBody)
	b, err := io.ReadAll(body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, tooLarge(mb.Limit)
		}
		return nil, invalid("", "reading the body: %v", err)
	}
	return b, nil
}

// generate serves a generation endpoint.
func (s *Server) generate(endpoint string, decode func([]byte) (genRequest, *apiError)) http.HandlerFunc {
	writeErr := errorWriter(endpoint)
	return func(w http.ResponseWriter, r *http.Request) {
		b, e := readBody(w, r, s.o.maxBody)
		if e == nil {
			var g genRequest
			if g, e = decode(b); e == nil {
				e = s.run(w, r, endpoint, g)
			}
		}
		if e != nil {
			if e.Status >= 500 {
				s.log.Warn("api request failed", zap.String("endpoint", endpoint), zap.Int("status", e.Status), zap.Error(e.err))
			}
			writeErr(w, e)
		}
	}
}

// run drives one decoded generation; it returns the error response to
// send when nothing was sent yet.
func (s *Server) run(w http.ResponseWriter, r *http.Request, endpoint string, g genRequest) *apiError {
	param := "prompt"
	switch {
	case g.shape != nil:
		param = g.shape.param()
	case g.chat:
		param = "messages"
	}
	if g.req.Profile == "" {
		g.req.Profile = r.Header.Get(ProfileHeader)
		if e := checkProfile(g.req.Profile); e != nil {
			return e
		}
	}
	if h := r.Header.Get(QueueTimeoutHeader); h != "" && g.req.QueueTimeout == 0 {
		secs, err := strconv.ParseFloat(h, 64)
		if err != nil {
			return invalid("queue_timeout", "%s: %q is not a number of seconds", QueueTimeoutHeader, h)
		}
		d, e := queueTimeout(secs)
		if e != nil {
			return e
		}
		g.req.QueueTimeout = d
	}
	// One parser per choice: they read separate outputs. A decoder that
	// does not set n (an endpoint without choices) means one.
	g.n = max(g.n, 1)
	parsers := make([]*chatparse.Parser, g.n)
	if g.chat {
		for i := range parsers {
			var e *apiError
			if parsers[i], e = chatParser(s.b.Model(), &g); e != nil {
				return e
			}
		}
	}
	if err := s.begin(); err != nil {
		return fromError(err, param)
	}
	defer s.end()
	// The generation ends with the request (the client went away) or with
	// the server (Close, or a Shutdown past its deadline).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	start := time.Now()
	c := &call{s: s, endpoint: endpoint, g: g, id: newID("cmpl-"), created: time.Now().Unix(), model: s.b.Model(), start: start,
		parsers: parsers}
	switch {
	case g.shape != nil:
		c.id = newID(g.shape.idPrefix())
	case g.chat:
		c.id = newID("chatcmpl-")
	}
	req, follow := c.choiceReq(0)
	st, err := s.b.Generate(ctx, req, follow)
	if err != nil {
		// A refusal says how long it waited in the queue too (0 for one
		// refused at once, such as layers no node can hold).
		w.Header().Set(QueueWaitHeader, strconv.FormatFloat(time.Since(start).Seconds(), 'f', 3, 64))
		e := fromError(s.why(err), param)
		c.code = e.Code
		c.record(node.Result{})
		return e
	}
	// Generate returns once the request is admitted: its time is the
	// wait in the entry's queue (and the tokenizing, which is small).
	w.Header().Set(QueueWaitHeader, strconv.FormatFloat(time.Since(start).Seconds(), 'f', 3, 64))
	c.add(0, st)
	c.prompt = st.PromptTokens()
	// Deferred first so that it runs after the Closes: Result then
	// returns at once, even for a generation whose client went away.
	defer func() { c.record(c.results()) }()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cs := range c.choices {
			cs.st.Close()
		}
	}()
	if !g.stream {
		e := c.whole(ctx, w, param)
		if e != nil {
			c.code = e.Code
		}
		return e
	}
	c.stream(ctx, w, param)
	return nil
}

// record adds the request to the dashboard's ring.
func (c *call) record(res node.Result) {
	now := time.Now()
	q := requestJSON{ID: c.id, Time: c.start, Endpoint: c.endpoint, Stream: c.g.stream, Status: "ok",
		Paths: [][]hopJSON{}, Replays: res.Replays, TTFTMs: ms(res.TTFT), DurationMs: ms(now.Sub(c.start)),
		Prompt: res.Usage.PromptTokens, Tokens: res.Usage.CompletionTokens}
	if c.code != "" {
		q.Status = c.code
	}
	for _, p := range res.Paths {
		q.Paths = append(q.Paths, parsePath(p))
	}
	q.Profile, q.Scores = res.Profile, []scoreJSON{}
	for _, s := range res.Scores {
		q.Scores = append(q.Scores, scoreJSON{Cost: s.Cost, Latency: s.Terms.Latency, Load: s.Terms.Load,
			Locality: s.Terms.Locality, Other: s.Terms.Other, Unit: s.Terms.Scores})
	}
	// The decode rate: tokens after the first over the time after it.
	first := c.start.Add(res.TTFT)
	switch {
	case q.Tokens > 1 && c.last.After(first):
		q.TokensPerS = float64(q.Tokens-1) / c.last.Sub(first).Seconds()
	case q.Tokens > 0 && c.last.After(c.start):
		q.TokensPerS = float64(q.Tokens) / c.last.Sub(c.start).Seconds()
	}
	c.s.dash.hub.addRequest(q)
}

// why tells a generation cancelled by the server's shutdown from one
// whose client went away.
func (s *Server) why(err error) error {
	if s.ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: the node is shutting down", ErrServerClosed)
	}
	return err
}

// call is one running generation request.
type call struct {
	s        *Server
	endpoint string
	g        genRequest
	id       string
	created  int64
	model    node.ModelInfo
	start    time.Time
	last     time.Time // the latest token
	code     string    // the error code it ended with; "" for none
	// parsers read tool calls and reasoning out of each choice's output
	// (nil: the output is all content).
	parsers []*chatparse.Parser
	prompt  int // the prompt's tokens
	// choices are the generations started, by index (the later ones
	// start once the first has its prefill done: choices.go).
	mu      sync.Mutex
	choices []*choiceState
}

// feed is the parsed events of a piece of the first choice's output
// text: its parser's, or the text as content when there is no parser.
// The shapes' endpoints (shape.go) have one choice.
func (c *call) feed(text string) []chatparse.Event {
	if p := c.parser(); p != nil {
		return p.Feed(text)
	}
	if text == "" {
		return nil
	}
	return []chatparse.Event{{Kind: chatparse.Content, Text: text}}
}

// flush is the parsed events the end of the first choice's output
// releases.
func (c *call) flush() []chatparse.Event {
	if p := c.parser(); p != nil {
		return p.End()
	}
	return nil
}

// parser is the first choice's parser (choices[0].parser, read from
// parsers, which do not change while the choices start); nil for none.
func (c *call) parser() *chatparse.Parser {
	if len(c.parsers) == 0 {
		return nil
	}
	return c.parsers[0]
}

// observe times a delta's tokens.
func (c *call) observe(d node.Delta) {
	if len(d.Tokens) == 0 {
		return
	}
	now := time.Now()
	if c.last.IsZero() {
		c.s.m.ttft.WithLabelValues(c.endpoint).Observe(now.Sub(c.start).Seconds())
		// The first delta may carry several tokens; they came together.
	} else {
		per := now.Sub(c.last).Seconds() / float64(len(d.Tokens))
		for range d.Tokens {
			c.s.m.perToken.WithLabelValues(c.endpoint).Observe(per)
		}
	}
	c.last = now
}

func (c *call) object(chunk bool) string {
	switch {
	case c.g.chat && chunk:
		return "chat.completion.chunk"
	case c.g.chat:
		return "chat.completion"
	}
	return "text_completion"
}

func (c *call) envelope(chunk bool, choices ...choiceJSON) responseJSON {
	return responseJSON{ID: c.id, Object: c.object(chunk), Created: c.created, Model: c.model.Name,
		SystemFingerprint: fingerprint(c.model), Choices: choices}
}

// fingerprint is OpenAI's system_fingerprint: the model's weights, which
// together with the seed fix the output.
func fingerprint(in node.ModelInfo) string {
	fp := in.Fingerprint
	if len(fp) > 16 {
		fp = fp[len(fp)-16:]
	}
	return "fp_" + fp
}

func usageOf(u node.Usage) *usageJSON {
	return &usageJSON{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

// sse writes server-sent events and flushes each.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func (e *sse) data(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.raw("data: " + string(b) + "\n\n")
}

func (e *sse) raw(s string) {
	if e.err != nil {
		return
	}
	if _, e.err = io.WriteString(e.w, s); e.err == nil {
		e.err = e.rc.Flush()
	}
}

// parsed streams parser events as chat deltas, a chunk each; ch carries
// the token IDs and log-probabilities of the delta that gave them, on the
// first chunk (or an empty one when the events are none).
func (c *call) parsed(out *sse, chunk func(choiceJSON) responseJSON, cs *choiceState, ch choiceJSON, evs []chatparse.Event) {
	if cs.open == nil {
		cs.open = map[int]string{}
	}
	ds := deltas(evs, cs.open)
	if len(ds) == 0 && (len(ch.TokenIDs) > 0 || ch.Logprobs != nil) {
		empty := ""
		ds = append(ds, &deltaJSON{Content: &empty})
	}
	for _, d := range ds {
		ch.Delta = d
		if len(d.ToolCalls) > 0 && d.ToolCalls[0].ID != "" {
			cs.calls++
		}
		out.data(chunk(ch))
		ch.TokenIDs, ch.Logprobs = nil, nil
	}
}

// fail ends a started stream with an error event: a data line holding
// OpenAI's error JSON (what OpenAI's own clients raise as an APIError),
// and no [DONE] after it.
func (c *call) fail(out *sse, e *apiError) {
	c.code = e.Code
	c.s.m.streamErrors.WithLabelValues(e.Code).Inc()
	if e.Status == statusClientClosed {
		if r, ok := out.w.(*recorder); ok {
			r.status = statusClientClosed
		}
		return
	}
	c.s.log.Warn("stream ended with an error", zap.String("id", c.id), zap.String("code", e.Code), zap.Error(e.err))
	if c.g.shape != nil {
		c.g.shape.fail(out, c, e)
		return
	}
	out.data(e.body())
}

// named writes a named server-sent event (an "event:" line before the
// data), as the Responses and Anthropic streams name theirs.
func (e *sse) named(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.raw("event: " + name + "\ndata: " + string(b) + "\n\n")
}
