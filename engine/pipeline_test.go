package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

func TestPipeline(t *testing.T) {
	for _, name := range []string{"qwen2", "phi3.5-longrope"} {
		t.Run(name, func(t *testing.T) { testPipeline(t, testShapes[name]) })
	}
}

func testPipeline(t *testing.T, c GenConfig) {
	path := genModel(t, c)
	ctx := context.Background()
	gen := func(cuts []int) string {
		p, err := OpenPipeline(path, cuts, WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ps, err := p.NewSession(64)
		if err != nil {
			t.Fatal(err)
		}
		toks, err := ps.Generate(ctx, []int32{1, 2, 3}, 20, SamplingParams{Temperature: 0.7, Seed: 3}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(toks)
	}
	want := gen(nil)
	cuts, err := ParseStages("0:1,1:3,3:4")
	if err != nil || fmt.Sprint(cuts) != "[0 1 3 4]" {
		t.Fatalf("ParseStages: %v %v", cuts, err)
	}
	if got := gen(cuts); got != want {
		t.Fatalf("split pipeline %s, want %s", got, want)
	}
	for _, bad := range []string{"", "1:4", "0:2,3:4", "0:2,2:2", "x"} {
		if _, err := ParseStages(bad); !errors.Is(err, ErrRange) {
			t.Errorf("ParseStages(%q): %v", bad, err)
		}
	}
	if _, err := OpenPipeline(path, []int{0, 2}); !errors.Is(err, ErrRange) {
		t.Errorf("pipeline not reaching the end: %v", err)
	}
	// Stages of different models do not chain.
	a, _ := Open(path, WithRange(0, 2))
	defer a.Close()
	c2 := c
	c2.Seed++
	b, _ := Open(genModel(t, c2), WithRange(2, 4))
	defer b.Close()
	if _, err := NewPipeline(a, b); !errors.Is(err, ErrRange) {
		t.Errorf("mixed models: %v", err)
	}
	// Simulated stages chain through the same helper.
	spec, _ := layers.Model("llama-3-8b")
	hw, _ := layers.Device("h100")
	var sims []Stage
	for _, r := range [][2]int{{0, 10}, {10, 32}} {
		s, err := NewSimStage(spec, hw, WithRange(r[0], r[1]), WithSimSleep(func(context.Context, time.Duration) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		sims = append(sims, s)
	}
	p, err := NewPipeline(sims...)
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := p.NewSession(16)
	if toks, err := ps.Generate(ctx, []int32{1}, 3, SamplingParams{}, nil, nil); err != nil || len(toks) != 3 {
		t.Fatalf("simulated pipeline: %v %v", toks, err)
	}
}
