package testnet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// words feed the prompt generator: plain ASCII, so that a prompt is the
// same bytes everywhere.
var words = strings.Fields(`the a of to and in is it that was for on are with as his they be at one
have this from or had by word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so these
her long make thing see him two has look more day could go come did number sound no most people my
over know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under name
very through just form sentence great think say help low line differ turn cause much mean before
move right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light kind`)

// Prompts draws n prompts of about nWords words each from a generator
// seeded with seed: the same arguments give the same prompts.
func Prompts(seed uint64, n, nWords int) []string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]string, n)
	for i := range out {
		w := make([]string, nWords)
		for j := range w {
			w[j] = words[rng.IntN(len(words))]
		}
		w[0] = strings.ToUpper(w[0][:1]) + w[0][1:]
		out[i] = strings.Join(w, " ")
	}
	return out
}

// RefAnswer is the oracle's answer to one prompt: its text as the API
// carries it, and its tokens, end token included.
type RefAnswer struct {
	Text   string
	Tokens []int32
}

// Reference computes, for every prompt, the greedy completion of a
// single-process run of the model on this machine's engine: what every
// swarm answer must equal, whatever failed on the way, text and tokens. modelPath is the
// generated model file; for a simulated model it is "" and gpu names the
// device profile (it only sets the simulated timing, which is skipped).
func Reference(ctx context.Context, m ModelSpec, modelPath, gpu string, prompts []string, chat bool, maxTokens int) ([]RefAnswer, error) {
	var (
		p   *engine.Pipeline
		tok *engine.Tokenizer
		err error
	)
	if m.SimModel != "" {
		spec, err := layers.Model(m.SimModel)
		if err != nil {
			return nil, err
		}
		hw, err := layers.Device(gpu)
		if err != nil {
			return nil, err
		}
		st, err := engine.NewSimStage(spec, hw, engine.WithSimSleep(func(context.Context, time.Duration) error { return nil }))
		if err != nil {
			return nil, err
		}
		if p, err = engine.NewPipeline(st); err != nil {
			st.Close()
			return nil, err
		}
		if tok, err = engine.SimTokenizer(spec.Vocab); err != nil {
			p.Close()
			return nil, err
		}
	} else {
		if tok, err = engine.LoadTokenizer(modelPath); err != nil {
			return nil, err
		}
		if p, err = engine.OpenPipeline(modelPath, nil, engine.WithThreads(1)); err != nil {
			return nil, err
		}
	}
	defer p.Close()
	out := make([]RefAnswer, len(prompts))
	for i, pr := range prompts {
		var ids []int32
		if chat {
			if ids, err = tok.EncodeChat([]engine.Message{{Role: "user", Content: pr}}, nil); err != nil {
				return nil, err
			}
		} else {
			ids = tok.Encode(pr, true, false)
		}
		sess, err := p.NewSession(len(ids) + maxTokens)
		if err != nil {
			return nil, err
		}
		var b []byte
		toks, err := sess.Generate(ctx, ids, maxTokens, engine.SamplingParams{}, tok.IsEnd, func(id int32) {
			if !tok.IsEnd(id) {
				b = append(b, tok.Piece(id)...)
			}
		})
		sess.Close()
		if err != nil {
			return nil, fmt.Errorf("reference for prompt %d: %w", i, err)
		}
		out[i] = RefAnswer{Text: wireText(b), Tokens: toks}
	}
	return out, nil
}

// wireText is text as the API's JSON carries it: random weights give
// stray bytes, which JSON turns into U+FFFD, one per byte.
func wireText(b []byte) string {
	j, _ := json.Marshal(string(b))
	var s string
	json.Unmarshal(j, &s) //nolint:errcheck // json.Marshal's own output
	return s
}

// result is one client request.
type result struct {
	ID       int           `json:"id"`
	Prompt   int           `json:"prompt"`
	Entry    string        `json:"entry"`
	Start    time.Duration `json:"start_ns"` // since the load began
	End      time.Duration `json:"end_ns"`
	OK       bool          `json:"ok"`
	Err      string        `json:"error,omitempty"`
	TTFT     time.Duration `json:"ttft_ns"`
	PerToken time.Duration `json:"per_token_ns"` // mean time between tokens after the first
	Tokens   int           `json:"tokens"`
	Text     string        `json:"text"`
	// Retried: the runner stopped the entry node while the request was in
	// flight, and it went again to another live node.
	Retried bool `json:"entry_retried"`
	// Retries: how many times the client tried again after a 503 or 429
	// (or a refused connection) before any output, as the OpenAI SDKs do;
	// RetryErrs are the errors that made it try again, in order.
	Retries   int      `json:"retries"`
	RetryErrs []string `json:"retry_errors,omitempty"`
	Mismatch  bool     `json:"mismatch"`
	// TokenIDs are the tokens the last attempt delivered (return_token_ids),
	// a failed one's too; tokenAt is when each came, since the load began.
	// WrongTokens counts those that differ from the reference's token at
	// the same position (or lie past its end).
	TokenIDs    []int32 `json:"token_ids,omitempty"`
	tokenAt     []time.Duration
	wrong       []bool
	WrongTokens int `json:"wrong_tokens,omitempty"`
	// QueueWait is how long the answering entry held the request in its
	// admission queue (its X-Strata-Queue-Wait header).
	QueueWait time.Duration `json:"queue_wait_ns"`
}

