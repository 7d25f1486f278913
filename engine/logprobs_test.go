package engine

import (
	"math"
	"slices"
	"sort"
	"testing"
)

// refLogProbs is the textbook log-softmax in float64, with a stable
// sort for the order.
func refLogProbs(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = math.Log(math.Exp(float64(v)-m) / sum)
	}
	return out
}

func TestLogProbsReference(t *testing.T) {
	for _, n := range []int{1, 2, 7, 1000, 32000} {
		logits := make([]float32, n)
		s := uint64(n)
		for i := range logits {
			logits[i] = float32(float64(splitmix(&s)>>11)/(1<<53)*30 - 15)
		}
		if n > 10 {
			logits[3] = logits[5] // a tie: the lower ID first
		}
		ref := refLogProbs(logits)
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
		for _, k := range []int{0, 1, 5, 20, 50} {
			for _, tok := range []int32{0, int32(n - 1), int32(order[0])} {
				chosen, top := LogProbs(logits, tok, k)
				if d := math.Abs(float64(chosen) - ref[tok]); d > 1e-5*max(1, math.Abs(ref[tok])) {
					t.Fatalf("n %d: token %d: %v, reference %v", n, tok, chosen, ref[tok])
				}
				if want := min(k, MaxTopLogProbs, n); len(top) != want {
					t.Fatalf("n %d k %d: %d top tokens, want %d", n, k, len(top), want)
				}
				for j, tl := range top {
					if int(tl.Token) != order[j] {
						t.Fatalf("n %d: top %d is %d, want %d", n, j, tl.Token, order[j])
					}
					if d := math.Abs(float64(tl.LogProb) - ref[tl.Token]); d > 1e-5*max(1, math.Abs(ref[tl.Token])) {
						t.Fatalf("n %d: top %d: %v, reference %v", n, j, tl.LogProb, ref[tl.Token])
					}
					if tl.LogProb > 0 {
						t.Fatalf("positive log-probability %v", tl.LogProb)
					}
				}
				// Greedy picks the top token, whose log-probability is the
				// first listed.
				if k > 0 && Sample(logits, SamplingParams{}, 0, nil) != top[0].Token {
					t.Fatalf("greedy disagrees with the top token")
				}
			}
		}
		// Probabilities sum to one.
		sum := 0.0
		for i := range logits {
			lp, _ := LogProbs(logits, int32(i), 0)
			sum += math.Exp(float64(lp))
		}
		if math.Abs(sum-1) > 1e-4 {
			t.Fatalf("n %d: probabilities sum to %v", n, sum)
		}
	}
}

func TestLogProbsPure(t *testing.T) {
	logits := []float32{1, 5, 5, 2, float32(math.NaN()), float32(math.Inf(-1))}
	a, ta := LogProbs(logits, 2, 20)
	b, tb := LogProbs(slices.Clone(logits), 2, 20)
	if math.Float32bits(a) != math.Float32bits(b) || !slices.Equal(ta, tb) {
		t.Fatal("not a function of the logits")
	}
	if len(ta) != 6 || ta[0].Token != 1 || ta[1].Token != 2 || ta[0].LogProb != ta[1].LogProb {
		t.Fatalf("order: %+v", ta)
	}
	if nan, _ := LogProbs(logits, 4, 0); !math.IsInf(float64(nan), -1) {
		t.Fatalf("a NaN logit's log-probability is %v, want -Inf", nan)
	}
	if lp, _ := LogProbs(logits, 99, 0); !math.IsInf(float64(lp), -1) {
		t.Fatalf("a token outside the vocabulary: %v", lp)
	}
	inf := []float32{0, float32(math.Inf(1)), float32(math.Inf(1))}
	if lp, _ := LogProbs(inf, 1, 0); math.Abs(float64(lp)-math.Log(0.5)) > 1e-7 {
		t.Fatalf("two +Inf logits: %v", lp)
	}
	// Temperature and the other sampling knobs do not enter: the raw
	// distribution of the logits is what a logprob describes.
	if _, top := LogProbs(nil, 0, 5); top != nil {
		t.Fatal("empty logits gave top tokens")
	}
}

func TestChoiceSeed(t *testing.T) {
	if ChoiceSeed(42, 0) != 42 {
		t.Fatal("choice 0 must keep the request's seed")
	}
	seen := map[uint64]bool{}
	for _, seed := range []uint64{0, 1, 42, math.MaxUint64} {
		for i := range 8 {
			s := ChoiceSeed(seed, i)
			if s != ChoiceSeed(seed, i) {
				t.Fatal("not deterministic")
			}
			if i > 0 && seen[s] {
				t.Fatalf("seed %d choice %d repeats %d", seed, i, s)
			}
			seen[s] = true
		}
	}
}
