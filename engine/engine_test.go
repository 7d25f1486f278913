package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

// genModel writes a generated model into a temporary directory.
func genModel(t testing.TB, c GenConfig) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.gguf", c.Arch, c.Seed))
	if err := GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	return path
}

var testShapes = map[string]GenConfig{
	"llama-mha": {Arch: "llama", Layers: 4, Dim: 64, Heads: 4, KVHeads: 4, FFN: 160, Vocab: 300, Seed: 7},
	"llama-gqa": {Arch: "llama", Layers: 4, Dim: 64, Heads: 8, KVHeads: 2, FFN: 96, Vocab: 512, Seed: 8},
	"qwen2":     {Arch: "qwen2", Layers: 4, Dim: 96, Heads: 6, KVHeads: 2, FFN: 128, Vocab: 400, Seed: 9},
	"qwen3":     {Arch: "qwen3", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 24, FFN: 128, Vocab: 300, Seed: 12},
	"llama3.1":  {Arch: "llama", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 300, Seed: 13, RopeBase: 500000, RopeFreqs: true},
	// phi3: fused attn_qkv and gate+up tensors, NEOX RoPE; Phi-3.5's
	// LongRoPE factors and attention factor; a Q4_K_M mix (attn_qkv in
	// Q5_K) whose ffn_down rows of 384 fall back to Q5_0 and Q8_0.
	"phi3":            {Arch: "phi3", Layers: 4, Dim: 64, Heads: 4, KVHeads: 4, FFN: 96, Vocab: 320, Seed: 14},
	"phi3.5-longrope": {Arch: "phi3", Layers: 4, Dim: 64, Heads: 8, KVHeads: 2, FFN: 128, Vocab: 300, Seed: 15, LongRoPE: true},
	"phi3-q4_k_m":     {Arch: "phi3", Layers: 4, Dim: 256, Heads: 4, KVHeads: 4, FFN: 384, Vocab: 300, Seed: 16, Mix: "q4_k_m"},
	// Real files' mixes: K-quants with Q6_K layers, and (rows of 128)
	// the row-length fallbacks to Q5_1 and Q8_0.
	"llama-q4_k_m": {Arch: "llama", Layers: 4, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 320, Seed: 10, Mix: "q4_k_m"},
	"qwen2-q5_k_m": {Arch: "qwen2", Layers: 4, Dim: 128, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 300, Seed: 11, Mix: "q5_k_m"},
	// Mixtures of experts (moe.go): qwen3moe, 2 of 8 experts of width 32
	// beside a declared dense width; Mixtral-style llama, 2 of 4.
	"qwen3moe": {Arch: "qwen3moe", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 192, Vocab: 300, Seed: 17,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 32},
	"mixtral": {Arch: "llama", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, FFN: 64, Vocab: 300, Seed: 18, Experts: 4, ExpertsUsed: 2},
	// gpt-oss: sinks, biases, its router and activation, YaRN as the
	// released models have it, and a window of 4 on layers 0 and 2, which
	// the prompts outgrow.
	"gpt-oss": {Arch: "gpt-oss", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 32, FFN: 64, Vocab: 300, Seed: 19,
		Experts: 4, ExpertsUsed: 2, SlidingWindow: 4, Context: 131072, RopeBase: 150000,
		RopeScaling: "yarn", RopeScalingFactor: 32, RopeOrigContext: 4096},
	// gemma3: five local layers (a window of 5, shorter than the runs)
	// and a global one; gemma2: alternating windows and soft caps.
	"gemma3": {Arch: "gemma3", Layers: 6, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 128, Vocab: 300, Seed: 19, SlidingWindow: 5},
	"gemma2": {Arch: "gemma2", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 128, Vocab: 300, Seed: 20, SlidingWindow: 5},
	// deepseek2: latent attention (the cache holds the latent), a leading
	// dense layer, 8 experts in 4 groups, 2 kept, sigmoid routing with
	// exp_probs_b, a shared expert, YaRN.
	"deepseek2": {Arch: "deepseek2", Layers: 4, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Seed: 21, Experts: 8, ExpertsUsed: 3,
		ExpertFFN: 32, Context: 4096, RopeScaling: "yarn", RopeScalingFactor: 40,
		DeepSeek2: DeepSeek2Gen{QLoraRank: 32, KVLoraRank: 32, ExpertGroups: 4, GroupsUsed: 2}},
}

