package engine

import (
	"slices"
)

// SamplingParams choose the next token from logits.
type SamplingParams struct {
	// Temperature 0 (or less) is greedy: the highest logit, lowest ID on ties.
	Temperature float32 `json:"temperature"`
	TopK        int     `json:"top_k,omitempty"` // 0: all tokens
	TopP        float32 `json:"top_p,omitempty"` // 0 or 1: no nucleus cut
	MinKeep     int     `json:"-"`               // tokens top-p always keeps (default 1)
	Seed        uint64  `json:"seed"`            // with the position, fixes the draw
	// RepeatPenalty > 1 divides positive (multiplies negative) logits of
	// the last RepeatLastN tokens, as llama.cpp does; 0 or 1: none.
	RepeatPenalty float32 `json:"repeat_penalty,omitempty"`
	RepeatLastN   int     `json:"repeat_last_n,omitempty"` // 0: 64
}

// Draw is the uniform number in [0, 1) used to sample position pos: a pure
// function of (seed, pos), so that any node that samples position pos after
// a failover draws the same number.
func Draw(seed uint64, pos int) float64 {
	s := seed ^ uint64(pos)*0xd1342543de82ef95
	splitmix(&s)
	return float64(splitmix(&s)>>11) / (1 << 53)
}

// Sample picks the token for position pos (the position the new token will
// occupy) from logits. history holds the tokens before it, for the
// repetition penalty. logits are not modified. The result depends only on
// the arguments.
func Sample(logits []float32, p SamplingParams, pos int, history []int32) int32 {
	if len(logits) == 0 {
		return -1
	}
	work := logits
	if p.RepeatPenalty > 0 && p.RepeatPenalty != 1 && len(history) > 0 {
		work = slices.Clone(logits)
		n := p.RepeatLastN
		if n <= 0 {
			n = 64
		}
		seen := map[int32]bool{}
		for _, t := range history[max(0, len(history)-n):] {
			if t < 0 || int(t) >= len(work) || seen[t] {
				continue
			}
			seen[t] = true
			if work[t] > 0 {
				work[t] /= p.RepeatPenalty
			} else {
				work[t] *= p.RepeatPenalty
			}
		}
	}
	if !(p.Temperature > 0) {
		best := 0
		for i, v := range work {
			if v > work[best] || (work[best] != work[best] && v == v) {
				best = i
			}
		}
		return int32(best)
	}
	type cand struct {
		id int32
		v  float32
	}
	cs := make([]cand, 0, len(work))
	for i, v := range work {
		if v == v { // NaN never wins
			cs = append(cs, cand{int32(i), float32(v / p.Temperature)})
		}
	}
	if len(cs) == 0 {
		return 0
	}
	// A total order (value, then ID) makes the result independent of the
	// sort algorithm.
	slices.SortFunc(cs, func(a, b cand) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return int(a.id - b.id)
	})
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	probs := make([]float64, len(cs))
	sum := 0.0
	for i, c := range cs {
		probs[i] = float64(expf(c.v - cs[0].v))
		sum += probs[i]
	}
	if p.TopP > 0 && p.TopP < 1 {
		keep := max(p.MinKeep, 1)
		acc := 0.0
		for i := range probs {
			acc += probs[i] / sum
			if acc >= float64(p.TopP) && i+1 >= keep {
				cs, probs = cs[:i+1], probs[:i+1]
				break
			}
		}
		sum = 0
		for _, v := range probs {
			sum += v
		}
	}
	u := Draw(p.Seed, pos) * sum
	acc := 0.0
	for i, v := range probs {
		acc += v
		if u < acc {
			return cs[i].id
		}
	}
	return cs[len(cs)-1].id
}
