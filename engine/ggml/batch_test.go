package ggml

import (
	"context"
	"math"
	"testing"

	"github.com/stratanet/strata/engine"
)

// runSeqs runs several sequences through the stages in order: each
// sequence's prompt as one prefill, then its decode tokens one per step.
// Batched, each step of all sequences is one ForwardBatch per stage (the
// prefills of different lengths together, then the decodes); otherwise
// each sequence runs alone, one Forward at a time. It returns the logits
// of every sequence after each of its steps.
func runSeqs(t *testing.T, stages []engine.Stage, prompts, decode [][]int32, batched bool) [][][]float32 {
	t.Helper()
	ctx := context.Background()
	ss := make([][]engine.Session, len(stages)) // [stage][seq]
	for i, s := range stages {
		for range prompts {
			se, err := s.NewSession(64)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { se.Close() })
			ss[i] = append(ss[i], se)
		}
	}
	// step runs the given sequences' next tokens through all stages.
	step := func(seqs []int, tokens [][]int32) [][]float32 {
		steps := make([]engine.Step, len(seqs))
		for k, j := range seqs {
			steps[k] = engine.Step{Tokens: tokens[k], Pos: ss[0][j].Len()}
		}
		for i, s := range stages {
			for k, j := range seqs {
				steps[k].Session = ss[i][j]
			}
			outs, err := s.ForwardBatch(ctx, steps)
			if err != nil {
				t.Fatalf("stage %d: %v", i, err)
			}
			if outs[0].Logits != nil {
				logits := make([][]float32, len(outs))
				for k := range outs {
					logits[k] = outs[k].Logits
				}
				return logits
			}
			for k := range steps {
				steps[k] = engine.Step{Hidden: outs[k].Hidden, Pos: steps[k].Pos}
			}
		}
		t.Fatal("no stage returned logits")
		return nil
	}
	all := make([][][]float32, len(prompts))
	if batched {
		seqs := make([]int, len(prompts))
		for j := range seqs {
			seqs[j] = j
		}
		for k, l := range step(seqs, prompts) {
			all[k] = append(all[k], l)
		}
		for d := range decode[0] {
			toks := make([][]int32, len(prompts))
			for j := range toks {
				toks[j] = decode[j][d : d+1]
			}
			for k, l := range step(seqs, toks) {
				all[k] = append(all[k], l)
			}
		}
		return all
	}
	for j := range prompts {
		all[j] = append(all[j], step([]int{j}, prompts[j:j+1])[0])
		for d := range decode[j] {
			all[j] = append(all[j], step([]int{j}, [][]int32{decode[j][d : d+1]})[0])
		}
	}
	return all
}

// batchSeqs is 16 sequences for the batch tests (issue 31's batch of
// 16; ggml picks its kernels by row count): prefills of 1 to 12 tokens,
// each followed by 3 decode tokens (all below the test shapes' smallest
// vocabulary, 512).
func batchSeqs() (prompts, decode [][]int32) {
	prompts = [][]int32{prompt, {5, 6, 7}, {300, 2, 9, 11, 13, 1, 0}, {42}}
	decode = [][]int32{{50, 51, 300}, {8, 9, 10}, {4, 3, 2}, {1, 1, 7}}
	for j := int32(len(prompts)); j < 16; j++ {
		p := make([]int32, 1+j*5%9)
		for k := range p {
			p[k] = (j*97 + int32(k)*31 + 7) % 512
		}
		prompts = append(prompts, p)
		decode = append(decode, []int32{j * 13 % 512, (j*29 + 5) % 512, (j*71 + 1) % 512})
	}
	return prompts, decode
}

