package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// The answers' shapes, as a client decodes them (float32: the server
// writes each value in its shortest float32 form, which reads back to
// the same bits).
type (
	topLPOut struct {
		Token   string  `json:"token"`
		Logprob float32 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	tokenLPOut struct {
		Token       string     `json:"token"`
		Logprob     float32    `json:"logprob"`
		Bytes       []int      `json:"bytes"`
		TopLogprobs []topLPOut `json:"top_logprobs"`
	}
	chatLPOut struct {
		Content []tokenLPOut     `json:"content"`
		Refusal *json.RawMessage `json:"refusal"`
	}
	legacyLPOut struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float32            `json:"token_logprobs"`
		TopLogprobs   []map[string]float32 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	choiceOut struct {
		Index   int     `json:"index"`
		Text    *string `json:"text"`
		Message *struct {
			Content *string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
		TokenIDs     []int32         `json:"token_ids"`
	}
	answerOut struct {
		Object  string      `json:"object"`
		Choices []choiceOut `json:"choices"`
		Usage   *usageJSON  `json:"usage"`
		Strata  *strataJSON `json:"strata"`
		Error   *errorObject
	}
)

func (c choiceOut) text() string {
	switch {
	case c.Text != nil:
		return *c.Text
	case c.Message != nil && c.Message.Content != nil:
		return *c.Message.Content
	case c.Delta != nil && c.Delta.Content != nil:
		return *c.Delta.Content
	}
	return ""
}

func postAnswer(t *testing.T, url string, body map[string]any) answerOut {
	t.Helper()
	status, _, raw := post(t, url, "", body)
	if status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, status, raw)
	}
	var a answerOut
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return a
}

// streamAnswer reads a stream's chunks into one answer per choice
// index: the text, token IDs and log-probabilities joined, the finish
// reason, and the usage.
type streamChoice struct {
	text     string
	ids      []int32
	chatLP   []tokenLPOut
	legacyLP legacyLPOut
	finish   string
	chunks   int
}

func readChoices(t *testing.T, url string, body map[string]any) (map[int]*streamChoice, *usageJSON) {
	t.Helper()
	s := openStream(t, url, "", body)
	defer s.close()
	out := map[int]*streamChoice{}
	var usage *usageJSON
	done := false
	for {
		ev, ok := s.next()
		if !ok {
			break
		}
		if ev.data == "[DONE]" {
			done = true
			continue
		}
		var a answerOut
		if err := json.Unmarshal([]byte(ev.data), &a); err != nil {
			t.Fatalf("%s: %v", ev.data, err)
		}
		if a.Error != nil {
			t.Fatalf("stream error %s", ev.data)
		}
		if a.Usage != nil {
			usage = a.Usage
		}
		for _, ch := range a.Choices {
			sc := out[ch.Index]
			if sc == nil {
				sc = &streamChoice{}
				out[ch.Index] = sc
			}
			if sc.finish != "" {
				t.Fatalf("choice %d: a chunk after its finish: %s", ch.Index, ev.data)
			}
			sc.chunks++
			sc.text += ch.text()
			sc.ids = append(sc.ids, ch.TokenIDs...)
			if ch.FinishReason != nil {
				sc.finish = *ch.FinishReason
			}
			if isNull(ch.Logprobs) {
				continue
			}
			if a.Object == "chat.completion.chunk" {
				var lp chatLPOut
				if err := json.Unmarshal(ch.Logprobs, &lp); err != nil {
					t.Fatal(err)
				}
				sc.chatLP = append(sc.chatLP, lp.Content...)
			} else {
				var lp legacyLPOut
				if err := json.Unmarshal(ch.Logprobs, &lp); err != nil {
					t.Fatal(err)
				}
				l := &sc.legacyLP
				l.Tokens = append(l.Tokens, lp.Tokens...)
				l.TokenLogprobs = append(l.TokenLogprobs, lp.TokenLogprobs...)
				l.TopLogprobs = append(l.TopLogprobs, lp.TopLogprobs...)
				l.TextOffset = append(l.TextOffset, lp.TextOffset...)
			}
		}
	}
	if !done {
		t.Fatal("the stream did not end with [DONE]")
	}
	return out, usage
}

