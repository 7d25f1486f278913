package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// Choices and log-probabilities. A request with n > 1 runs n
// generations, each with its own sampling draw: choice i samples with
// seed engine.ChoiceSeed(seed, i), so that choice 0 is the answer a
// request with n = 1 gets and any choice replays alone with its derived
// seed. The first choice starts alone; the others start once it has
// given its first token, when its prefill is done and its hop sessions
// hold the prompt's KV, so that theirs resume from it (the stage prefix
// cache counts a live session over the same layers as cached) instead
// of recomputing the prompt. A streamed answer interleaves the choices'
// chunks as their tokens come, each chunk naming its choice by index,
// as OpenAI's do. usage.completion_tokens sums over the choices; the
// prompt counts once.

// choiceState is one choice's generation and what its answer needs.
type choiceState struct {
	index  int
	st     Stream
	parser *chatparse.Parser
	calls  int                  // tool calls streamed
	open   map[int]string       // IDs of calls whose arguments are streaming, by index
	lp     []node.TokenLogProbs // streamed log-probabilities not sent yet
	offset int                  // the legacy text_offset: characters of the tokens before
}

// choiceReq is the node request of choice i, with its own seed, and
// for the later choices the stream whose path it takes (the first's),
// so that they resume the prompt from its hops.
func (c *call) choiceReq(i int) (node.Request, Stream) {
	req := c.g.req
	req.Sampling.Seed = engine.ChoiceSeed(req.Sampling.Seed, i)
	if i == 0 {
		return req, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return req, c.choices[0].st
}

func (c *call) add(i int, st Stream) *choiceState {
	cs := &choiceState{index: i, st: st, parser: c.parsers[i]}
	c.mu.Lock()
	c.choices = append(c.choices, cs)
	c.mu.Unlock()
	return cs
}

// startRest starts choices 1..n−1, handing each to started (or the
// error that refused it, after which it starts no more). It stops
// early, closing what it started, when stop is closed.
func (c *call) startRest(ctx context.Context, started func(i int, st Stream, err error) bool) {
	for i := 1; i < c.g.n; i++ {
		req, follow := c.choiceReq(i)
		st, err := c.s.b.Generate(ctx, req, follow)
		if !started(i, st, err) {
			if st != nil {
				st.Close()
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// results sums the choices' outcomes for the dashboard: the first
// choice's, with every choice's tokens, replays and paths.
func (c *call) results() node.Result {
	c.mu.Lock()
	cs := append([]*choiceState(nil), c.choices...)
	c.mu.Unlock()
	var out node.Result
	for i, ch := range cs {
		res, _ := ch.st.Result()
		if i == 0 {
			out = res
			continue
		}
		out.Usage.CompletionTokens += res.Usage.CompletionTokens
		out.Usage.TotalTokens += res.Usage.CompletionTokens
		out.Replays += res.Replays
		out.Paths = append(out.Paths, res.Paths...)
	}
	return out
}

// whole answers a non-streaming request.
func (c *call) whole(ctx context.Context, w http.ResponseWriter, param string) *apiError {
	first := c.choices[0]
	n := c.g.n
	type outcome struct {
		res     node.Result
		err     error
		started bool
	}
	outs := make([]outcome, n)
	outs[0].started = true
	var wg sync.WaitGroup
	wg.Add(1)
	// The first choice is read here, delta by delta (its timing feeds
	// the metrics); the others start after its first token.
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			d, err := first.st.Recv()
			if err != nil {
				break // Result has it
			}
			if k == 0 && n > 1 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.startRest(ctx, func(i int, st Stream, err error) bool {
						outs[i].started, outs[i].err = true, err
						if err != nil {
							return false
						}
						cs := c.add(i, st)
						wg.Add(1)
						go func() {
							defer wg.Done()
							outs[i].res, outs[i].err = cs.st.Result()
						}()
						return true
					})
				}()
			}
			c.observe(d)
		}
		outs[0].res, outs[0].err = first.st.Result()
	}()
	wg.Wait()
	if c.g.shape != nil {
		// A shape's endpoint has one choice, and no log-probabilities.
		if outs[0].err != nil {
			return fromError(c.s.why(outs[0].err), param)
		}
		res := outs[0].res
		c.s.m.observeTokens(res.Usage.PromptTokens, res.Usage.CompletionTokens)
		c.g.shape.whole(w, c, res, append(c.feed(res.Text), c.flush()...))
		return nil
	}
	var usage node.Usage
	var strata strataJSON
	choices := make([]choiceJSON, n)
	for i, o := range outs {
		if o.err != nil {
			return fromError(c.s.why(o.err), param)
		}
		if !o.started {
			return fromError(c.s.why(fmt.Errorf("%w: choice %d did not start", node.ErrSessionLost, i)), param)
		}
		res := o.res
		if i == 0 {
			usage = res.Usage
			strata.TTFTMs = float64(res.TTFT.Microseconds()) / 1000
		} else {
			usage.CompletionTokens += res.Usage.CompletionTokens
			usage.TotalTokens += res.Usage.CompletionTokens
		}
		strata.Replays += res.Replays
		strata.Paths = append(strata.Paths, res.Paths...)
		finish := res.FinishReason
		choice := choiceJSON{Index: i, FinishReason: &finish}
		if c.g.tokenIDs {
			choice.TokenIDs = res.Tokens
		}
		if c.g.logprobs {
			offset := 0
			choice.Logprobs = c.logprobsJSON(res.LogProbs, &offset)
		}
		switch p := c.parsers[i]; {
		case p != nil:
			var a answer
			a.add(p.Feed(res.Text))
			a.add(p.End())
			choice.Message = a.message()
			finish = finishOf(finish, len(a.calls))
		case c.g.chat:
			choice.Message = &chatMsgJSON{Role: "assistant", Content: &res.Text}
		default:
			choice.Text = &res.Text
		}
		choices[i] = choice
	}
	c.s.m.observeTokens(usage.PromptTokens, usage.CompletionTokens)
	out := c.envelope(false, choices...)
	out.Usage = usageOf(usage)
	out.Strata = &strata
	writeJSON(w, http.StatusOK, out)
	return nil
}

// item is what the stream's loop hears: a choice's delta or end, or a
// later choice started (st) or refused (err with started).
type item struct {
	i       int
	d       node.Delta
	err     error
	st      Stream
	started bool
}

// stream answers a streaming request: per choice, a chunk per delta with
// text, a last chunk with the finish reason; then the usage chunk if
// asked, and "data: [DONE]". A generation that fails after the headers
// ends the stream with an error event and no [DONE].
func (c *call) stream(ctx context.Context, w http.ResponseWriter, param string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, rc: http.NewResponseController(w)}
	var usageNull any
	if c.g.includeUsage {
		usageNull = json.RawMessage("null")
	}
	chunk := func(ch choiceJSON) responseJSON {
		r := c.envelope(true, ch)
		r.Usage = usageNull
		return r
	}
	switch {
	case c.g.shape != nil:
		c.g.shape.open(out, c)
	case c.g.chat:
		for i := range c.g.n {
			empty := ""
			out.data(chunk(choiceJSON{Index: i, Delta: &deltaJSON{Role: "assistant", Content: &empty}}))
		}
	default:
		out.raw(": stream open\n\n") // headers out now, before the first token
	}

	// Recv blocks; pumps let the loop also send keep-alives, and merge
	// the choices.
	items := make(chan item)
	done := make(chan struct{})
	defer close(done)
	pump := func(i int, st Stream) {
		go func() {
			for {
				d, err := st.Recv()
				select {
				case items <- item{i: i, d: d, err: err}:
				case <-done:
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	byIndex := make([]*choiceState, c.g.n)
	byIndex[0] = c.choices[0]
	pump(0, byIndex[0].st)
	var usage node.Usage
	live, rest := c.g.n, c.g.n == 1
	keep := time.NewTicker(c.s.o.keepAlive)
	defer keep.Stop()
	for out.err == nil && live > 0 {
		var it item
		select {
		case it = <-items:
		case <-keep.C:
			out.raw(": keep-alive\n\n")
			continue
		}
		if it.started {
			if it.err != nil {
				c.fail(out, fromError(c.s.why(it.err), param))
				return
			}
			byIndex[it.i] = c.add(it.i, it.st)
			pump(it.i, it.st)
			continue
		}
		if !rest && it.err == nil {
			// The first choice's first token: its prefill is done.
			rest = true
			go c.startRest(ctx, func(i int, st Stream, err error) bool {
				select {
				case items <- item{i: i, st: st, err: err, started: true}:
					return true
				case <-done:
					return false
				}
			})
		}
		cs := byIndex[it.i]
		if it.err != nil && !errors.Is(it.err, io.EOF) {
			c.fail(out, fromError(c.s.why(it.err), param))
			return
		}
		if it.err != nil { // io.EOF: this choice's end
			live--
			res, err := cs.st.Result()
			if err != nil {
				c.fail(out, fromError(c.s.why(err), param))
				return
			}
			if c.g.shape != nil {
				// A shape's stream has one choice: this is its end.
				c.s.m.observeTokens(res.Usage.PromptTokens, res.Usage.CompletionTokens)
				c.g.shape.events(out, c, c.flush())
				c.g.shape.close(out, c, res)
				return
			}
			// The choices end in any order; the prompt counts once.
			usage.PromptTokens = res.Usage.PromptTokens
			usage.CompletionTokens += res.Usage.CompletionTokens
			usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
			c.finish(out, chunk, cs, res)
			continue
		}
		if cs.index == 0 {
			c.observe(it.d)
		}
		cs.lp = append(cs.lp, it.d.LogProbs...)
		// A delta with no text yet (part of a character, or held back
		// for a stop string) has a chunk only when token IDs are asked;
		// its log-probabilities wait for the next chunk.
		if it.d.Text == "" && (!c.g.tokenIDs || len(it.d.Tokens) == 0) {
			continue
		}
		text := it.d.Text
		if c.g.shape != nil {
			c.g.shape.events(out, c, c.feed(text))
			continue
		}
		ch := choiceJSON{Index: cs.index}
		if c.g.tokenIDs {
			ch.TokenIDs = it.d.Tokens
		}
		if c.g.logprobs {
			ch.Logprobs = c.logprobsJSON(cs.lp, &cs.offset)
			cs.lp = nil
		}
		switch {
		case cs.parser != nil:
			c.parsed(out, chunk, cs, ch, cs.parser.Feed(text))
			continue
		case c.g.chat:
			ch.Delta = &deltaJSON{Content: &text}
		default:
			ch.Text = &text
		}
		out.data(chunk(ch))
	}
	if out.err != nil {
		c.s.log.Debug("stream write failed; the client went away", zap.Error(out.err), zap.NamedError("ctx", ctx.Err()))
		c.code = "client_closed_request"
		if r, ok := w.(*recorder); ok {
			r.status = statusClientClosed
		}
		return
	}
	c.s.m.observeTokens(usage.PromptTokens, usage.CompletionTokens)
	if c.g.includeUsage {
		u := c.envelope(true)
		u.Choices = []choiceJSON{}
		u.Usage = usageOf(usage)
		out.data(u)
	}
	out.raw("data: [DONE]\n\n")
}

// finish sends a choice's last chunks: what its parser held, and the
// finish reason (with any log-probabilities not sent yet).
func (c *call) finish(out *sse, chunk func(choiceJSON) responseJSON, cs *choiceState, res node.Result) {
	finish := res.FinishReason
	if cs.parser != nil {
		c.parsed(out, chunk, cs, choiceJSON{Index: cs.index}, cs.parser.End())
		finish = finishOf(finish, cs.calls)
	}
	last := choiceJSON{Index: cs.index, FinishReason: &finish}
	if c.g.logprobs && len(cs.lp) > 0 {
		last.Logprobs = c.logprobsJSON(cs.lp, &cs.offset)
		cs.lp = nil
	}
	if c.g.chat {
		last.Delta = &deltaJSON{}
		if last.Logprobs != nil {
			empty := ""
			last.Delta.Content = &empty
		}
	} else {
		empty := ""
		last.Text = &empty
	}
	out.data(chunk(last))
}

// Log-probability shapes: chat's choices[].logprobs.content, and the
// legacy completions' logprobs.
type (
	topLogprobJSON struct {
		Token   string  `json:"token"`
		Logprob float32 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	tokenLogprobJSON struct {
		Token       string           `json:"token"`
		Logprob     float32          `json:"logprob"`
		Bytes       []int            `json:"bytes"`
		TopLogprobs []topLogprobJSON `json:"top_logprobs"`
	}
	chatLogprobsJSON struct {
		Content []tokenLogprobJSON `json:"content"`
		Refusal []tokenLogprobJSON `json:"refusal"` // always null: no refusals here
	}
	completionLogprobsJSON struct {
		Tokens        []string        `json:"tokens"`
		TokenLogprobs []float32       `json:"token_logprobs"`
		TopLogprobs   []orderedLPJSON `json:"top_logprobs"`
		TextOffset    []int           `json:"text_offset"`
	}
)

// orderedLPJSON is a legacy top_logprobs object, {token: logprob}, in
// its tokens' order (the most likely first); a text that two tokens
// share keeps the first.
type orderedLPJSON []node.LogProb

func (o orderedLPJSON) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	seen := make(map[string]bool, len(o))
	for _, t := range o {
		k := tokenText(t.Text)
		if seen[k] {
			continue
		}
		seen[k] = true
		if len(b) > 1 {
			b = append(b, ',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b = append(b, kb...)
		b = append(b, ':')
		b = strconv.AppendFloat(b, float64(jsonLP(t.LogProb)), 'g', -1, 32)
	}
	return append(b, '}'), nil
}

// jsonLP is a log-probability as JSON can carry it: OpenAI's -9999 for
// a token with no probability (-Inf), which JSON has no number for.
func jsonLP(v float32) float32 {
	if v != v || v < -9999 {
		return -9999
	}
	return v
}

// tokenText is a token's text as the logprobs' token fields show it: its
// bytes when they are UTF-8, and otherwise (part of a character) as
// OpenAI writes such a token, "bytes:" and each byte as \xHH; the bytes
// fields carry the bytes themselves either way.
func tokenText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	const hex = "0123456789abcdef"
	out := []byte("bytes:")
	for _, c := range b {
		out = append(out, '\\', 'x', hex[c>>4], hex[c&15])
	}
	return string(out)
}

func bytesOf(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// logprobsJSON is the logprobs object of the tokens lps, in the
// endpoint's shape; offset is the legacy text_offset of the first, which
// it advances past them.
func (c *call) logprobsJSON(lps []node.TokenLogProbs, offset *int) any {
	if c.g.chat {
		out := chatLogprobsJSON{Content: make([]tokenLogprobJSON, len(lps))}
		for i, lp := range lps {
			t := tokenLogprobJSON{Token: tokenText(lp.Text), Logprob: jsonLP(lp.LogProb), Bytes: bytesOf(lp.Text),
				TopLogprobs: make([]topLogprobJSON, len(lp.Top))}
			for j, a := range lp.Top {
				t.TopLogprobs[j] = topLogprobJSON{Token: tokenText(a.Text), Logprob: jsonLP(a.LogProb), Bytes: bytesOf(a.Text)}
			}
			out.Content[i] = t
		}
		return out
	}
	out := completionLogprobsJSON{Tokens: make([]string, len(lps)), TokenLogprobs: make([]float32, len(lps)),
		TopLogprobs: make([]orderedLPJSON, len(lps)), TextOffset: make([]int, len(lps))}
	for i, lp := range lps {
		out.Tokens[i] = tokenText(lp.Text)
		out.TokenLogprobs[i] = jsonLP(lp.LogProb)
		// OpenAI's legacy top_logprobs always holds the sampled token:
		// up to logprobs + 1 entries.
		top := orderedLPJSON(lp.Top)
		if !slices.ContainsFunc(lp.Top, func(t node.LogProb) bool { return t.Token == lp.Token }) {
			top = append(top[:len(top):len(top)], node.LogProb{Token: lp.Token, Text: lp.Text, LogProb: lp.LogProb})
		}
		out.TopLogprobs[i] = top
		out.TextOffset[i] = *offset
		*offset += utf8.RuneCount(lp.Text)
	}
	return out
}