// TestPackedTypesDeterministic: for every packed type, a two-stage run at
// two goroutines gives a one-stage run's logits at one, bit for bit.
func TestPackedTypesDeterministic(t *testing.T) {
	for typ := range quantFormats {
		t.Run(typ.String(), func(t *testing.T) {
			c := GenConfig{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 300, Seed: 5, DType: typ}
			path := genModel(t, c)
			prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
			a := openPipeline(t, path, []int{0, 2}, 1, 32)
			b := openPipeline(t, path, []int{0, 1, 2}, 2, 32)
			if !sameBits(a.step(t, prompt), b.step(t, prompt)) {
				t.Fatal("split logits differ")
			}
			if !sameBits(a.step(t, []int32{7}), b.step(t, []int32{7})) {
				t.Fatal("split decode logits differ")
			}
		})
	}
}

// pipeline is a model split into in-process stages.
type pipeline struct {
	stages []*Local
	sess   []Session
}

func openPipeline(t testing.TB, path string, cuts []int, threads int, maxTokens int) *pipeline {
	t.Helper()
	p := &pipeline{}
	for i := 0; i+1 < len(cuts); i++ {
		s, err := Open(path, WithRange(cuts[i], cuts[i+1]), WithThreads(threads))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss, err := s.NewSession(maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		p.stages = append(p.stages, s)
		p.sess = append(p.sess, ss)
	}
	return p
}

// step runs tokens through every stage and returns the logits.
func (p *pipeline) step(t testing.TB, tokens []int32) []float32 {
	t.Helper()
	in := Step{Tokens: tokens}
	for i, s := range p.stages {
		in.Session, in.Pos = p.sess[i], p.sess[i].Len()
		out, err := s.Forward(context.Background(), in)
		if err != nil {
			t.Fatalf("stage %d: %v", i, err)
		}
		if out.Logits != nil {
			return out.Logits
		}
		in = Step{Hidden: out.Hidden}
	}
	t.Fatal("no logits")
	return nil
}

// generate prefills prompt and samples n tokens, returning every logits
// vector and the tokens.
func (p *pipeline) generate(t testing.TB, prompt []int32, n int, sp SamplingParams) ([][]float32, []int32) {
	var all [][]float32
	hist := append([]int32(nil), prompt...)
	logits := p.step(t, prompt)
	for i := 0; i < n; i++ {
		all = append(all, logits)
		tok := Sample(logits, sp, len(hist), hist)
		hist = append(hist, tok)
		if i+1 < n {
			logits = p.step(t, []int32{tok})
		}
	}
	return all, hist[len(prompt):]
}

// splits lists every way to cut [0, L) into 1..maxStages contiguous ranges.
func splits(L, maxStages int) [][]int {
	var out [][]int
	for mask := 0; mask < 1<<(L-1); mask++ {
		cuts := []int{0}
		for i := 1; i < L; i++ {
			if mask&(1<<(i-1)) != 0 {
				cuts = append(cuts, i)
			}
		}
		cuts = append(cuts, L)
		if len(cuts)-1 <= maxStages {
			out = append(out, cuts)
		}
	}
	return out
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestSplitBitIdentical is the invariant the swarm relies on: any split
// into 1–4 stages, at 1 or 2 goroutines, gives the single-stage run's
// logits bit for bit and the same 64 tokens.
func TestSplitBitIdentical(t *testing.T) {
	prompt := []int32{1, 17, 42, 99, 250, 3, 77}
	sp := SamplingParams{Temperature: 0.9, TopK: 50, TopP: 0.95, Seed: 1234}
	const n = 64
	for name, c := range testShapes {
		t.Run(name, func(t *testing.T) {
			path := genModel(t, c)
			ref := openPipeline(t, path, []int{0, c.Layers}, 1, 128)
			wantLogits, wantToks := ref.generate(t, prompt, n, sp)
			distinct := map[int32]bool{}
			for _, tok := range wantToks {
				distinct[tok] = true
			}
			if len(distinct) < 4 {
				t.Fatalf("degenerate reference generation %v", wantToks)
			}
			for _, cuts := range splits(c.Layers, 4) {
				for _, threads := range []int{1, 2} {
					p := openPipeline(t, path, cuts, threads, 128)
					gotLogits, gotToks := p.generate(t, prompt, n, sp)
					for i := range wantLogits {
						if !sameBits(gotLogits[i], wantLogits[i]) {
							t.Fatalf("cuts %v threads %d: logits differ at token %d", cuts, threads, i)
						}
					}
					if fmt.Sprint(gotToks) != fmt.Sprint(wantToks) {
						t.Fatalf("cuts %v threads %d: tokens %v, want %v", cuts, threads, gotToks, wantToks)
					}
				}
			}
		})
	}
}

// TestPrefillEqualsSteps: a prefill of n tokens leaves the same KV cache
// and gives the same logits as n single steps, which is what replay after
// a failure needs.
func TestPrefillEqualsSteps(t *testing.T) {
	for name, c := range testShapes {
		t.Run(name, func(t *testing.T) {
			path := genModel(t, c)
			prompt := []int32{5, 6, 7, 8, 9, 10, 11, 12, 13}
			a := openPipeline(t, path, []int{0, 2, c.Layers}, 2, 32)
			b := openPipeline(t, path, []int{0, 2, c.Layers}, 2, 32)
			la := a.step(t, prompt)
			var lb []float32
			for _, tok := range prompt {
				lb = b.step(t, []int32{tok})
			}
			if !sameBits(la, lb) {
				t.Fatal("prefill logits differ from stepwise")
			}
			if !sameBits(a.step(t, []int32{20}), b.step(t, []int32{20})) {
				t.Fatal("decode after prefill differs from decode after steps")
			}
		})
	}
}

// TestBatchedEqualsUnbatched: one ForwardBatch over several sessions gives
// each session's Forward bits.
func TestBatchedEqualsUnbatched(t *testing.T) {
	for name, c := range testShapes {
		for _, dt := range []DType{F32, Q8_0} {
			t.Run(fmt.Sprint(name, "/", dt), func(t *testing.T) {
				if dt == Q8_0 && c.Dim%32 != 0 {
					t.Skip()
				}
				c := c
				c.DType = dt
				path := genModel(t, c)
				s, err := Open(path, WithThreads(2))
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				prompts := [][]int32{{1, 2, 3}, {4, 5}, {9, 8, 7, 6, 5}}
				ctx := context.Background()
				var batched, single []Session
				var steps []Step
				for _, p := range prompts {
					a, _ := s.NewSession(16)
					b, _ := s.NewSession(16)
					batched, single = append(batched, a), append(single, b)
					steps = append(steps, Step{Session: a, Tokens: p})
				}
				for round := 0; round < 4; round++ {
					outs, err := s.ForwardBatch(ctx, steps)
					if err != nil {
						t.Fatal(err)
					}
					for i := range steps {
						one, err := s.Forward(ctx, Step{Session: single[i], Pos: steps[i].Pos, Tokens: steps[i].Tokens})
						if err != nil {
							t.Fatal(err)
						}
						if !sameBits(one.Logits, outs[i].Logits) {
							t.Fatalf("round %d session %d: batched logits differ", round, i)
						}
						next := Sample(one.Logits, SamplingParams{}, 0, nil)
						steps[i] = Step{Session: batched[i], Pos: batched[i].Len(), Tokens: []int32{next}}
					}
				}
			})
		}
	}
}

// TestDTypeTolerance: F16, BF16 and Q8_0 files of the same weights stay
// within a stated relative distance of F32 (max |Δlogit| / max |logit|).
func TestDTypeTolerance(t *testing.T) {
	tol := map[DType]float64{F16: 0.005, BF16: 0.04, Q8_0: 0.04}
	for name, c := range testShapes {
		if c.Dim%32 != 0 || c.FFN%32 != 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			prompt := []int32{1, 10, 20, 30, 40, 50}
			logits := map[DType][]float32{}
			for _, dt := range []DType{F32, F16, BF16, Q8_0} {
				c := c
				c.DType = dt
				p := openPipeline(t, genModel(t, c), []int{0, c.Layers}, 1, 16)
				logits[dt] = p.step(t, prompt)
			}
			ref := logits[F32]
			scale := 0.0
			for _, v := range ref {
				scale = math.Max(scale, math.Abs(float64(v)))
			}
			for dt, tl := range tol {
				d := 0.0
				for i, v := range logits[dt] {
					d = math.Max(d, math.Abs(float64(v-ref[i])))
				}
				t.Logf("%s: max relative deviation %.2e (tolerance %.0e)", dt, d/scale, tl)
				if d/scale > tl {
					t.Errorf("%s deviates %.3g from f32 (tolerance %g)", dt, d/scale, tl)
				}
			}
		})
	}
}

