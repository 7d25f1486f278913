package engine

import (
	"context"
	"testing"
)

// TestBatchInvariance: a session's logits are the same bits whether it
// runs alone at one thread, as one of a batch of 16 sessions (prefills of
// other lengths beside it, then decodes: token tiles of 4 and of 1 mixed
// differently), at 2 or 3 threads (other row cuts), or token by token.
// It fails if a kernel's sums depend on the tile a token lands in or on
// the thread split.
func TestBatchInvariance(t *testing.T) {
	base := GenConfig{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 300, Seed: 31}
	types := []struct {
		name string
		dt   DType
		mix  string
		arch string // "": base's llama
	}{{"q4_k_m", 0, "q4_k_m", ""}, {"q4_k", Q4_K, "", ""}, {"q5_k_m", 0, "q5_k_m", ""}, {"q6_k", Q6_K, "", ""}, {"q8_0", Q8_0, "", ""}, {"f16", F16, "", ""},
		// gemma: sliding windows shorter than the prompt, GELU's table,
		// gemma2's soft caps.
		{"gemma3-q4_k_m", 0, "q4_k_m", "gemma3"}, {"gemma3-f32", F32, "", "gemma3"}, {"gemma2-q8_0", Q8_0, "", "gemma2"}}
	for _, ty := range types {
		t.Run(ty.name, func(t *testing.T) {
			c := base
			c.DType, c.Mix = ty.dt, ty.mix
			if ty.arch != "" {
				c.Arch, c.SlidingWindow = ty.arch, 3
				if ty.arch == "gemma3" {
					c.Layers = 6 // five local layers, then a global one
				}
			}
			if ty.mix != "" {
				c.DType = F32
			}
			path := genModel(t, c)
			prompt := []int32{3, 1, 4, 1, 5, 9, 2}
			decode := []int32{6, 5, 3}
			alone := sessionLogits(t, path, 1, prompt, decode, 0, false)
			for _, threads := range []int{1, 2, 3} {
				for _, slot := range []int{0, 5, 15} {
					got := sessionLogits(t, path, threads, prompt, decode, slot, true)
					for i := range alone {
						if !sameBits(alone[i], got[i]) {
							t.Fatalf("%d threads, slot %d of 16, step %d: logits differ from the session alone", threads, slot, i)
						}
					}
				}
			}
			stepwise := sessionLogits(t, path, 2, nil, append(append([]int32(nil), prompt...), decode...), 0, false)
			for i := range decode {
				if !sameBits(alone[1+i], stepwise[len(prompt)+i]) {
					t.Fatalf("decode %d: logits differ after a token-by-token prefill", i)
				}
			}
		})
	}
}

// sessionLogits runs prompt (as one prefill, if any) then decode one token
// a step for one session, alone or in slot of a batch of 16 whose other
// sessions prefill 1 to 15 tokens of their own and then decode beside it;
// it returns the session's logits after each step.
func sessionLogits(t *testing.T, path string, threads int, prompt, decode []int32, slot int, batch bool) [][]float32 {
	t.Helper()
	s, err := Open(path, WithThreads(threads))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 1
	if batch {
		n = 16
	}
	steps := make([]Step, n)
	for i := range steps {
		ss, err := s.NewSession(64)
		if err != nil {
			t.Fatal(err)
		}
		steps[i] = Step{Session: ss, Tokens: []int32{int32(10 + i)}}
		for j := 0; j < i%15; j++ {
			steps[i].Tokens = append(steps[i].Tokens, int32(20+i*j%200))
		}
	}
	var out [][]float32
	inputs := append([][]int32{}, prompt)
	if prompt == nil {
		inputs = nil
	}
	for _, tok := range decode {
		inputs = append(inputs, []int32{tok})
	}
	for _, in := range inputs {
		steps[slot].Tokens = in
		for i := range steps {
			steps[i].Pos = steps[i].Session.Len()
		}
		outs, err := s.ForwardBatch(context.Background(), steps)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, outs[slot].Logits)
		for i := range steps {
			if i != slot {
				steps[i].Tokens = []int32{Sample(outs[i].Logits, SamplingParams{}, 0, nil)}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no steps")
	}
	return out
}