// retryPolicy is how a client tries again after a refusal that came
// before any output: a 503 or 429 (waiting Retry-After, capped) or a
// refused connection (waiting a backoff).
type retryPolicy struct {
	Max    int           // retries at most
	Budget time.Duration // no retry would start later than this after the first attempt
	Cap    time.Duration // longest wait
	Base   time.Duration // first backoff without Retry-After, doubling
}

// clientRetry follows the OpenAI SDKs (which retry 429 and 5xx, honoring
// Retry-After, with a 0.5 s doubling backoff otherwise), bounded so that
// a swarm that does not repair within ~15 s still shows up as failures.
var clientRetry = retryPolicy{Max: 4, Budget: 15 * time.Second, Cap: 2 * time.Second, Base: 500 * time.Millisecond}

// wait says how long to wait before retry n (0-based) after err, and
// whether to retry at all given the time since the first attempt.
func (rp retryPolicy) wait(err error, n int, elapsed time.Duration) (time.Duration, bool) {
	if n >= rp.Max {
		return 0, false
	}
	backoff := min(rp.Base<<n, rp.Cap)
	var he *httpError
	switch {
	case errors.As(err, &he) && (he.Status == http.StatusServiceUnavailable || he.Status == http.StatusTooManyRequests):
		if he.RetryAfter > 0 {
			backoff = min(he.RetryAfter, rp.Cap)
		}
	case errors.Is(err, syscall.ECONNREFUSED):
	default:
		return 0, false
	}
	if elapsed+backoff > rp.Budget {
		return 0, false
	}
	return backoff, true
}

// httpError is a non-200 answer to a request, before any output.
type httpError struct {
	Status     int
	Code       string        // the OpenAI error body's code, if any
	RetryAfter time.Duration // the Retry-After header in seconds (0: none)
	Body       string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body) }

// retryReason is a short name for what made a client retry, for counting.
func retryReason(err error) string {
	var he *httpError
	switch {
	case errors.As(err, &he) && he.Code != "":
		return fmt.Sprintf("HTTP %d %s", he.Status, he.Code)
	case errors.As(err, &he):
		return fmt.Sprintf("HTTP %d", he.Status)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	return err.Error()
}

// load drives requests at a cluster.
type load struct {
	spec    LoadSpec
	model   string
	prompts []string
	hc      *http.Client
	// pick returns a live entry node other than avoid (nil: none);
	// named the live node of that name (nil: none).
	pick  func(avoid *proc) *proc
	named func(name string) *proc
	retry retryPolicy
}

// run sends requests from t0 until end, Poisson arrivals at spec.Rate,
// at most spec.Clients at once (an arrival waits for a free client), and
// returns every result once the last in-flight one ends.
func (l *load) run(ctx context.Context, t0, end time.Time) []result {
	rng := rand.New(rand.NewPCG(l.spec.Seed, 0xa771))
	type job struct {
		id, prompt int
		hot        bool
	}
	jobs := make(chan job)
	var (
		mu  sync.Mutex
		res []result
		wg  sync.WaitGroup
	)
	for range l.spec.Clients {
		wg.Go(func() {
			for j := range jobs {
				r := l.do(ctx, t0, j.id, j.prompt, j.hot)
				mu.Lock()
				res = append(res, r)
				mu.Unlock()
			}
		})
	}
	next := t0
	for id := 0; ; id++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / l.spec.rateAt(next.Sub(t0)) * float64(time.Second)))
		if next.After(end) {
			break
		}
		prompt := rng.IntN(len(l.prompts))
		hot := l.spec.Hot != "" && rng.Float64() < l.spec.HotShare
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case jobs <- job{id, prompt, hot}:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	return res
}

