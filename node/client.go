package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
	"github.com/stratanet/strata/routing"
)

// The in-process client API: what `strata generate --api`, tests and the
// HTTP layer drive generations through. Every node is an entry: Generate
// tokenizes, routes, and drives the generation on the swarm, replaying on
// a new path when a hop fails; the caller sees tokens as they come.

// Request is one generation. Exactly one of Prompt, Messages and Tokens
// is set.
type Request struct {
	// Model, if set, must be the served model's name (ModelInfo.Name).
	Model string
	// Prompt is raw text, tokenized with the model's BOS if it wants one.
	Prompt string
	// Messages are a chat, rendered with the model's chat template.
	Messages []engine.Message
	// Tools is the JSON array of tools offered to the chat template (nil:
	// none).
	Tools json.RawMessage
	// ChatVars are more variables for the chat template (OpenAI-style
	// servers' chat_template_kwargs, such as enable_thinking).
	ChatVars map[string]any
	// Keep names control tokens whose text the output keeps (a chat
	// template's tool-call markers, for the parser that reads them back;
	// see engine.ChatSyntax.Keep). Other control tokens print nothing.
	Keep []string
	// Tokens is a tokenized prompt.
	Tokens []int32
	// MaxTokens caps the generated tokens (0: the node's default, never
	// past the context). Negative is a bad request.
	MaxTokens int
	// Sampling chooses tokens; Temperature 0 is greedy. Seed is used as
	// given (0 is a seed like any other): a caller that wants a random
	// generation picks a random seed. The same seed gives the same tokens
	// on any path, replays included.
	Sampling engine.SamplingParams
	// Stop ends the generation before the first occurrence of any of
	// these strings in the output text (which then excludes it).
	Stop []string
	// LogProbs asks for each sampled token's log-probability and for the
	// TopLogProbs (0..MaxTopLogProbs) most likely tokens at its position,
	// in Delta.LogProbs and Result.LogProbs. They are of the model's own
	// distribution: the log-softmax of the raw logits the token was drawn
	// from, before the repetition penalty, temperature, top-k and top-p
	// (engine.LogProbs), computed by the last hop beside the sampler.
	// TopLogProbs without LogProbs is a bad request. Such a request is
	// never handed to another entry (the steal protocol carries no
	// log-probabilities), and every hop of its path must know the open
	// step's log-probability flag (an older node refuses the frame).
	LogProbs    bool
	TopLogProbs int
	// Grammar, when set, constrains the output to its language (a JSON
	// document valid against a schema, or a tool call): the last hop
	// masks every token that cannot continue it, and allows an end token
	// only once it is complete. A spec the grammar cannot express is
	// ErrBadRequest wrapping grammar.ErrUnsupported. Every hop of the
	// path must know the grammar step (an older node refuses the
	// frame); such a request is never handed to another entry.
	Grammar *grammar.Spec
	// Profile names the scheduling profile that routes the request (""
	// is the configured default). An unknown name is ErrBadRequest
	// wrapping routing.ErrUnknownProfile.
	Profile string
	// Follow, when set, is a running generation whose path this one
	// takes while that path is usable (every hop alive, serving its
	// layers on the committed map, with KV room, and not avoided);
	// otherwise it routes as usual. The choices of a request with n > 1
	// follow the first, so that their prefills resume the prompt's KV
	// from its hop sessions instead of recomputing it (a later hop that
	// does not hold what the first resumed costs a cold retry).
	Follow *Stream
	// QueueTimeout is how long the request may wait in the entry's
	// admission queue for a path with KV room: 0 for the node's default
	// (WithEntryQueue), negative not to wait at all.
	QueueTimeout time.Duration

	// stolen: a request handed over by a loaded entry (steal.go). It is
	// tried at once, ahead of this entry's own queue, and never queued:
	// the victim judged it the oldest.
	stolen bool
}

// Finish reasons, as OpenAI names them.
const (
	FinishStop   = "stop"   // an end token or a stop string
	FinishLength = "length" // MaxTokens reached
)

// Delta is what a stream delivers as tokens arrive.
type Delta struct {
	// Tokens are the tokens sampled since the previous delta (usually
	// one), end tokens included.
	Tokens []int32
	// Text is the new output text that is safe to show: whole UTF-8
	// characters only, and nothing that may turn out to begin a stop
	// string (held back until it is known not to). It may be empty.
	Text string
	// LogProbs holds, for each of Tokens, its log-probabilities when the
	// request asked for them (Request.LogProbs); nil otherwise.
	LogProbs []TokenLogProbs
}

// LogProb is a token, its text and its log-probability (-Inf for a
// token the model gives no probability).
type LogProb struct {
	Token int32
	// Text is the token's bytes as the output prints them (possibly part
	// of a UTF-8 character); a control token's, which prints nothing,
	// is its own text (such as "<|eot_id|>").
	Text    []byte
	LogProb float32
}

// TokenLogProbs are a sampled token's log-probability and the most
// likely tokens at its position, most likely first (lower ID first on
// ties).
type TokenLogProbs struct {
	Token   int32
	Text    []byte // as LogProb.Text
	LogProb float32
	Top     []LogProb
}

// Usage counts tokens, as OpenAI reports them.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
}

