package engine

import (
	"math"
)

// MaxTopLogProbs bounds the alternatives LogProbs returns per token
// (OpenAI's top_logprobs is at most 20).
const MaxTopLogProbs = 20

// TokenLogProb is a token and its log-probability.
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// LogProbs returns the log-probability of token tok and the k most
// likely tokens (k is clamped to [0, MaxTopLogProbs] and to the
// vocabulary) under the log-softmax of the raw logits: before any
// repetition penalty, temperature, top-k or top-p, which change how a
// token is drawn but not the model's distribution (OpenAI's and vLLM's
// default definition). The top tokens are sorted by log-probability,
// highest first, lower ID first on ties (Sample's greedy order).
//
// It is a pure function of its arguments: the log-normalizer is summed
// in float64 in index order, so the same logits bits give the same
// results bits anywhere. A NaN logit counts as -Inf (Sample never draws
// it); when some logits are +Inf they share the probability equally.
func LogProbs(logits []float32, tok int32, k int) (float32, []TokenLogProb) {
	k = min(max(k, 0), MaxTopLogProbs, len(logits))
	if len(logits) == 0 {
		return float32(math.Inf(-1)), nil
	}
	val := func(i int) float64 {
		v := float64(logits[i])
		if v != v {
			return math.Inf(-1)
		}
		return v
	}
	m := math.Inf(-1)
	for i := range logits {
		m = max(m, val(i))
	}
	var lse float64 // the log of the partition function
	switch {
	case math.IsInf(m, 1):
		n := 0
		for i := range logits {
			if math.IsInf(val(i), 1) {
				n++
			}
		}
		lse = math.Log(float64(n))
	case math.IsInf(m, -1):
		lse = math.Inf(1) // nothing has any probability
	default:
		sum := 0.0
		for i := range logits {
			sum += math.Exp(val(i) - m)
		}
		lse = m + math.Log(sum)
	}
	lp := func(i int) float32 {
		v := val(i)
		switch {
		case math.IsInf(m, 1):
			if math.IsInf(v, 1) {
				return float32(-lse)
			}
			return float32(math.Inf(-1))
		case math.IsInf(lse, 1):
			return float32(math.Inf(-1))
		}
		return float32(min(v-lse, 0))
	}
	chosen := float32(math.Inf(-1))
	if tok >= 0 && int(tok) < len(logits) {
		chosen = lp(int(tok))
	}
	if k == 0 {
		return chosen, nil
	}
	// The k best by (logit, then lower ID): an insertion into a short
	// sorted list, one pass over the vocabulary.
	top := make([]int, 0, k)
	better := func(a, b int) bool { // a before b
		va, vb := val(a), val(b)
		if va != vb {
			return va > vb
		}
		return a < b
	}
	for i := range logits {
		if len(top) == k && !better(i, top[k-1]) {
			continue
		}
		if len(top) < k {
			top = append(top, i)
		} else {
			top[k-1] = i
		}
		for j := len(top) - 1; j > 0 && better(top[j], top[j-1]); j-- {
			top[j], top[j-1] = top[j-1], top[j]
		}
	}
	out := make([]TokenLogProb, len(top))
	for j, i := range top {
		out[j] = TokenLogProb{Token: int32(i), LogProb: lp(i)}
	}
	return chosen, out
}

// ChoiceSeed is the sampling seed of choice index of a request with n
// choices and the given seed: choice 0 keeps the seed (so n = 1 is
// unchanged, and choice 0 of any n is the single answer with that seed),
// and choice i > 0 gets a seed mixed from (seed, i), distinct from the
// others. A request with seed ChoiceSeed(s, i) alone replays choice i.
func ChoiceSeed(seed uint64, index int) uint64 {
	if index == 0 {
		return seed
	}
	s := seed ^ uint64(index)*0x9e3779b97f4a7c15
	splitmix(&s)
	return splitmix(&s)
}