// TestBatchMatchesAlone: 16 sessions stepped together through ForwardBatch
// (prefills of different lengths in one graph, then decodes of all of
// them in one graph, through one ggml stage and through two) get the
// logits each gets alone: on F32 within ggml's F32 rounding (the limit of
// TestAgreesWithEngine), on quantized files within the bound
// TestQuantizedAgreesWithEngine derives from the dequantized-F32 oracle
// (the batch quantizes the same activations, but ggml picks other kernels
// for more rows).
func TestBatchMatchesAlone(t *testing.T) {
	prompts, decode := batchSeqs()
	type tc struct {
		name  string
		c     engine.GenConfig
		path  func(t *testing.T) string
		quant bool
	}
	cases := []tc{
		{"llama-gqa/F32", shapes["llama-gqa"], func(t *testing.T) string { return gen(t, "llama-gqa", shapes["llama-gqa"], engine.F32) }, false},
		{"qwen3/F32", shapes["qwen3"], func(t *testing.T) string { return gen(t, "qwen3", shapes["qwen3"], engine.F32) }, false},
		// Windows and soft caps per session in one graph.
		{"gemma3/F32", shapes["gemma3"], func(t *testing.T) string { return gen(t, "gemma3", shapes["gemma3"], engine.F32) }, false},
		{"gemma2/F32", shapes["gemma2"], func(t *testing.T) string { return gen(t, "gemma2", shapes["gemma2"], engine.F32) }, false},
		// Latent attention (V of its own width, from K) and grouped
		// sigmoid routing per session in one graph.
		{"deepseek2/F32", shapes["deepseek2"], func(t *testing.T) string { return gen(t, "deepseek2", shapes["deepseek2"], engine.F32) }, false},
		{"llama-gqa/Q8_0", shapes["llama-gqa"], func(t *testing.T) string { return gen(t, "llama-gqa", shapes["llama-gqa"], engine.Q8_0) }, true},
		{"llama-gqa/Q4_K_M", kShapes["llama-gqa"], func(t *testing.T) string { return genMix(t, "llama-gqa", kShapes["llama-gqa"], "q4_k_m") }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			alone := runSeqs(t, []engine.Stage{open(t, path, WithThreads(2))}, prompts, decode, false)
			bound := f32Limit(c.c.Arch) // gemma's GELU: see f32Limit
			if c.quant {
				// ggml's distance on this file from engine.Local on the same
				// weights dequantized to F32, with the rule of
				// TestQuantizedAgreesWithEngine.
				ref := runSeqs(t, []engine.Stage{openLocal(t, dequantized(t, path))}, prompts, decode, false)
				dRef := 0.0
				for j := range ref {
					for i := range ref[j] {
						dRef = math.Max(dRef, relDist(ref[j][i], alone[j][i]))
					}
				}
				bound = math.Max(2*dRef, 1e-3)
				t.Logf("ggml alone is %.3g from the dequantized-F32 reference; bound %.3g", dRef, bound)
			}
			for _, layout := range []struct {
				name   string
				stages []engine.Stage
			}{
				{"one stage", []engine.Stage{open(t, path, WithThreads(2))}},
				{"two stages", []engine.Stage{open(t, path, WithRange(0, 1), WithThreads(2)), open(t, path, WithRange(1, c.c.Layers), WithThreads(2))}},
			} {
				got := runSeqs(t, layout.stages, prompts, decode, true)
				worst := 0.0
				for j := range alone {
					for i := range alone[j] {
						d := relDist(alone[j][i], got[j][i])
						worst = math.Max(worst, d)
						if !(d <= bound) {
							t.Errorf("%s: sequence %d step %d: batched logits %.3g from alone, bound %.3g", layout.name, j, i, d, bound)
						}
					}
				}
				t.Logf("%s: batched vs alone, largest relative distance %.3g (bound %.3g)", layout.name, worst, bound)
			}
		})
	}
}

// TestBatchRejects: a batch with a bad step fails whole, before any
// session advances; a session twice in one batch is refused.
func TestBatchRejects(t *testing.T) {
	path := gen(t, "llama-gqa", shapes["llama-gqa"], engine.F32)
	s := open(t, path, WithThreads(1))
	a, _ := s.NewSession(8)
	b, _ := s.NewSession(8)
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	for name, steps := range map[string][]engine.Step{
		"bad position": {{Session: a, Tokens: []int32{1}}, {Session: b, Pos: 3, Tokens: []int32{1}}},
		"same session": {{Session: a, Tokens: []int32{1}}, {Session: a, Tokens: []int32{2}}},
		"too long":     {{Session: a, Tokens: []int32{1}}, {Session: b, Tokens: make([]int32, 9)}},
		"bad token":    {{Session: a, Tokens: []int32{1}}, {Session: b, Tokens: []int32{-1}}},
	} {
		if _, err := s.ForwardBatch(ctx, steps); err == nil {
			t.Errorf("%s: no error", name)
		}
		if a.Len() != 0 || b.Len() != 0 {
			t.Fatalf("%s: sessions advanced to %d, %d", name, a.Len(), b.Len())
		}
	}
	if outs, err := s.ForwardBatch(ctx, []engine.Step{{Session: a, Tokens: []int32{1, 2}}, {Session: b, Tokens: []int32{3}}}); err != nil || len(outs) != 2 {
		t.Fatalf("a good batch: %d outputs, %v", len(outs), err)
	}
	if a.Len() != 2 || b.Len() != 1 {
		t.Errorf("after a good batch: %d, %d positions, want 2, 1", a.Len(), b.Len())
	}
}

// TestGraphReuse: decode steps of one shape (the same sessions, one row
// each, within one kvPad of cache) run the graph built for the first of
// them, batched or not; closing a session frees the graphs that use it.
func TestGraphReuse(t *testing.T) {
	path := gen(t, "llama-gqa", shapes["llama-gqa"], engine.F32)
	s := open(t, path, WithThreads(1))
	ctx := context.Background()
	a, _ := s.NewSession(32)
	b, _ := s.NewSession(32)
	defer b.Close()
	if _, err := s.ForwardBatch(ctx, []engine.Step{{Session: a, Tokens: prompt}, {Session: b, Tokens: prompt[:3]}}); err != nil {
		t.Fatal(err)
	}
	built := s.builds
	for i := range 6 {
		if _, err := s.Forward(ctx, engine.Step{Session: a, Pos: a.Len(), Tokens: []int32{int32(i)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ForwardBatch(ctx, []engine.Step{{Session: a, Pos: a.Len(), Tokens: []int32{1}}, {Session: b, Pos: b.Len(), Tokens: []int32{2}}}); err != nil {
			t.Fatal(err)
		}
	}
	if s.builds != built+2 {
		t.Errorf("12 decode steps of 2 shapes built %d graphs, want 2", s.builds-built)
	}
	n := len(s.graphs)
	a.Close()
	if n != 2 || len(s.graphs) != 0 {
		t.Errorf("%d graphs kept, %d after closing a session; want 2 (the decodes; prefills are not kept), then none (both use it)", n, len(s.graphs))
	}
}