// oracle is the single-process pipeline on the test model: the logits
// of every position, with no swarm in between.
type oracle struct {
	tok *engine.Tokenizer
	p   *engine.Pipeline
}

func newOracle(t *testing.T) *oracle {
	t.Helper()
	tok, err := engine.LoadTokenizer(modelPath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(modelPath, nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &oracle{tok: tok, p: p}
}

// logProbs steps prompt and then out through one session and returns
// engine.LogProbs of each of out's tokens with k alternatives.
func (o *oracle) logProbs(t *testing.T, prompt, out []int32, k int) (chosen []float32, top [][]engine.TokenLogProb) {
	t.Helper()
	s, err := o.p.NewSession(len(prompt) + len(out))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := prompt
	for _, id := range out {
		logits, err := s.Step(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		lp, tl := engine.LogProbs(logits, id, k)
		chosen, top = append(chosen, lp), append(top, tl)
		in = []int32{id}
	}
	return chosen, top
}

func bytesInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// checkChatLP checks a chat answer's logprobs.content against the
// single-process oracle, bit for bit.
func checkChatLP(t *testing.T, o *oracle, prompt, ids []int32, content []tokenLPOut, k int, greedy bool) {
	t.Helper()
	if len(content) != len(ids) {
		t.Fatalf("%d logprobs for %d tokens", len(content), len(ids))
	}
	chosen, top := o.logProbs(t, prompt, ids, k)
	piece := func(id int32) []byte {
		if b := o.tok.Piece(id); len(b) > 0 {
			return b
		}
		return []byte(o.tok.Token(id))
	}
	for i, c := range content {
		if math.Float32bits(c.Logprob) != math.Float32bits(chosen[i]) {
			t.Fatalf("token %d (%d): logprob %v, single process %v", i, ids[i], c.Logprob, chosen[i])
		}
		if !slices.Equal(c.Bytes, bytesInts(piece(ids[i]))) || c.Token != tokenText(piece(ids[i])) {
			t.Fatalf("token %d: %q %v, want the bytes of %d", i, c.Token, c.Bytes, ids[i])
		}
		if len(c.TopLogprobs) != k {
			t.Fatalf("token %d: %d top logprobs, asked %d", i, len(c.TopLogprobs), k)
		}
		found := false
		for j, a := range c.TopLogprobs {
			w := top[i][j]
			if math.Float32bits(a.Logprob) != math.Float32bits(w.LogProb) || !slices.Equal(a.Bytes, bytesInts(piece(w.Token))) {
				t.Fatalf("token %d top %d: %q %v, single process token %d %v", i, j, a.Token, a.Logprob, w.Token, w.LogProb)
			}
			if j > 0 && a.Logprob > c.TopLogprobs[j-1].Logprob {
				t.Fatalf("token %d: top logprobs out of order", i)
			}
			if w.Token == ids[i] {
				found = true
				if a.Logprob != c.Logprob {
					t.Fatalf("token %d: the chosen token's logprob %v differs in the top list %v", i, c.Logprob, a.Logprob)
				}
			}
		}
		if greedy && (!found || top[i][0].Token != ids[i]) {
			t.Fatalf("greedy token %d (%d) is not the first of the top logprobs", i, ids[i])
		}
	}
}

// TestChatLogprobs: /v1/chat/completions with logprobs and top_logprobs
// answers in OpenAI's shape, whole and streamed alike, with the
// log-softmax of the single-process logits bit for bit; greedy's token
// is the first of its top_logprobs; without logprobs the field is null.
func TestChatLogprobs(t *testing.T) {
	c := shared.get(t)
	o := newOracle(t)
	msgs := []map[string]any{{"role": "user", "content": "Tell me a story."}}
	prompt, err := o.tok.EncodeChatVars([]engine.Message{{Role: "user", Content: "Tell me a story."}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const k = 5
	for _, tc := range []struct {
		temp   float64
		greedy bool
	}{{0, true}, {0.9, false}} {
		req := map[string]any{"messages": msgs, "max_tokens": 12, "temperature": tc.temp, "seed": 11, "logprobs": true,
			"top_logprobs": k, "return_token_ids": true}
		a := postAnswer(t, c.urls[1]+"/v1/chat/completions", req)
		if len(a.Choices) != 1 || len(a.Choices[0].TokenIDs) == 0 {
			t.Fatalf("answer %+v", a)
		}
		var lp chatLPOut
		if err := json.Unmarshal(a.Choices[0].Logprobs, &lp); err != nil {
			t.Fatalf("logprobs %s: %v", a.Choices[0].Logprobs, err)
		}
		if lp.Refusal == nil || string(*lp.Refusal) != "null" {
			if lp.Refusal != nil {
				t.Fatalf("refusal %s", *lp.Refusal)
			}
		}
		ids := a.Choices[0].TokenIDs
		checkChatLP(t, o, prompt, ids, lp.Content, k, tc.greedy)
		// Streamed: the same, spread over the chunks.
		chs, _ := readChoices(t, c.urls[2]+"/v1/chat/completions", withStream(req, true))
		s := chs[0]
		if s == nil || !reflect.DeepEqual(s.chatLP, lp.Content) || !slices.Equal(s.ids, ids) || s.text != a.Choices[0].text() {
			t.Fatalf("streamed %d logprobs for %v, whole %d for %v", len(s.chatLP), s.ids, len(lp.Content), ids)
		}
		t.Logf("temperature %v: %d tokens, first %q %v, top %q %v", tc.temp, len(ids), lp.Content[0].Token, lp.Content[0].Logprob,
			lp.Content[0].TopLogprobs[0].Token, lp.Content[0].TopLogprobs[0].Logprob)
	}
	// logprobs without top_logprobs: the chosen tokens' only.
	a := postAnswer(t, c.urls[0]+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4, "temperature": 0,
		"logprobs": true})
	var lp chatLPOut
	if err := json.Unmarshal(a.Choices[0].Logprobs, &lp); err != nil || len(lp.Content) == 0 || len(lp.Content[0].TopLogprobs) != 0 ||
		!strings.Contains(string(a.Choices[0].Logprobs), `"top_logprobs":[]`) {
		t.Fatalf("logprobs %s: %v", a.Choices[0].Logprobs, err)
	}
	a = postAnswer(t, c.urls[0]+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4, "logprobs": false})
	if string(a.Choices[0].Logprobs) != "null" {
		t.Fatalf("logprobs %s unasked", a.Choices[0].Logprobs)
	}
}

// TestCompletionLogprobs: the legacy /v1/completions logprobs N answers
// {tokens, token_logprobs, top_logprobs, text_offset}, whole and
// streamed alike, with the single-process values; top_logprobs holds the
// N most likely and the sampled token.
func TestCompletionLogprobs(t *testing.T) {
	c := shared.get(t)
	o := newOracle(t)
	const k = 3
	req := map[string]any{"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.7, "seed": 5, "logprobs": k,
		"return_token_ids": true}
	a := postAnswer(t, c.urls[0]+"/v1/completions", req)
	var lp legacyLPOut
	if err := json.Unmarshal(a.Choices[0].Logprobs, &lp); err != nil {
		t.Fatalf("logprobs %s: %v", a.Choices[0].Logprobs, err)
	}
	ids := a.Choices[0].TokenIDs
	n := len(ids)
	if len(lp.Tokens) != n || len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n || a.Usage.CompletionTokens != n {
		t.Fatalf("logprobs %s for %d tokens", a.Choices[0].Logprobs, n)
	}
	chosen, top := o.logProbs(t, o.tok.Encode("Once upon a time", true, false), ids, k)
	off := 0
	for i := range ids {
		if math.Float32bits(lp.TokenLogprobs[i]) != math.Float32bits(chosen[i]) {
			t.Fatalf("token %d: %v, single process %v", i, lp.TokenLogprobs[i], chosen[i])
		}
		if lp.TextOffset[i] != off {
			t.Fatalf("text_offset %v", lp.TextOffset)
		}
		off += utf8.RuneCount(o.tok.Piece(ids[i]))
		if len(lp.TopLogprobs[i]) < 1 || len(lp.TopLogprobs[i]) > k+1 {
			t.Fatalf("token %d: top_logprobs %v", i, lp.TopLogprobs[i])
		}
		if v, ok := lp.TopLogprobs[i][lp.Tokens[i]]; !ok || v != lp.TokenLogprobs[i] {
			t.Fatalf("token %d: top_logprobs %v lack the sampled %q", i, lp.TopLogprobs[i], lp.Tokens[i])
		}
		for _, w := range top[i] {
			if v, ok := lp.TopLogprobs[i][tokenText(o.tok.Piece(w.Token))]; !ok || v < w.LogProb {
				t.Fatalf("token %d: top_logprobs %v lack %d (%v)", i, lp.TopLogprobs[i], w.Token, w.LogProb)
			}
		}
	}
	if strings.Join(lp.Tokens, "") != a.Choices[0].text() {
		t.Logf("tokens %q joined differ from the text %q (end or control tokens)", lp.Tokens, a.Choices[0].text())
	}
	chs, _ := readChoices(t, c.urls[1]+"/v1/completions", withStream(req, true))
	if s := chs[0]; s == nil || !reflect.DeepEqual(s.legacyLP, lp) {
		t.Fatalf("streamed %+v\nwhole %+v", chs[0].legacyLP, lp)
	}
	// logprobs 0: the sampled token's alone.
	a = postAnswer(t, c.urls[0]+"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 3, "logprobs": 0})
	lp = legacyLPOut{}
	if err := json.Unmarshal(a.Choices[0].Logprobs, &lp); err != nil || len(lp.TopLogprobs) == 0 || len(lp.TopLogprobs[0]) != 1 {
		t.Fatalf("logprobs 0: %s %v", a.Choices[0].Logprobs, err)
	}
}

// prefixPositions sums the positions the swarm's hops resumed from
// their prefix caches.
func prefixPositions(c *cluster) uint64 {
	var n uint64
	for _, nd := range c.nodes {
		n += nd.Metrics().PrefixTokens
	}
	return n
}

// TestChoices: n = 2 answers two choices, indices 0 and 1, each the
// answer of a single request with the derived seed
// (engine.ChoiceSeed), on both endpoints, whole and streamed
// (interleaved by index); usage sums the choices' tokens; the second
// choice's prefill resumes the prompt from the first's KV where it runs
// on the same hops.
func TestChoices(t *testing.T) {
	c := shared.get(t)
	const seed = 1234
	// A prompt of several 16-token blocks, so that there is a prefix to
	// share.
	// Prompts of this run alone, from their first block: with -count=2
	// the caches hold the last run's, which a first hop would resume
	// where a later hop of another path may not (a cold retry).
	nonce := func() string { return fmt.Sprintf("%016x. ", rand.Uint64()) }
	prompt := nonce() + strings.Repeat("The swarm shares the prompt between the choices. ", 4)
	for _, ep := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/completions", map[string]any{"prompt": prompt}},
		{"/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": prompt}}}},
	} {
		req := map[string]any{"max_tokens": 12, "temperature": 0.9, "seed": seed, "n": 2, "return_token_ids": true}
		for k, v := range ep.body {
			req[k] = v
		}
		before := prefixPositions(c)
		a := postAnswer(t, c.urls[0]+ep.path, req)
		reused := prefixPositions(c) - before
		if len(a.Choices) != 2 || a.Choices[0].Index != 0 || a.Choices[1].Index != 1 {
			t.Fatalf("%s: choices %+v", ep.path, a.Choices)
		}
		total := 0
		for i, ch := range a.Choices {
			one := map[string]any{}
			for k, v := range req {
				one[k] = v
			}
			one["n"], one["seed"] = 1, int64(engine.ChoiceSeed(seed, i))
			s := postAnswer(t, c.urls[1]+ep.path, one)
			if !slices.Equal(s.Choices[0].TokenIDs, ch.TokenIDs) || s.Choices[0].text() != ch.text() {
				t.Fatalf("%s choice %d: %v, alone with seed %d: %v", ep.path, i, ch.TokenIDs, engine.ChoiceSeed(seed, i), s.Choices[0].TokenIDs)
			}
			total += len(ch.TokenIDs)
		}
		if slices.Equal(a.Choices[0].TokenIDs, a.Choices[1].TokenIDs) {
			t.Errorf("%s: both choices drew the same tokens %v", ep.path, a.Choices[0].TokenIDs)
		}
		if a.Usage.CompletionTokens != total || a.Usage.TotalTokens != a.Usage.PromptTokens+total {
			t.Fatalf("%s: usage %+v for %d tokens", ep.path, a.Usage, total)
		}
		// The prefix the second choice resumed, against a request with
		// n = 1 (whose prompt the cache may hold from the runs above:
		// a fresh prompt each).
		one := map[string]any{}
		for k, v := range req {
			one[k] = v
		}
		fresh := nonce() + strings.Repeat("Every choice is its own generation here. ", 4)
		if ep.path == "/v1/completions" {
			one["prompt"] = fresh
		} else {
			one["messages"] = []map[string]any{{"role": "user", "content": fresh}}
		}
		one["n"] = 1
		before = prefixPositions(c)
		postAnswer(t, c.urls[0]+ep.path, one)
		reused1 := prefixPositions(c) - before
		t.Logf("%s: prompt %d tokens; positions resumed from prefix caches: n=2 %d, n=1 %d; paths %v", ep.path,
			a.Usage.PromptTokens, reused, reused1, a.Strata.Paths)
		// The second choice follows the first's path and resumes the
		// prompt's whole blocks on every hop. (A first choice may need a
		// cold retry of its own: a first hop resumes a chat template's
		// opening that another session left, which a later hop of this
		// path may lack; the follower takes the path it retried on.)
		last := a.Strata.Paths[len(a.Strata.Paths)-1]
		if hops := uint64(strings.Count(last, "→") + 1); reused < hops*uint64((a.Usage.PromptTokens-1)/16*16) {
			t.Errorf("%s: the second choice on %s resumed only %d positions of a %d-token prompt", ep.path,
				last, reused, a.Usage.PromptTokens)
		}
		// Streamed: the same choices, interleaved by index.
		sr := withStream(req, true)
		sr["stream_options"] = map[string]any{"include_usage": true}
		chs, usage := readChoices(t, c.urls[2]+ep.path, sr)
		if len(chs) != 2 {
			t.Fatalf("%s: streamed choices %v", ep.path, chs)
		}
		for i, ch := range a.Choices {
			s := chs[i]
			if s.text != ch.text() || !slices.Equal(s.ids, ch.TokenIDs) || s.finish != *ch.FinishReason {
				t.Fatalf("%s: streamed choice %d %q %v (%s), whole %q %v", ep.path, i, s.text, s.ids, s.finish, ch.text(), ch.TokenIDs)
			}
		}
		if usage == nil || *usage != *a.Usage {
			t.Fatalf("%s: streamed usage %+v, whole %+v", ep.path, usage, a.Usage)
		}
	}
}

// TestChoicesNode: the seeds the API derives are those a node request
// replays (engine.ChoiceSeed is the contract, not an API detail).
func TestChoicesNode(t *testing.T) {
	c := shared.get(t)
	a := postAnswer(t, c.urls[0]+"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 8, "temperature": 1,
		"seed": -3, "n": 3, "return_token_ids": true})
	minus3 := int64(-3)
	for i, ch := range a.Choices {
		seed := uint64(minus3)
		res, err := c.nodes[2].Complete(context.Background(), node.Request{Prompt: "Hello", MaxTokens: 8,
			Sampling: engine.SamplingParams{Temperature: 1, Seed: engine.ChoiceSeed(seed, i)}})
		if err != nil || !slices.Equal(res.Tokens, ch.TokenIDs) {
			t.Fatalf("choice %d: %v; the node with the derived seed: %v %v", i, ch.TokenIDs, res.Tokens, err)
		}
	}
}
