package engine

import (
	"math"
	"testing"
)

func TestSampleDeterministic(t *testing.T) {
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 3
	}
	p := SamplingParams{Temperature: 1, TopK: 100, TopP: 0.9, Seed: 42, RepeatPenalty: 1.3}
	hist := []int32{5, 6, 7}
	seen := map[int32]bool{}
	for pos := 0; pos < 200; pos++ {
		a := Sample(logits, p, pos, hist)
		if b := Sample(logits, p, pos, hist); a != b {
			t.Fatalf("pos %d: %d then %d", pos, a, b)
		}
		seen[a] = true
	}
	if len(seen) < 10 {
		t.Errorf("only %d distinct tokens over 200 draws", len(seen))
	}
	if Draw(1, 5) != Draw(1, 5) || Draw(1, 5) == Draw(2, 5) || Draw(1, 5) == Draw(1, 6) {
		t.Error("draw is not a function of (seed, pos)")
	}
}

func TestSampleRules(t *testing.T) {
	logits := []float32{1, 5, 5, 2, float32(math.NaN())}
	if got := Sample(logits, SamplingParams{}, 0, nil); got != 1 {
		t.Errorf("greedy picks the lowest ID on ties: %d", got)
	}
	if got := Sample(logits, SamplingParams{RepeatPenalty: 10}, 0, []int32{1}); got != 2 {
		t.Errorf("repeat penalty: %d", got)
	}
	for pos := 0; pos < 50; pos++ {
		if got := Sample(logits, SamplingParams{Temperature: 1, TopK: 2, Seed: 9}, pos, nil); got != 1 && got != 2 {
			t.Fatalf("top-k 2 gave %d", got)
		}
		if got := Sample([]float32{10, 0, 0, 0}, SamplingParams{Temperature: 1, TopP: 0.5, Seed: 9}, pos, nil); got != 0 {
			t.Fatalf("top-p gave %d", got)
		}
	}
	// Low temperature concentrates on the best token.
	n := 0
	for pos := 0; pos < 100; pos++ {
		if Sample([]float32{1, 2, 3}, SamplingParams{Temperature: 0.05, Seed: 3}, pos, nil) == 2 {
			n++
		}
	}
	if n < 99 {
		t.Errorf("temperature 0.05 chose the best token %d/100 times", n)
	}
	if expf(0) != 1 || expf(-200) != 0 || !math.IsInf(float64(expf(100)), 1) {
		t.Error("expf limits")
	}
	for x := float32(-87); x < 88; x += 0.173 {
		want := math.Exp(float64(x))
		if got := float64(expf(x)); math.Abs(got-want) > 3e-7*want {
			t.Fatalf("expf(%v) = %v, want %v", x, got, want)
		}
	}
}