// Result is a finished generation.
type Result struct {
	Text   string  // the output text, stop string excluded
	Tokens []int32 // every sampled token, end token included
	// LogProbs holds, for each of Tokens, its log-probabilities when the
	// request asked for them; nil otherwise.
	LogProbs     []TokenLogProbs
	FinishReason string // FinishStop or FinishLength
	// StopSequence is the stop string (of Request.Stop) that ended the
	// output; "" when an end token or MaxTokens did.
	StopSequence string
	Usage        Usage
	// Replays counts the times a hop failed and the generation went on
	// on a new path; ReplayLatency holds, for each, the time from noticing
	// the failure to the next token.
	Replays       int
	ReplayLatency []time.Duration
	// ReplayedAt holds, for each replay, the index in Tokens of the first
	// token the new path gave.
	ReplayedAt []int
	// Paths are the paths the generation used, in order.
	Paths []string
	// Scores are, for each of Paths, the router's score of the path as it
	// won: its estimated cost in seconds and that cost's split.
	Scores []PathScore
	// Profile is the scheduling profile that routed the generation.
	Profile string
	TTFT    time.Duration // to the first token
	Total   time.Duration
}

// PathScore is a routed path's winning score.
type PathScore struct {
	Cost  float64
	Terms routing.Breakdown
}

// Stream is a running generation.
type Stream struct {
	// path is the path of its current attempt (nil before the first, or
	// for a stolen request): what Request.Follow takes.
	path   atomic.Pointer[routing.Path]
	deltas chan Delta
	done   chan struct{}
	cancel context.CancelFunc
	prompt int
	res    Result
	err    error
}

// PromptTokens is the length of the tokenized prompt, known once
// Generate returns (Result's Usage says it again at the end).
func (s *Stream) PromptTokens() int { return s.prompt }

// Recv returns the next delta. After the last it returns io.EOF, or the
// error that ended the generation (ErrSessionLost, the context's error,
// ...): a stream never just stops.
func (s *Stream) Recv() (Delta, error) {
	if d, ok := <-s.deltas; ok {
		return d, nil
	}
	<-s.done
	if s.err != nil {
		return Delta{}, s.err
	}
	return Delta{}, io.EOF
}

// Result waits for the end of the generation and returns its outcome;
// deltas not received are dropped.
func (s *Stream) Result() (Result, error) {
	go func() {
		for range s.deltas { //nolint:revive // drain
		}
	}()
	<-s.done
	return s.res, s.err
}

// Close abandons the generation: the hops free its session.
func (s *Stream) Close() {
	s.cancel()
	go func() {
		for range s.deltas { //nolint:revive // drain
		}
	}()
}

// Complete runs a generation to its end.
func (n *Node) Complete(ctx context.Context, req Request) (Result, error) {
	s, err := n.Generate(ctx, req)
	if err != nil {
		return Result{}, err
	}
	return s.Result()
}

// validateSampling reports parameters no sampler can use.
func validateSampling(sp engine.SamplingParams) error {
	bad := func(v float32) bool { return math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) }
	switch {
	case bad(sp.Temperature) || sp.Temperature < 0:
		return fmt.Errorf("%w: temperature %v", ErrBadRequest, sp.Temperature)
	case bad(sp.TopP) || sp.TopP < 0 || sp.TopP > 1:
		return fmt.Errorf("%w: top_p %v outside [0, 1]", ErrBadRequest, sp.TopP)
	case sp.TopK < 0 || sp.MinKeep < 0 || sp.RepeatLastN < 0:
		return fmt.Errorf("%w: negative top_k, min_keep or repeat window", ErrBadRequest)
	case bad(sp.RepeatPenalty) || sp.RepeatPenalty < 0:
		return fmt.Errorf("%w: repeat penalty %v", ErrBadRequest, sp.RepeatPenalty)
	}
	return nil
}

// textState turns tokens into safe text deltas and finds stop strings.
type textState struct {
	tok     *engine.Tokenizer
	stop    []string
	full    []byte
	emitted int
	maxStop int
	keep    map[int32]bool // control tokens printed as their text
	matched string         // the stop string that ended the output
}

func newTextState(tok *engine.Tokenizer, stop, keep []string) *textState {
	t := &textState{tok: tok}
	for _, s := range keep {
		if id, ok := tok.SpecialID(s); ok {
			if t.keep == nil {
				t.keep = map[int32]bool{}
			}
			t.keep[id] = true
		}
	}
	for _, s := range stop {
		if s != "" {
			t.stop = append(t.stop, s)
			t.maxStop = max(t.maxStop, len(s))
		}
	}
	return t
}

// add takes one token; it returns the new safe text and whether a stop
// string ended the output.
func (t *textState) add(id int32) (string, bool) {
	if t.tok.IsEnd(id) {
		return "", false
	}
	if t.keep[id] {
		t.full = append(t.full, t.tok.Token(id)...)
	} else {
		t.full = append(t.full, t.tok.Piece(id)...)
	}
	if len(t.stop) > 0 {
		from := max(0, t.emitted-t.maxStop+1)
		cut, matched := -1, ""
		for _, s := range t.stop {
			if i := bytes.Index(t.full[from:], []byte(s)); i >= 0 && (cut < 0 || from+i < cut) {
				cut, matched = from+i, s
			}
		}
		if cut >= 0 {
			t.full = t.full[:cut]
			t.matched = matched
			return t.flush(), true
		}
	}
	safe := len(t.full)
	// Hold back a tail that may begin a stop string.
	for _, s := range t.stop {
		for k := min(len(s)-1, safe-t.emitted); k > 0; k-- {
			if bytes.HasSuffix(t.full[:safe], []byte(s[:k])) {
				safe -= k
				break
			}
		}
	}
	// Hold back an unfinished UTF-8 character.
	for i := safe - 1; i >= t.emitted && i >= safe-utf8.UTFMax; i-- {
		if utf8.RuneStart(t.full[i]) {
			if !utf8.FullRune(t.full[i:safe]) {
				safe = i
			}
			break
		}
	}
	out := string(t.full[t.emitted:safe])
	t.emitted = safe
	return out, false
}

// flush returns whatever is held back.
func (t *textState) flush() string {
	out := string(t.full[t.emitted:])
	t.emitted = len(t.full)
	return out
}
