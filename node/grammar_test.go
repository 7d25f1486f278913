package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/grammar"
)

// gramSpec is a schema the random test model must follow: bounded
// strings, so that a document ends within the test's token budget.
var gramSpec = &grammar.Spec{Schema: json.RawMessage(`{"type": "object", "properties": {
	"name": {"type": "string", "maxLength": 4},
	"n": {"type": "integer"},
	"ok": {"type": "boolean"},
	"tags": {"type": "array", "items": {"enum": ["x", "y", null]}, "maxItems": 3}
}, "required": ["name", "n", "ok", "tags"], "additionalProperties": false}`)}

// referenceConstrained is the single-process run of a constrained
// generation: the engine's own pipeline, the grammar's mask, Sample.
func referenceConstrained(t testing.TB, prompt string, maxTokens int, sp engine.SamplingParams, spec *grammar.Spec) []int32 {
	t.Helper()
	path := testModel(t)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	g, err := grammar.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := grammar.NewConstraint(g, grammar.TokenizerVocab(tok, spec.Keep))
	ids := tok.Encode(prompt, true, false)
	s, err := p.NewSession(len(ids) + maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hist := slices.Clone(ids)
	logits, err := s.Step(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	for len(out) < maxTokens {
		masked, err := c.Apply(logits)
		if err != nil {
			t.Fatal(err)
		}
		id := engine.Sample(masked, sp, len(hist), hist)
		hist, out = append(hist, id), append(out, id)
		if tok.IsEnd(id) || len(out) == maxTokens {
			break
		}
		if err := c.Accept(id); err != nil {
			t.Fatal(err)
		}
		if logits, err = s.Step(context.Background(), []int32{id}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGenerateConstrained: a random-weight model's constrained output on
// a two-hop path is, token for token, the single-process run's, and a
// document of the schema; an unsupported spec is a bad request.
func TestGenerateConstrained(t *testing.T) {
	c := fourNodes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := c.all()[0]
	const maxTokens = 96
	docs := 0
	for i, sp := range []engine.SamplingParams{{}, {Temperature: 1, Seed: 3}, {Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: 5, RepeatPenalty: 1.3}} {
		prompt := []string{"Once upon a time", "The cat", "JSON:"}[i]
		res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sp, Grammar: gramSpec})
		if err != nil {
			t.Fatal(err)
		}
		want := referenceConstrained(t, prompt, maxTokens, sp, gramSpec)
		if !slices.Equal(res.Tokens, want) {
			t.Fatalf("%+v:\n swarm %v\nsingle %v", sp, res.Tokens, want)
		}
		t.Logf("%+v: %q (%s)", sp, res.Text, res.FinishReason)
		if res.FinishReason != FinishStop {
			continue
		}
		var doc struct {
			Name *string `json:"name"`
			N    *int64  `json:"n"`
			OK   *bool   `json:"ok"`
			Tags []any   `json:"tags"`
		}
		if err := json.Unmarshal([]byte(res.Text), &doc); err != nil || doc.Name == nil || doc.N == nil || doc.OK == nil || doc.Tags == nil {
			t.Fatalf("%q: %v", res.Text, err)
		}
		docs++
	}
	if docs == 0 {
		t.Fatal("no generation finished its document")
	}
	bad := &grammar.Spec{Schema: json.RawMessage(`{"type": "string", "pattern": "a"}`)}
	if _, err := n.Generate(ctx, Request{Prompt: "x", Grammar: bad}); !errors.Is(err, ErrBadRequest) || !errors.Is(err, grammar.ErrUnsupported) {
		t.Fatalf("unsupported schema: %v", err)
	}
	// A grammar too ambiguous to sample with: the last hop says so
	// (CodeGrammar), the entry's own matcher agrees, and the request is
	// a bad request, not a failure replayed on other hops.
	var alts []string
	for i := range 300 {
		alts = append(alts, fmt.Sprintf(`{"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"const": %d}}, "required": ["a", "b"]}`, i))
	}
	amb := &grammar.Spec{Schema: json.RawMessage(`{"anyOf": [` + strings.Join(alts, ",") + `]}`)}
	res, err := n.Complete(ctx, Request{Prompt: "x", MaxTokens: 8, Grammar: amb})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "parses alive") || res.Replays != 0 {
		t.Fatalf("an ambiguous grammar: %v (%d replays)", err, res.Replays)
	}
}

// TestGramCheck: the entry refuses a token the grammar does not allow
// (a last hop that lies or errs is blamed), an end token before the
// document is complete, and follows a rewound output.
func TestGramCheck(t *testing.T) {
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := grammar.CompileCached(gramSpec.Encode())
	if err != nil {
		t.Fatal(err)
	}
	gen := &generation{gramG: g, gramV: grammar.TokenizerVocab(tok, nil)}
	enc := func(s string) []int32 { return tok.Encode(s, false, false) }
	piece := func(s string) int32 { // the token whose bytes are s
		for id := range int32(tok.Vocab()) {
			if string(tok.Piece(id)) == s {
				return id
			}
		}
		t.Fatalf("no token %q", s)
		return -1
	}
	for _, id := range enc(`{"name": "ab", "n": 1`) {
		if why := gen.gramCheck(id); why != "" {
			t.Fatalf("token %d: %s", id, why)
		}
		gen.out = append(gen.out, id)
	}
	if why := gen.gramCheck(piece("}")); why == "" {
		t.Fatal("a closing brace before the required members passed")
	}
	if why := gen.gramCheck(tok.EOS()); why == "" {
		t.Fatal("an end token before the document is complete passed")
	}
	k := 1 // a rewind to just after "{"
	for strings.TrimSpace(tok.Decode(gen.out[:k])) != "{" {
		k++
	}
	gen.out = gen.out[:k]
	if why := gen.gramCheck(piece(`"`)); why != "" || gen.gramLen != k+1 {
		t.Fatalf("after a rewind: %q, %d consumed", why, gen.gramLen)
	}
	if why := gen.gramStuck(); why != "" {
		t.Fatalf("stuck: %s", why)
	}
}
