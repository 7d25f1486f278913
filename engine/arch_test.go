package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// registerOnce registers a test architecture (tests may run more than once
// in one process).
func registerOnce(a *Arch) {
	if _, err := Architecture(a.Name); err != nil {
		Register(a)
	}
}

// renamedArch is a generated file of c with general.architecture and the
// architecture's keys renamed to name, as a file of a new architecture
// would read.
func renamedArch(t *testing.T, c GenConfig, name string) (orig, renamed []byte) {
	t.Helper()
	kvs, ts, err := genParts(c)
	if err != nil {
		t.Fatal(err)
	}
	var out []KV
	for _, kv := range kvs {
		switch {
		case kv.Key == "general.architecture":
			kv.Value = name
		case strings.HasPrefix(kv.Key, c.Arch+"."):
			kv.Key = name + strings.TrimPrefix(kv.Key, c.Arch)
		}
		out = append(out, kv)
	}
	return writeParts(t, kvs, ts), writeParts(t, out, ts)
}

func stepLogits(t *testing.T, s *Local) []float32 {
	t.Helper()
	ss, err := s.NewSession(16)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{1, 9, 40, 7, 200}}); err != nil {
		t.Fatal(err)
	}
	out, err := s.Forward(ctx, Step{Session: ss, Pos: 5, Tokens: []int32{3}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Logits
}

// TestRegisteredArch: an architecture registered under a name of its own
// (here llama's and phi3's definitions, copied) runs files of that name
// with nothing else added, bit for bit as the original.
func TestRegisteredArch(t *testing.T) {
	for _, shape := range []string{"llama3.1", "phi3.5-longrope", "qwen3"} {
		c := testShapes[shape]
		name := "strata-test-" + c.Arch
		def, err := Architecture(c.Arch)
		if err != nil {
			t.Fatal(err)
		}
		cp := *def
		cp.Name = name
		registerOnce(&cp)
		orig, renamed := renamedArch(t, c, name)
		a, err := openBytes(t, orig)
		if err != nil {
			t.Fatal(err)
		}
		b, err := openBytes(t, renamed)
		if err != nil {
			t.Fatalf("%s: %v", shape, err)
		}
		if b.Info().Arch != name {
			t.Errorf("%s: arch %q, want %q", shape, b.Info().Arch, name)
		}
		if !sameBits(stepLogits(t, a), stepLogits(t, b)) {
			t.Errorf("%s: the same definition under another name gives other logits", shape)
		}
	}
	if _, err := Architecture("strata-no-such"); !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "llama") {
		t.Errorf("unknown architecture: %v, want ErrUnsupportedArch listing the supported ones", err)
	}
}

// TestUnsupportedOps: a block using an op or attention variant the Go
// engine does not implement fails its step with ErrUnsupportedArch, and
// the session does not advance.
func TestUnsupportedOps(t *testing.T) {
	llama, _ := Architecture("llama")
	blocks := map[string]func(o Ops, l *Layer, x Tensor) Tensor{
		// Sliding windows, GELU and sinks run now; these do not yet.
		"moe-gelu": func(o Ops, _ *Layer, x Tensor) Tensor {
			return o.Add(x, o.MoE(x, MoE{TopK: 1, NormTopK: true, GELU: true}))
		},
		"moe-unnormalised": func(o Ops, _ *Layer, x Tensor) Tensor {
			return o.Add(x, o.MoE(x, MoE{TopK: 1}))
		},
	}
	for variant, block := range blocks {
		name := "strata-test-" + variant
		registerOnce(&Arch{Name: name, Globals: llama.Globals, Tensors: llama.Tensors, Block: block})
		_, renamed := renamedArch(t, testShapes["llama-gqa"], name)
		s, err := openBytes(t, renamed)
		if err != nil {
			t.Fatal(err)
		}
		ss, _ := s.NewSession(8)
		if _, err := s.Forward(context.Background(), Step{Session: ss, Tokens: []int32{1, 2}}); !errors.Is(err, ErrUnsupportedArch) {
			t.Errorf("%s: %v, want ErrUnsupportedArch", variant, err)
		}
		if ss.Len() != 0 {
			t.Errorf("%s: session holds %d positions after a failed step", variant, ss.Len())
		}
	}
}

// TestPlan: a fused tensor is read whole, its parts as row ranges in the
// specs' order; without it, the parts are read as tensors of their own;
// an absent optional tensor is left out, an absent required one named.
func TestPlan(t *testing.T) {
	c := testShapes["phi3.5-longrope"]
	b := genBytes(t, c)
	f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	qd, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	if c.HeadDim == 0 {
		qd, kv = c.Dim, c.KVHeads*c.Dim/c.Heads
	}
	specs := []TensorSpec{
		{Name: "attn_q.weight", Dims: []int{c.Dim, qd}, Fused: "attn_qkv.weight"},
		{Name: "attn_k.weight", Dims: []int{c.Dim, kv}, Fused: "attn_qkv.weight"},
		{Name: "attn_v.weight", Dims: []int{c.Dim, kv}, Fused: "attn_qkv.weight"},
		{Name: "attn_q.bias", Dims: []int{qd}, Optional: true},
		{Name: "attn_norm.weight", Dims: []int{c.Dim}},
	}
	plan, err := Plan(f, "blk.1.", specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].Name != "blk.1.attn_qkv.weight" || plan[1].Name != "blk.1.attn_norm.weight" {
		t.Fatalf("plan %+v", plan)
	}
	want := []TensorPart{{"attn_q.weight", 0, qd}, {"attn_k.weight", qd, qd + kv}, {"attn_v.weight", qd + kv, qd + 2*kv}}
	if got := plan[0].Parts; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("parts %+v, want %+v", got, want)
	}
	// A fused tensor of other rows than its parts' is not taken for them.
	specs[0].Dims = []int{c.Dim, qd + 16}
	if _, err := Plan(f, "blk.1.", specs); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "blk.1.attn_q.weight") {
		t.Errorf("mismatched fused rows: %v, want ErrCorrupt naming attn_q", err)
	}
	if _, err := Plan(f, "blk.1.", []TensorSpec{{Name: "ffn_gate_inp.weight", Dims: []int{c.Dim, 8}}}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "blk.1.ffn_gate_inp.weight") {
		t.Errorf("missing tensor: %v, want ErrCorrupt naming it", err)
	}
}