// do runs one request. It goes again, once, to another node when the
// runner stopped its entry node while it was in flight: that failure is
// the runner's doing, not the swarm's (entry_retried). And like an
// OpenAI SDK client it tries again after a 503 or 429 or a refused
// connection, all of which come before any output, as l.retry allows
// (retries); an error once the answer has begun is final. Times count
// from the first attempt, so TTFT includes the waits.
func (l *load) do(ctx context.Context, t0 time.Time, id, prompt int, hot bool) result {
	r := result{ID: id, Prompt: prompt}
	start := time.Now()
	r.Start = start.Sub(t0)
	var avoid *proc
	for first := true; ; first = false {
		var p *proc
		if first && l.spec.Hot != "" && l.named != nil {
			// A skewed load: the hot node for its share, the others in
			// turn for the rest (the hot one when it is the only one).
			h := l.named(l.spec.Hot)
			if hot {
				p = h
			} else if h != nil {
				p = l.pick(h)
			}
		}
		if p == nil {
			p = l.pick(avoid)
		}
		if p == nil && avoid != nil && r.Retries > 0 {
			// A refusal is not the runner's doing: the node that refused
			// may serve again, the only one left or not.
			p = l.pick(nil)
		}
		if p == nil {
			r.Err = "no live entry node"
			break
		}
		r.Entry = p.spec.Name
		picked := time.Now()
		err := l.stream(ctx, p.apiURL, l.prompts[prompt], start, &r)
		if err == nil {
			r.OK, r.Err = true, ""
			break
		}
		r.Err = err.Error()
		if !r.Retried && p.stoppedAfter(picked) {
			r.Retried, avoid = true, p
			continue
		}
		wait, ok := l.retry.wait(err, r.Retries, time.Since(start))
		if !ok || ctx.Err() != nil {
			break
		}
		r.Retries++
		r.RetryErrs = append(r.RetryErrs, retryReason(err))
		// Another entry next time, as behind a load balancer; pick falls
		// back to this one when it is the only one.
		avoid = p
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	r.End = time.Since(t0)
	return r
}

// stream sends one streaming greedy request to base and fills r's text
// and timings.
func (l *load) stream(ctx context.Context, base, prompt string, start time.Time, r *result) error {
	ctx, cancel := context.WithTimeout(ctx, l.spec.Timeout)
	defer cancel()
	body := map[string]any{"model": l.model, "max_tokens": l.spec.MaxTokens, "temperature": 0, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "return_token_ids": true}
	r.TokenIDs, r.tokenAt = nil, nil
	if l.spec.QueueTimeout > 0 {
		body["queue_timeout"] = l.spec.QueueTimeout.Seconds()
	}
	path := "/v1/completions"
	if l.spec.Endpoint == "chat" {
		path = "/v1/chat/completions"
		body["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		body["prompt"] = prompt
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		he := &httpError{Status: resp.StatusCode, Body: strings.TrimSpace(string(msg))}
		var eb struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(msg, &eb) == nil && eb.Error.Code != nil {
			he.Code = fmt.Sprint(eb.Error.Code)
		}
		// Retry-After in whole seconds, the form the node sends; an HTTP
		// date counts as none.
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			he.RetryAfter = time.Duration(s) * time.Second
		}
		return he
	}
	if s, err := strconv.ParseFloat(resp.Header.Get("X-Strata-Queue-Wait"), 64); err == nil && s >= 0 {
		r.QueueWait = time.Duration(s * float64(time.Second))
	}
	var (
		text         strings.Builder
		first, last  time.Time
		chunks, toks int
		done         bool
	)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
				Text     *string `json:"text"`
				Delta    *struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			return fmt.Errorf("bad chunk %q: %w", data, err)
		}
		if ch.Error != nil {
			return fmt.Errorf("stream error: %s (%v)", ch.Error.Message, ch.Error.Code)
		}
		if ch.Usage != nil {
			toks = ch.Usage.CompletionTokens
		}
		for _, c := range ch.Choices {
			if len(c.TokenIDs) > 0 {
				at := r.Start + time.Since(start)
				for _, id := range c.TokenIDs {
					r.TokenIDs = append(r.TokenIDs, id)
					r.tokenAt = append(r.tokenAt, at)
				}
			}
			var s string
			switch {
			case c.Text != nil:
				s = *c.Text
			case c.Delta != nil && c.Delta.Content != nil:
				s = *c.Delta.Content
			}
			if s == "" {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			chunks++
			text.WriteString(s)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream cut: %w", err)
	}
	if !done {
		return errors.New("stream ended without [DONE]")
	}
	r.Text = text.String()
	r.Tokens = max(toks, chunks)
	if !first.IsZero() {
		r.TTFT = first.Sub(start)
		if r.Tokens > 1 {
			r.PerToken = last.Sub(first) / time.Duration(r.Tokens-1)
		}
	}
	return nil
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of xs,
// which it sorts; 0 for none.
func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	sortDurations(xs)
	k := int(math.Ceil(p / 100 * float64(len(xs))))
	return xs[min(max(k, 1), len(xs))-1]
}
