package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoute: the top k by probability, ties to the lower index, weights
// normalised to sum 1 and summed in double as ggml_sum_rows does.
func TestRoute(t *testing.T) {
	logits := []float32{
		0, 2, 1, 2, // experts 1 and 3 tie: 1 first
		5, -1, 5, 5, // three-way tie: 0, 2
	}
	sel, wt := make([]int32, 4), make([]float32, 4)
	route(logits, 2, 4, 2, sel, wt, false)
	if fmt.Sprint(sel) != "[1 3 0 2]" {
		t.Errorf("selected %v, want [1 3 0 2]", sel)
	}
	for r := 0; r < 2; r++ {
		if wt[2*r] != 0.5 || wt[2*r+1] != 0.5 {
			t.Errorf("row %d: weights %v, want equal halves of a tie", r, wt[2*r:2*r+2])
		}
	}
	// Unequal: softmax of (0, ln 3) over two of three experts with a third
	// far below; the chosen two renormalise to 1/4 and 3/4.
	logits = []float32{0, 1.0986123, -30}
	sel, wt = make([]int32, 2), make([]float32, 2)
	route(logits, 1, 3, 2, sel, wt, false)
	if sel[0] != 1 || sel[1] != 0 {
		t.Errorf("selected %v, want [1 0]", sel)
	}
	if d := float64(wt[0]) - 0.75; d > 1e-6 || d < -1e-6 || float64(wt[1])-0.25 > 1e-6 || float64(wt[1])-0.25 < -1e-6 {
		t.Errorf("weights %v, want [0.75 0.25]", wt)
	}
	// gpt-oss: chosen by logit, weighed by a softmax of the chosen logits
	// only: (ln 3, 0) of (0, ln 3, −30, −1) give 3/4 and 1/4 whatever the
	// others are.
	logits = []float32{0, 1.0986123, -30, -1}
	sel, wt = make([]int32, 2), make([]float32, 2)
	route(logits, 1, 4, 2, sel, wt, true)
	if sel[0] != 1 || sel[1] != 0 {
		t.Errorf("weighChosen: selected %v, want [1 0]", sel)
	}
	if d := float64(wt[0]) - 0.75; d > 1e-6 || d < -1e-6 || float64(wt[1])-0.25 > 1e-6 || float64(wt[1])-0.25 < -1e-6 {
		t.Errorf("weighChosen: weights %v, want [0.75 0.25]", wt)
	}
}

