package engine

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

// ropeScalingFile is a generated model's bytes with the keys in set
// replaced or added.
func ropeScalingFile(t *testing.T, c GenConfig, set ...KV) []byte {
	t.Helper()
	kvs, ts, err := genParts(c)
	if err != nil {
		t.Fatal(err)
	}
next:
	for _, kv := range set {
		for i := range kvs {
			if kvs[i].Key == kv.Key {
				kvs[i] = kv
				continue next
			}
		}
		kvs = append(kvs, kv)
	}
	return writeParts(t, kvs, ts)
}

func readHParamsBytes(t *testing.T, b []byte) (HParams, error) {
	t.Helper()
	f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return ReadHParams(f)
}

// TestRopeScalingHParams: rope.scaling.* are read as llama.cpp reads them
// (its defaults, a factor without a type is linear, the original context
// defaulting to context_length), and every bad value is refused with the
// key named.
func TestRopeScalingHParams(t *testing.T) {
	c := GenConfig{Arch: "qwen3", Layers: 1, Dim: 64, Heads: 2, KVHeads: 1, FFN: 64, Vocab: 300, Context: 4096,
		RopeScaling: "yarn", RopeScalingFactor: 4, RopeOrigContext: 1024}
	h, err := readHParamsBytes(t, ropeScalingFile(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if h.RopeScaling != "yarn" || h.RopeFreqScale != 0.25 || h.RopeOrigContext != 1024 || h.Context != 4096 ||
		h.YarnExtFactor != 1 || h.YarnAttnFactor != 1 || h.YarnBetaFast != 32 || h.YarnBetaSlow != 1 || h.YarnLogMul != 0 {
		t.Errorf("yarn: %+v", h)
	}
	// YaRN's magnitude correction 1 + 0.1·ln 4, llama.cpp's cancellation
	// of it undone by ggml's rope: about 1.1386.
	if m := h.ropeMScale(); math.Abs(float64(m)-(1+0.1*math.Log(4))) > 1e-6 {
		t.Errorf("yarn mscale %v, want 1+0.1·ln 4", m)
	}

	// A factor without a type: linear, as llama.cpp defaults it.
	c.RopeScaling = ""
	h, err = readHParamsBytes(t, ropeScalingFile(t, c, KV{"qwen3.rope.scaling.factor", float32(2)}))
	if err != nil {
		t.Fatal(err)
	}
	if h.RopeScaling != "linear" || h.RopeFreqScale != 0.5 || h.YarnExtFactor != 0 || h.ropeMScale() != 1 || h.RopeOrigContext != 4096 {
		t.Errorf("factor without a type: %+v", h)
	}
	// "none" and no keys: no scaling, whatever the factor.
	for _, set := range [][]KV{nil, {{"qwen3.rope.scaling.type", "none"}, {"qwen3.rope.scaling.factor", float32(8)}}} {
		h, err = readHParamsBytes(t, ropeScalingFile(t, c, set...))
		if err != nil {
			t.Fatal(err)
		}
		if h.RopeScaling != "" || h.RopeFreqScale != 1 || h.ropeMScale() != 1 {
			t.Errorf("%v: %+v", set, h)
		}
		freqs := ropeFreqs(h.RopeBase, h.HeadDim, nil)
		want := append([]float32(nil), freqs...)
		scaleRope(h, freqs)
		if !sameBits(freqs, want) {
			t.Errorf("%v: frequencies scaled", set)
		}
	}

	c.RopeScaling = "yarn"
	for _, tc := range []struct {
		kv   KV
		want error
		text string
	}{
		{KV{"qwen3.rope.scaling.type", "longrope"}, ErrUnsupportedArch, "longrope"},
		{KV{"qwen3.rope.scaling.type", uint32(1)}, nil, "rope.scaling.type"},
		{KV{"qwen3.rope.scaling.factor", float32(-2)}, ErrCorrupt, "rope.scaling.factor"},
		{KV{"qwen3.rope.scaling.factor", float32(math.NaN())}, ErrCorrupt, "rope.scaling.factor"},
		{KV{"qwen3.rope.scaling.original_context_length", uint32(0)}, ErrCorrupt, "original_context_length"},
	} {
		_, err := readHParamsBytes(t, ropeScalingFile(t, c, tc.kv))
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s = %v: %v", tc.kv.Key, tc.kv.Value, err)
		}
	}

	// llama.cpp reads no yarn_* key for qwen3 (nor llama, qwen2, phi3,
	// qwen3moe): they are ignored, even bad ones.
	h, err = readHParamsBytes(t, ropeScalingFile(t, c, KV{"qwen3.rope.scaling.yarn_beta_fast", float32(math.Inf(1))},
		KV{"qwen3.rope.scaling.yarn_ext_factor", float32(0.5)}, KV{"qwen3.rope.scaling.yarn_attn_factor", "x"},
		KV{"qwen3.rope.scaling.yarn_log_multiplier", float32(0.1)}))
	if err != nil {
		t.Fatal(err)
	}
	if h.YarnExtFactor != 1 || h.YarnAttnFactor != 1 || h.YarnBetaFast != 32 || h.YarnBetaSlow != 1 || h.YarnLogMul != 0 {
		t.Errorf("qwen3 took yarn_* keys: %+v", h)
	}

	// Where llama.cpp reads them (deepseek2: the log multiplier, undone
	// from its converter's 0.1), they are read and checked.
	b := ropeScalingFile(t, c, KV{"deepseek2.rope.scaling.type", "yarn"}, KV{"deepseek2.rope.scaling.factor", float32(40)},
		KV{"deepseek2.rope.scaling.yarn_log_multiplier", float32(0.0707)}, KV{"deepseek2.rope.scaling.yarn_beta_fast", float32(99)})
	f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	ds := HParams{Arch: "deepseek2", TrainContext: 163840, RopeAttnFactor: 1}
	if err := readRopeScaling(f, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.RopeScaling != "yarn" || ds.RopeFreqScale != 1/float32(40) || math.Abs(float64(ds.YarnLogMul)-0.707) > 1e-6 || ds.YarnBetaFast != 32 {
		t.Errorf("deepseek2: %+v", ds)
	}
	// DeepSeek-V2's mscale = mscale_all_dim: llama.cpp's attention factor
	// is then 1 over its cancellation, so cos and sin are not scaled.
	if m := ds.ropeMScale(); math.Abs(float64(m)-1) > 1e-6 {
		t.Errorf("deepseek2 mscale %v, want 1", m)
	}
	bad := ropeScalingFile(t, c, KV{"deepseek2.rope.scaling.type", "yarn"}, KV{"deepseek2.rope.scaling.yarn_log_multiplier", float32(math.NaN())})
	if f, err = ReadFile(bytes.NewReader(bad), int64(len(bad))); err != nil {
		t.Fatal(err)
	}
	if err := readRopeScaling(f, &HParams{Arch: "deepseek2", TrainContext: 4096}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "yarn_log_multiplier") {
		t.Errorf("NaN log multiplier: %v", err)
	}
}

// TestScaleRopeYaRN: YaRN leaves the fastest dimensions (below the ramp)
// as they are, divides the slowest (past it) by the factor, and blends
// those between, from ggml_rope_yarn_corr_dims' corners: for head size
// 64, base 10000, original context 8192, they are dimensions 12 and 25
// (64·ln(8192/(2π·β))/(2 ln 10000) for β = 32 and 1, floored and ceiled).
func TestScaleRopeYaRN(t *testing.T) {
	h := HParams{HeadDim: 64, RopeBase: 10000, RopeScaling: "yarn", RopeFreqScale: 0.25, RopeOrigContext: 8192,
		YarnExtFactor: 1, YarnBetaFast: 32, YarnBetaSlow: 1}
	base := ropeFreqs(h.RopeBase, h.HeadDim, nil)
	f := append([]float32(nil), base...)
	scaleRope(h, f)
	for i := range f {
		r := float64(f[i]) / float64(base[i])
		switch {
		case i <= 12 && math.Abs(r-1) > 1e-7:
			t.Errorf("dimension %d (before the ramp) scaled by %v", i, r)
		case i >= 25 && math.Abs(r-0.25) > 1e-7:
			t.Errorf("dimension %d (past the ramp) scaled by %v, want 0.25", i, r)
		case i > 12 && i < 25:
			// The ramp: 1 − (i−12)/13 of extrapolation.
			w := 1 - float64(i-12)/13
			if want := 0.25*(1-w) + w; math.Abs(r-want) > 1e-6 {
				t.Errorf("dimension %d scaled by %v, want %v", i, r, want)
			}
		}
	}
}

// TestGenRopeScaling: model gen writes the keys, and refuses what cannot
// be written.
func TestGenRopeScaling(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 1, Dim: 64, Heads: 2, FFN: 64, Vocab: 300, Context: 1000, RopeScaling: "linear", RopeScalingFactor: 4}
	h, err := readHParamsBytes(t, ropeScalingFile(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if h.RopeScaling != "linear" || h.RopeFreqScale != 0.25 || h.RopeOrigContext != 250 {
		t.Errorf("%+v", h)
	}
	for _, bad := range []GenConfig{
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 2, FFN: 64, Vocab: 300, RopeScaling: "ntk", RopeScalingFactor: 4},
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 2, FFN: 64, Vocab: 300, RopeScaling: "yarn"},
		{Arch: "phi3", Layers: 1, Dim: 64, Heads: 2, FFN: 64, Vocab: 300, RopeScaling: "yarn", RopeScalingFactor: 4},
	} {
		if _, _, err := genParts(bad); !errors.Is(err, ErrShape) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
