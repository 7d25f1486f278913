package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestNewSessionFrom: a session resumed from a copy of another's first n
// positions gives bit-identical logits and tokens to a cold one, on every
// stage of a split pipeline, for prefixes that end inside what the source
// computed (a partial block of it left over).
func TestNewSessionFrom(t *testing.T) {
	ctx := context.Background()
	p, err := OpenPipeline(genModel(t, testShapes["qwen2"]), []int{0, 1, 3, 4}, WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	first := []int32{5, 9, 2, 7, 1, 3, 3, 8, 4, 6, 11}    // turn 1, 11 positions
	second := append(first[:8:8], 12, 13, 14, 15, 16, 17) // shares 8
	sp := SamplingParams{Temperature: 0.7, Seed: 5}
	// run steps prompt then 8 sampled tokens, returning every step's
	// logits' bits: the sampler's draw depends on the absolute position,
	// so positions are counted from 0 whatever the session holds.
	run := func(ps *PipelineSession, prompt []int32, held int) string {
		hist := append([]int32(nil), second[:held]...)
		hist = append(hist, prompt...)
		var trace []uint32
		in := prompt
		for range 8 {
			logits, err := ps.Step(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range logits {
				trace = append(trace, math.Float32bits(l))
			}
			tok := Sample(logits, sp, len(hist), hist)
			hist = append(hist, tok)
			in = []int32{tok}
		}
		return fmt.Sprint(hist, trace)
	}
	src, err := p.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Step(ctx, first); err != nil {
		t.Fatal(err)
	}
	coldSess, err := p.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	want := run(coldSess, second, 0)
	coldSess.Close()
	for _, n := range []int{0, 4, 8} {
		warm := &PipelineSession{p: p}
		for i, st := range p.Stages {
			s, err := st.(PrefixStage).NewSessionFrom(src.sess[i], n, 64)
			if err != nil {
				t.Fatal(err)
			}
			if s.Len() != n {
				t.Fatalf("resumed session holds %d, want %d", s.Len(), n)
			}
			warm.sess = append(warm.sess, s)
		}
		if got := run(warm, second[n:], n); got != want {
			t.Fatalf("resumed at %d differs from a cold run", n)
		}
		warm.Close()
	}
	// The source is untouched by its copies: it continues as a cold run.
	toks, err := src.Generate(ctx, []int32{2}, 6, sp, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := p.NewSession(64)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if _, err := ref.Step(ctx, first); err != nil {
		t.Fatal(err)
	}
	again, _ := ref.Generate(ctx, []int32{2}, 6, sp, nil, nil)
	if fmt.Sprint(toks) != fmt.Sprint(again) {
		t.Fatalf("source after copies: %v, want %v", toks, again)
	}
	// Bad requests are errors, and leave the source usable.
	st := p.Stages[1].(PrefixStage)
	if _, err := st.NewSessionFrom(src.sess[1], src.Len()+1, 64); !errors.Is(err, ErrPosition) {
		t.Errorf("prefix beyond the source: %v", err)
	}
	if _, err := st.NewSessionFrom(src.sess[1], 8, 4); !errors.Is(err, ErrPosition) {
		t.Errorf("prefix beyond the capacity: %v", err)
	}
	if _, err := st.NewSessionFrom(src.sess[0], 4, 64); !errors.Is(err, ErrSession) {
		t.Errorf("prefix from another stage: %v", err)
	}
	closed, _ := p.Stages[1].NewSession(8)
	closed.Close()
	if _, err := st.NewSessionFrom(closed, 0, 64); !errors.Is(err, ErrSession) {
		t.Errorf("prefix from a closed session: %v", err)
	}
	src.Close()
}