func TestSessionErrors(t *testing.T) {
	c := testShapes["llama-gqa"]
	path := genModel(t, c)
	s, err := Open(path, WithRange(0, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ss, _ := s.NewSession(4)
	if _, err := s.Forward(ctx, Step{Session: ss, Pos: 1, Tokens: []int32{1}}); !errors.Is(err, ErrPosition) {
		t.Errorf("wrong position: %v", err)
	}
	if _, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{int32(c.Vocab)}}); !errors.Is(err, ErrInput) {
		t.Errorf("token out of vocabulary: %v", err)
	}
	if _, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{1, 2, 3, 4, 5}}); !errors.Is(err, ErrContextFull) {
		t.Errorf("over capacity: %v", err)
	}
	if _, err := s.Forward(ctx, Step{Session: ss, Hidden: make([]float32, c.Dim)}); !errors.Is(err, ErrInput) {
		t.Errorf("hidden to first stage: %v", err)
	}
	out, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{1, 2}})
	if err != nil || len(out.Hidden) != 2*c.Dim || out.Logits != nil {
		t.Fatalf("forward: %v, %d hidden", err, len(out.Hidden))
	}
	if err := ss.Truncate(1); err != nil || ss.Len() != 1 {
		t.Fatalf("truncate: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Forward(cctx, Step{Session: ss, Pos: 1, Tokens: []int32{3}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if ss.Len() != 1 {
		t.Errorf("cancelled step moved the session to %d", ss.Len())
	}
	s2, err := Open(path, WithRange(2, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Forward(ctx, Step{Session: ss, Pos: 1, Hidden: make([]float32, c.Dim)}); !errors.Is(err, ErrSession) {
		t.Errorf("foreign session: %v", err)
	}
	ss2, _ := s2.NewSession(4)
	if _, err := s2.Forward(ctx, Step{Session: ss2, Hidden: make([]float32, c.Dim+1)}); !errors.Is(err, ErrShape) {
		t.Errorf("bad hidden length: %v", err)
	}
	ss.Close()
	if _, err := s.Forward(ctx, Step{Session: ss, Pos: 1, Tokens: []int32{3}}); !errors.Is(err, ErrSession) {
		t.Errorf("closed session: %v", err)
	}
	if _, err := Open(path, WithRange(3, 3)); !errors.Is(err, ErrRange) {
		t.Errorf("empty range: %v", err)
	}
	if _, err := Open(path, WithRange(0, 5)); !errors.Is(err, ErrRange) {
		t.Errorf("range past the end: %v", err)
	}
	info := s.Info()
	if info.KVBytesPerToken != int64(2*2*c.KVHeads*(c.Dim/c.Heads)*4) || info.WeightBytes <= 0 || !info.First() || info.Last() {
		t.Errorf("info %+v", info)
	}
}

// TestConcurrentSessions: goroutines stepping their own sessions on one
// stage get the tokens a lone session gets (no session sees another's KV).
func TestConcurrentSessions(t *testing.T) {
	c := testShapes["llama-gqa"]
	path := genModel(t, c)
	s, err := Open(path, WithThreads(2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(seed int32) []int32 {
		ss, err := s.NewSession(32)
		if err != nil {
			t.Error(err)
			return nil
		}
		defer ss.Close()
		in := []int32{seed, seed + 1}
		var out []int32
		for i := 0; i < 10; i++ {
			o, err := s.Forward(context.Background(), Step{Session: ss, Pos: ss.Len(), Tokens: in})
			if err != nil {
				t.Error(err)
				return nil
			}
			tok := Sample(o.Logits, SamplingParams{}, 0, nil)
			out, in = append(out, tok), []int32{tok}
		}
		return out
	}
	want := map[int32]string{}
	for seed := int32(3); seed < 7; seed++ {
		want[seed] = fmt.Sprint(run(seed))
	}
	done := make(chan [2]string)
	for seed := int32(3); seed < 7; seed++ {
		go func() { done <- [2]string{want[seed], fmt.Sprint(run(seed))} }()
	}
	for i := 0; i < 4; i++ {
		if r := <-done; r[0] != r[1] {
			t.Errorf("concurrent run %s, alone %s", r[1], r[0])
		}
	}
}

// TestStepBytes: a decode step reads every weight but the token
// embeddings, of which one row, unless the output matrix is the same
// table; a stage without the embeddings reads all it holds.
func TestStepBytes(t *testing.T) {
	for _, tied := range []bool{false, true} {
		c := testShapes["llama-gqa"]
		c.Tied = tied
		path := genModel(t, c)
		for _, r := range [][2]int{{0, 4}, {1, 3}} {
			s, err := Open(path, WithRange(r[0], r[1]))
			if err != nil {
				t.Fatal(err)
			}
			in := s.Info()
			want := in.WeightBytes
			if !tied && r[0] == 0 {
				want -= int64(c.Vocab-1) * int64(c.Dim) * 4 // F32 rows
			}
			if in.StepBytes != want {
				t.Errorf("tied %v, layers %v: %d step bytes of %d, want %d", tied, r, in.StepBytes, in.WeightBytes, want)
			}
			s.Close()
		}
	}
}
