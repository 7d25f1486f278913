package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

// deepseek2Test is a small DeepSeek-V3-shaped model: 4 layers, the first
// dense, 8 experts in 4 groups of which 2 are kept, 3 used per token, one
// shared expert, sigmoid routing with a selection bias.
func deepseek2Test() GenConfig {
	return GenConfig{Arch: "deepseek2", Layers: 4, Dim: 128, Heads: 4, FFN: 256, Vocab: 300, Seed: 61,
		Experts: 8, ExpertsUsed: 3, ExpertFFN: 64,
		DeepSeek2: DeepSeek2Gen{ExpertGroups: 4, GroupsUsed: 2}}
}

// TestDeepSeek2BatchInvariance: a deepseek2 session's logits are the same
// bits alone, in a batch of 16, at 1–3 threads, and token by token; in
// the MLA layout, the older kv_b one, and quantised.
func TestDeepSeek2BatchInvariance(t *testing.T) {
	kvb := deepseek2Test()
	kvb.DeepSeek2.KVB = true
	v2 := deepseek2Test()
	v2.DeepSeek2 = DeepSeek2Gen{Softmax: true, WeightsScale: 1}
	yarn := deepseek2Test()
	yarn.RopeScaling, yarn.RopeScalingFactor = "yarn", 40
	dense := deepseek2Test()
	dense.Experts, dense.ExpertsUsed, dense.DeepSeek2 = 0, 0, DeepSeek2Gen{}
	// 24 heads on the one latent KV head: attention units of 16 and 8.
	wide := deepseek2Test()
	wide.Heads = 24
	cases := []struct {
		name string
		c    GenConfig
		dt   DType
		mix  string
	}{
		{"mla-f32", deepseek2Test(), F32, ""}, {"mla-q8_0", deepseek2Test(), Q8_0, ""}, {"mla-q4_k_m", deepseek2Test(), F32, "q4_k_m"},
		{"kv_b-f32", kvb, F32, ""}, {"softmax-f32", v2, F32, ""}, {"yarn-f32", yarn, F32, ""}, {"dense-f32", dense, F32, ""},
		{"24-heads-f32", wide, F32, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.DType, c.Mix = tc.dt, tc.mix
			path := genModel(t, c)
			prompt := []int32{3, 1, 4, 1, 5, 9, 2}
			decode := []int32{6, 5, 3}
			alone := sessionLogits(t, path, 1, prompt, decode, 0, false)
			for _, threads := range []int{1, 2, 3} {
				for _, slot := range []int{0, 7, 15} {
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

// TestDeepSeek2Split: stages cut inside the leading dense layers and the
// expert layers give the whole model's bits, prefill and decode.
func TestDeepSeek2Split(t *testing.T) {
	for _, mix := range []string{"", "q4_k_m"} {
		c := deepseek2Test()
		c.Mix = mix
		path := genModel(t, c)
		prompt := []int32{3, 1, 4, 1, 5, 9, 2, 6}
		whole := openPipeline(t, path, []int{0, 4}, 1, 32)
		split := openPipeline(t, path, []int{0, 1, 3, 4}, 2, 32)
		if !sameBits(whole.step(t, prompt), split.step(t, prompt)) {
			t.Fatalf("mix %q: split logits differ", mix)
		}
		for _, tok := range []int32{7, 8} {
			if !sameBits(whole.step(t, []int32{tok}), split.step(t, []int32{tok})) {
				t.Fatalf("mix %q: split decode logits differ", mix)
			}
		}
	}
}

// TestDeepSeek2Cache: with MLA a layer caches the latent and the RoPE
// part of K only (kv_lora_rank + RoPE dims per token); with attn_kv_b,
// every head's K and V.
func TestDeepSeek2Cache(t *testing.T) {
	c := deepseek2Test()
	s, err := Open(genModel(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hp := s.Info().HParams
	if want := int64(c.Layers) * int64(64+16) * 4; s.Info().KVBytesPerToken != want {
		t.Errorf("MLA: %d KV bytes per token, want %d (4 layers × (64 latent + 16 RoPE) × 4)", s.Info().KVBytesPerToken, want)
	}
	if !hp.MLA || hp.KVLoraRank != 64 || hp.RopeDims != 16 || hp.NopeDims != 32 || hp.VHeadDim != 32 || hp.QLoraRank != 64 {
		t.Errorf("MLA hyper-parameters %+v", hp)
	}
	if hp.ExpertGroups != 4 || hp.GroupsUsed != 2 || hp.ExpertGating != gatingSigmoid || !hp.ExpertWeightsNorm ||
		hp.ExpertWeightsScale != 2.5 || hp.SharedExperts != 1 || hp.LeadingDense != 1 {
		t.Errorf("routing hyper-parameters %+v", hp)
	}
	c.DeepSeek2.KVB = true
	s2, err := Open(genModel(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if want := int64(c.Layers) * int64(4*(32+16)+4*32) * 4; s2.Info().KVBytesPerToken != want {
		t.Errorf("kv_b: %d KV bytes per token, want %d", s2.Info().KVBytesPerToken, want)
	}
}

// TestDeepSeek2Errors: files llama.cpp would refuse, or that this engine
// does not run, are refused with the reason.
func TestDeepSeek2Errors(t *testing.T) {
	base := deepseek2Test()
	path := genModel(t, base)
	for name, tc := range map[string]struct {
		edit func([]KV) []KV
		want error
		msg  string
	}{
		"groups not dividing": {setKV("deepseek2.expert_group_count", uint32(3)), ErrCorrupt, "groups"},
		"all groups used":     {setKV("deepseek2.expert_group_used_count", uint32(4)), ErrCorrupt, "expert_group_used_count"},
		"gating 3":            {setKV("deepseek2.expert_gating_func", uint32(3)), ErrUnsupportedArch, "gating"},
		"no weights scale":    {setKV("deepseek2.expert_weights_scale", nil), ErrCorrupt, "expert_weights_scale"},
		"no kv lora":          {setKV("deepseek2.attention.kv_lora_rank", nil), ErrCorrupt, "kv_lora_rank"},
		"no shared experts":   {setKV("deepseek2.expert_shared_count", uint32(0)), ErrCorrupt, "expert_shared_count"},
		"mla key length":      {setKV("deepseek2.attention.key_length", uint32(70)), ErrShape, "key_length"},
		"temperature scale":   {setKV("deepseek2.attention.temperature_scale", float32(0.1)), ErrUnsupportedArch, "temperature"},
		"norm not bool":       {setKV("deepseek2.expert_weights_norm", uint32(1)), ErrCorrupt, "expert_weights_norm"},
		"rope over head":      {setKV("deepseek2.rope.dimension_count", uint32(48)), ErrShape, "non-RoPE"},
		"expert layers, no experts": {func(kvs []KV) []KV {
			return setKV("deepseek2.expert_count", uint32(0))(setKV("deepseek2.expert_used_count", uint32(0))(kvs))
		}, ErrCorrupt, "leading_dense_block_count must"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := rewriteModel(t, path, tc.edit, nil)
			_, err := Open(bad)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
}

// TestDeepSeek2GenErrors: shapes llama.cpp would refuse, or that the
// file's types cannot hold, are refused by the generator.
func TestDeepSeek2GenErrors(t *testing.T) {
	for name, edit := range map[string]func(*GenConfig){
		"groups not dividing":  func(c *GenConfig) { c.DeepSeek2.ExpertGroups = 3 },
		"all groups used":      func(c *GenConfig) { c.DeepSeek2.GroupsUsed = 4 },
		"groups used alone":    func(c *GenConfig) { c.DeepSeek2.ExpertGroups, c.DeepSeek2.GroupsUsed = 0, 2 },
		"all layers dense":     func(c *GenConfig) { c.DeepSeek2.LeadingDense = 4 },
		"no non-RoPE part":     func(c *GenConfig) { c.HeadDim = 16 },
		"nope not a block":     func(c *GenConfig) { c.HeadDim, c.DType = 40, Q8_0 },
		"mix for experts only": func(c *GenConfig) { c.Mix = "mxfp4_moe" },
		"linear scaling":       func(c *GenConfig) { c.RopeScaling, c.RopeScalingFactor = "linear", 4 },
		"tied":                 func(c *GenConfig) { c.Tied = true },
	} {
		t.Run(name, func(t *testing.T) {
			c := deepseek2Test()
			edit(&c)
			if err := Generate(io.Discard, c); !errors.Is(err, ErrShape) && !errors.Is(err, ErrUnsupportedType) {
				t.Errorf("got %v, want ErrShape or ErrUnsupportedType", err)
			}
		})
	}
}

// TestDeepSeek2Spec: the placement model of an MLA deepseek2 file
// counts each layer's parameters as the file holds them (but for
// exp_probs_b's one per expert, which package layers leaves out) and
// MLA's cache as the Go engine holds it.
func TestDeepSeek2Spec(t *testing.T) {
	c := deepseek2Test()
	path := genModel(t, c)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, fh, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	spec, err := f.ModelSpec()
	if err != nil {
		t.Fatal(err)
	}
	if !spec.MLA() {
		t.Fatal("the spec of an MLA file is not MLA")
	}
	for l := range c.Layers {
		file := 0.0
		for _, ti := range f.Tensors {
			if strings.HasPrefix(ti.Name, LayerPrefix(l)) {
				file += float64(ti.Elements())
			}
		}
		if got := spec.LayerParamsAt(l); math.Abs(got-file) > float64(c.Experts) {
			t.Errorf("layer %d: the spec counts %v parameters, the file holds %v", l, got, file)
		}
	}
	if got, want := spec.KVBytesPerToken()*float64(c.Layers), float64(s.Info().KVBytesPerToken); got != want {
		t.Errorf("MLA: spec %v KV bytes per token, engine %v", got, want)
	}
}

// TestDeepSeekRoute: sigmoid probabilities, the bias choosing only, the
// groups scored by their two best, weights renormalised and scaled;
// worked by hand.
func TestDeepSeekRoute(t *testing.T) {
	// Logits 0: every probability σ(0) = 1/2. With the bias the choice
	// values are 0.6, 0.5 | 0.5, 0.8: group 1 scores 1.3 over group 0's
	// 1.1 and is the one kept.
	bias := []float32{0.1, 0, 0, 0.3}
	for _, tc := range []struct {
		groups, used int
		want         string
	}{{2, 1, "[3 2]"}, {0, 0, "[3 0]"}} {
		d := &dsRouting{sigmoid: true, bias: bias, norm: true, scale: 2, groups: tc.groups, used: tc.used}
		if err := d.check(4, 2); err != nil {
			t.Fatal(err)
		}
		sel, wt := make([]int32, 2), make([]float32, 2)
		d.route(make([]float32, 4), 1, 4, 2, sel, wt, make([]float32, 4+tc.groups))
		if fmt.Sprint(sel) != tc.want {
			t.Errorf("%d groups: selected %v, want %s", tc.groups, sel, tc.want)
		}
		// The unbiased 1/2 and 1/2, renormalised to halves, times 2.
		if wt[0] != 1 || wt[1] != 1 {
			t.Errorf("%d groups: weights %v, want [1 1]", tc.groups, wt)
		}
	}
	// Unnormalised softmax weights (DeepSeek-V2): softmax of (ln 3, 0, 0,
	// 0) is (1/2, 1/6, 1/6, 1/6); the top 2 keep 1/2 and 1/6 (ties to the
	// lower index), times 1.5.
	d := &dsRouting{scale: 1.5}
	sel, wt := make([]int32, 2), make([]float32, 2)
	d.route([]float32{1.0986123, 0, 0, 0}, 1, 4, 2, sel, wt, make([]float32, 4))
	if fmt.Sprint(sel) != "[0 1]" || math.Abs(float64(wt[0])-0.75) > 1e-6 || math.Abs(float64(wt[1])-0.25) > 1e-6 {
		t.Errorf("softmax: selected %v weights %v, want [0 1] and [0.75 0.25]", sel, wt)
	}
	for _, bad := range []*dsRouting{{scale: 1, groups: 3, used: 1}, {scale: 1, groups: 2, used: 2}, {scale: 0}, {scale: 1, bias: []float32{1}}} {
		if err := bad.check(4, 2); !errors.Is(err, ErrShape) {
			t.Errorf("%+v: %v, want ErrShape", bad, err)
		}
	}
}

// TestDeepSeek2Slice: a slice file of layers [1, 3) (what a node fetches)
// gives the full file's hidden states for that range, bit for bit.
func TestDeepSeek2Slice(t *testing.T) {
	c := deepseek2Test()
	c.Mix = "q4_k_m"
	path := genModel(t, c)
	full, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fp := full.Info().Fingerprint
	full.Close()
	middle := func(name string) bool { return strings.HasPrefix(name, "blk.1.") || strings.HasPrefix(name, "blk.2.") }
	out := writeSlice(t, path, middle, KV{SliceKeyFingerprint, fp}, KV{SliceKeyLo, uint32(1)}, KV{SliceKeyHi, uint32(3)})
	in := make([]float32, 5*c.Dim)
	for i := range in {
		in[i] = float32(i%11)/4 - 1
	}
	var got [][]float32
	for _, open := range []func() (*Local, error){
		func() (*Local, error) { return Open(out, WithThreads(2)) },
		func() (*Local, error) { return Open(path, WithRange(1, 3), WithThreads(1)) },
	} {
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		ss, _ := s.NewSession(8)
		o, err := s.Forward(t.Context(), Step{Session: ss, Hidden: in})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o.Hidden)
	}
	if !sameBits(got[0], got[1]) {
		t.Fatal("the slice's hidden states differ from the full file's")
	}
}