// TestMoEBatchInvariance: a MoE session's logits are the same bits alone,
// in a batch of 16 (its rows grouped with others' under shared experts),
// at 1–3 threads, and token by token.
func TestMoEBatchInvariance(t *testing.T) {
	qwen := GenConfig{Arch: "qwen3moe", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 768, Vocab: 300, Seed: 51,
		Experts: 8, ExpertsUsed: 3, ExpertFFN: 256}
	mixtral := GenConfig{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 300, Seed: 52, Experts: 8, ExpertsUsed: 2}
	// gpt-oss: biased experts and router, its gating and activation, a
	// window of 4 the prompt outgrows.
	gptoss := GenConfig{Arch: "gpt-oss", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 300, Seed: 53,
		Experts: 8, ExpertsUsed: 2, SlidingWindow: 4}
	cases := []struct {
		name string
		c    GenConfig
		dt   DType
		mix  string
	}{
		{"qwen3moe-q4_k_m", qwen, F32, "q4_k_m"}, {"qwen3moe-q8_0", qwen, Q8_0, ""}, {"qwen3moe-f16", qwen, F16, ""},
		{"mixtral-q4_k_m", mixtral, F32, "q4_k_m"}, {"mixtral-f32", mixtral, F32, ""},
		{"gpt-oss-mxfp4_moe", gptoss, F32, "mxfp4_moe"}, {"gpt-oss-q8_0", gptoss, Q8_0, ""},
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

// TestMoERoutesSpread: the generated routers send a prompt's tokens to
// more than ExpertsUsed experts in every layer, so the tests above group
// rows under several experts rather than one fixed set.
func TestMoERoutesSpread(t *testing.T) {
	for _, name := range []string{"qwen3moe", "mixtral"} {
		c := testShapes[name]
		s, err := Open(genModel(t, c), WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		x := make([]float32, 16*c.Dim)
		tokens := []int32{1, 17, 42, 99, 250, 3, 77, 5, 6, 7, 8, 9, 10, 11, 12, 13}
		for i, tok := range tokens {
			s.embd.row(int(tok), x[i*c.Dim:(i+1)*c.Dim])
		}
		for li, w := range s.layers {
			xb := make([]float32, len(x))
			for r := range tokens {
				rmsNorm(xb[r*c.Dim:(r+1)*c.Dim], x[r*c.Dim:(r+1)*c.Dim], w.W("ffn_norm.weight").([]float32), s.hp.NormEps)
			}
			logits := make([]float32, len(tokens)*c.Experts)
			s.matmul(logits, w.W("ffn_gate_inp.weight").(*matrix), newAct(xb, len(tokens), c.Dim))
			sel, wt := make([]int32, len(tokens)*c.ExpertsUsed), make([]float32, len(tokens)*c.ExpertsUsed)
			route(logits, len(tokens), c.Experts, c.ExpertsUsed, sel, wt, false)
			used := map[int32]bool{}
			for _, e := range sel {
				used[e] = true
			}
			if len(used) <= c.ExpertsUsed {
				t.Errorf("%s layer %d: the tokens chose only experts %v", name, li, used)
			}
		}
	}
}

// TestMoEGenerateTypes: generated MoE files in every type the generator
// offers load with the file's expert shape, and a Q4_K_M Mixtral file has
// llama.cpp's 8-expert choices (attn_k and attn_v Q8_0, attn_output Q5_K)
// and the router F32.
func TestMoEGenerateTypes(t *testing.T) {
	for _, name := range []string{"qwen3moe", "mixtral"} {
		for _, ty := range []struct {
			dt  DType
			mix string
		}{{F32, ""}, {F16, ""}, {Q8_0, ""}, {F32, "q4_k_m"}} {
			c := testShapes[name]
			c.Dim, c.Heads, c.FFN = 256, 4, 256
			if c.ExpertFFN != 0 {
				c.ExpertFFN = 256
			}
			c.DType, c.Mix = ty.dt, ty.mix
			path := genModel(t, c)
			s, err := Open(path)
			if err != nil {
				t.Fatalf("%s %s%s: %v", name, ty.dt, ty.mix, err)
			}
			hp := s.Info().HParams
			if hp.Experts != c.Experts || hp.ExpertsUsed != c.ExpertsUsed || hp.ExpertFFN != 256 {
				t.Errorf("%s: read experts %d/%d of width %d, wrote %d/%d of %d", name, hp.ExpertsUsed, hp.Experts, hp.ExpertFFN,
					c.ExpertsUsed, c.Experts, 256)
			}
			// Placement sees every expert's bytes and the used ones' compute.
			spec, err := hp.Spec(4)
			if err != nil {
				t.Fatalf("%s: Spec: %v", name, err)
			}
			dense := 3 * float64(hp.Dim) * float64(hp.ExpertFFN)
			if got := spec.LayerParams() - spec.ActiveLayerParams(); got < float64(hp.Experts-hp.ExpertsUsed)*dense*0.99 {
				t.Errorf("%s: Spec counts %.0f parameters a layer beyond the active ones; %d unused experts hold %.0f",
					name, got, hp.Experts-hp.ExpertsUsed, float64(hp.Experts-hp.ExpertsUsed)*dense)
			}
			ss, _ := s.NewSession(8)
			out, err := s.Forward(t.Context(), Step{Session: ss, Tokens: []int32{1, 2, 3}})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range out.Logits {
				if v != v {
					t.Fatalf("%s %s%s: NaN logit", name, ty.dt, ty.mix)
				}
			}
			s.Close()
		}
	}
	c := GenConfig{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 256, Vocab: 300, Seed: 3, Experts: 8, ExpertsUsed: 2, Mix: "q4_k_m"}
	f, fh, err := OpenFile(genModel(t, c))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	want := map[string]DType{"blk.0.attn_k.weight": Q8_0, "blk.0.attn_v.weight": Q8_0, "blk.0.attn_output.weight": Q5_K,
		"blk.0.ffn_gate_inp.weight": F32, "blk.0.ffn_gate_exps.weight": Q4_K, "blk.0.ffn_up_exps.weight": Q4_K,
		"blk.1.ffn_down_exps.weight": Q6_K, "blk.0.ffn_down_exps.weight": Q4_K}
	for n, typ := range want {
		ti, ok := f.Tensor(n)
		if !ok {
			t.Errorf("no tensor %s", n)
			continue
		}
		if ti.Type != typ {
			t.Errorf("%s is %s, want %s", n, ti.Type, typ)
		}
	}
	if ti, _ := f.Tensor("blk.0.ffn_up_exps.weight"); fmt.Sprint(ti.Dims) != "[256 256 8]" {
		t.Errorf("ffn_up_exps dims %v, want [256 256 8]", ti.Dims)
	}
}

// rewriteModel writes the model at src again with its metadata changed by
// kv and its tensors renamed by rename ("" drops one).
func rewriteModel(t *testing.T, src string, kv func([]KV) []KV, rename func(string) string) string {
	t.Helper()
	f, fh, err := OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(src)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	var ts []WriteTensor
	for _, ti := range f.Tensors {
		name := ti.Name
		if rename != nil {
			if name = rename(name); name == "" {
				continue
			}
		}
		data := raw[ti.Offset : ti.Offset+ti.Size]
		ts = append(ts, WriteTensor{Name: name, Dims: ti.Dims, Type: ti.Type,
			Data: func(w io.Writer) error { _, err := w.Write(data); return err }})
	}
	var buf bytes.Buffer
	if err := WriteGGUF(&buf, kv(append([]KV(nil), f.KV...)), ts); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "rewritten.gguf")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func setKV(key string, v any) func([]KV) []KV {
	return func(kvs []KV) []KV {
		for i := range kvs {
			if kvs[i].Key == key {
				if v == nil {
					return append(kvs[:i], kvs[i+1:]...)
				}
				kvs[i].Value = v
				return kvs
			}
		}
		return append(kvs, KV{key, v})
	}
}

// TestMoEErrors: every malformed or unsupported MoE file is refused with
// the sentinel and a message that names the problem.
func TestMoEErrors(t *testing.T) {
	qwen := genModel(t, testShapes["qwen3moe"])
	mixtral := genModel(t, testShapes["mixtral"])
	dense := genModel(t, testShapes["qwen3"])
	oss := genModel(t, testShapes["gpt-oss"])
	drop := func(suffix string) func(string) string {
		return func(n string) string {
			if strings.HasSuffix(n, suffix) {
				return ""
			}
			return n
		}
	}
	keep := func(k []KV) []KV { return k }
	cases := []struct {
		name   string
		path   string
		kv     func([]KV) []KV
		rename func(string) string
		want   error
		msg    string
	}{
		{"no expert_used_count", qwen, setKV("qwen3moe.expert_used_count", nil), nil, ErrCorrupt, "expert_used_count"},
		{"used > count", qwen, setKV("qwen3moe.expert_used_count", uint32(9)), nil, ErrCorrupt, "of 8 experts"},
		{"no expert_count", qwen, setKV("qwen3moe.expert_count", nil), nil, ErrCorrupt, "without qwen3moe.expert_count"},
		{"too many experts", qwen, setKV("qwen3moe.expert_count", uint32(1000)), nil, ErrCorrupt, "at most 512"},
		{"shared experts", qwen, setKV("qwen3moe.expert_shared_count", uint32(1)), nil, ErrUnsupportedArch, "shared experts"},
		{"leading dense", qwen, setKV("qwen3moe.leading_dense_block_count", uint32(1)), nil, ErrUnsupportedArch, "dense layers"},
		{"sigmoid gating", qwen, setKV("qwen3moe.expert_gating_func", uint32(2)), nil, ErrUnsupportedArch, "gating function 2"},
		{"experts on qwen3", dense, setKV("qwen3.expert_count", uint32(8)), nil, ErrUnsupportedArch, "qwen3 with 8 experts"},
		{"missing router", mixtral, func(k []KV) []KV { return k }, func(n string) string {
			if strings.HasSuffix(n, "ffn_gate_inp.weight") {
				return ""
			}
			return n
		}, ErrCorrupt, "ffn_gate_inp.weight"},
		{"legacy per-expert tensors", mixtral, func(k []KV) []KV { return k }, func(n string) string {
			return strings.Replace(n, "ffn_gate_exps.weight", "ffn_gate.0.weight", 1)
		}, ErrUnsupportedArch, "one tensor per expert"},
		{"wrong expert width", qwen, setKV("qwen3moe.expert_feed_forward_length", uint32(64)), nil, ErrShape, "ffn_gate_exps.weight"},
		{"gpt-oss without experts", oss, setKV("gpt-oss.expert_count", nil), nil, ErrCorrupt, "without gpt-oss.expert_count"},
		{"gpt-oss without a window", oss, setKV("gpt-oss.attention.sliding_window", nil), nil, ErrCorrupt, "sliding_window"},
		{"gpt-oss window 0", oss, setKV("gpt-oss.attention.sliding_window", uint32(0)), nil, ErrCorrupt, "sliding_window"},
		{"gpt-oss without sinks", oss, keep, drop("attn_sinks.weight"), ErrCorrupt, "attn_sinks.weight"},
		{"gpt-oss without expert biases", oss, keep, drop("ffn_down_exps.bias"), ErrCorrupt, "ffn_down_exps.bias"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := rewriteModel(t, tc.path, tc.kv, tc.rename)
			_, err := Open(path)
			if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.msg) {
				t.Errorf("Open: %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
	for _, c := range []GenConfig{
		{Arch: "qwen3moe", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300},                                         // no experts
		{Arch: "qwen2", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Experts: 4, ExpertsUsed: 2},                // arch
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Experts: 4, ExpertsUsed: 5},                // used > count
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Experts: 4, ExpertsUsed: 2, ExpertFFN: 32}, // llama width
		{Arch: "qwen3moe", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Experts: 4, ExpertsUsed: 2, ExpertFFN: 48, DType: Q8_0},
		{Arch: "gpt-oss", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300},                                                // no experts
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, SlidingWindow: 8},                                // window off gpt-oss
		{Arch: "gpt-oss", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, Experts: 4, ExpertsUsed: 2, SlidingWindow: -1}, // window < 0
	} {
		if err := Generate(io.Discard, c); !errors.Is(err, ErrShape) {
			t.Errorf("Generate(%+v): %v, want ErrShape", c, err)
		}
	}
}

// TestMoESlice: a slice file of a qwen3moe model's middle layers (as a
// node fetches one) computes the full file's hidden states bit for bit.
func TestMoESlice(t *testing.T) {
	c := testShapes["qwen3moe"]
	c.Mix = "q4_k_m"
	c.Dim, c.ExpertFFN = 256, 256
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
