package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"strings"
	"testing"
)

// phi3Parts is a LongRoPE phi3 model's metadata and tensors.
func phi3Parts(t *testing.T) (GenConfig, []KV, []WriteTensor) {
	t.Helper()
	c := testShapes["phi3.5-longrope"]
	kvs, ts, err := genParts(c)
	if err != nil {
		t.Fatal(err)
	}
	return c.withDefaults(), kvs, ts
}

func openBytes(t *testing.T, b []byte) (*Local, error) {
	t.Helper()
	s, err := OpenReaderAt(bytes.NewReader(b), int64(len(b)), WithThreads(1))
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestPhi3File: a generated phi3 file has llama.cpp's phi3 layout, and its
// LongRoPE metadata reads back as the context the engine serves.
func TestPhi3File(t *testing.T) {
	c, kvs, ts := phi3Parts(t)
	b := writeParts(t, kvs, ts)
	f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"blk.0.attn_qkv.weight", "blk.3.ffn_up.weight", "rope_factors_short.weight", "rope_factors_long.weight"} {
		if _, ok := f.Tensor(name); !ok {
			t.Errorf("no %s", name)
		}
	}
	for _, name := range []string{"blk.0.attn_q.weight", "blk.0.ffn_gate.weight"} {
		if _, ok := f.Tensor(name); ok {
			t.Errorf("unexpected %s", name)
		}
	}
	up, _ := f.Tensor("blk.0.ffn_up.weight")
	if up.Dims[0] != uint64(c.Dim) || up.Dims[1] != uint64(2*c.FFN) {
		t.Errorf("ffn_up dims %v, want [%d %d]", up.Dims, c.Dim, 2*c.FFN)
	}
	hp, err := ReadHParams(f)
	if err != nil {
		t.Fatal(err)
	}
	wantAF := float32(math.Sqrt(1 + math.Log(32)/math.Log(float64(c.Context))))
	if !hp.NeoxRope || !hp.LongRoPE || hp.Context != c.Context || hp.TrainContext != 32*c.Context || hp.RopeAttnFactor != wantAF {
		t.Errorf("hparams %+v: want NEOX RoPE, LongRoPE, context %d of %d, attention factor %g", hp, c.Context, 32*c.Context, wantAF)
	}
	if hp.SlidingWindow <= 0 {
		t.Errorf("sliding window %d not read", hp.SlidingWindow)
	}
	s, err := openBytes(t, b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Info().Context != c.Context {
		t.Errorf("Info().Context %d, want the original context %d", s.Info().Context, c.Context)
	}
	// The short factors hold only within the original context; a longer
	// session would need the long ones, which are refused by name.
	if _, err := s.NewSession(c.Context); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewSession(c.Context + 1); !errors.Is(err, ErrContextFull) || !strings.Contains(err.Error(), "rope_factors_long.weight") {
		t.Errorf("session past the original context: %v", err)
	}
	if !bytes.Equal(b, writeParts(t, kvs, ts)) {
		t.Error("the same config gave different bytes")
	}
}

// TestPhi3SeparateQKV: a phi3 file with attn_q/k/v instead of attn_qkv
// (llama.cpp accepts both) gives the fused file's logits bit for bit.
func TestPhi3SeparateQKV(t *testing.T) {
	c, kvs, ts := phi3Parts(t)
	fused := writeParts(t, kvs, ts)
	f, err := ReadFile(bytes.NewReader(fused), int64(len(fused)))
	if err != nil {
		t.Fatal(err)
	}
	qd, kvd := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	var split []WriteTensor
	for _, w := range ts {
		if !strings.HasSuffix(w.Name, ".attn_qkv.weight") {
			split = append(split, w)
			continue
		}
		ti, _ := f.Tensor(w.Name)
		raw, err := f.readTensorBytes(ti)
		if err != nil {
			t.Fatal(err)
		}
		row := 4 * c.Dim // F32
		p := strings.TrimSuffix(w.Name, "attn_qkv.weight")
		for _, part := range []struct {
			name   string
			lo, hi int
		}{{"attn_q.weight", 0, qd}, {"attn_k.weight", qd, qd + kvd}, {"attn_v.weight", qd + kvd, qd + 2*kvd}} {
			data := raw[part.lo*row : part.hi*row]
			split = append(split, WriteTensor{Name: p + part.name, Dims: []uint64{uint64(c.Dim), uint64(part.hi - part.lo)}, Type: F32,
				Data: func(w io.Writer) error { _, err := w.Write(data); return err }})
		}
	}
	logits := func(b []byte) []float32 {
		s, err := openBytes(t, b)
		if err != nil {
			t.Fatal(err)
		}
		ss, _ := s.NewSession(16)
		out, err := s.Forward(context.Background(), Step{Session: ss, Tokens: []int32{1, 9, 40, 7, 200}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Logits
	}
	a, b := logits(fused), logits(writeParts(t, kvs, split))
	if !sameBits(a, b) {
		t.Fatal("separate Q/K/V tensors give other logits than the fused one")
	}
}

// TestPhi3BadFiles: phi3 files the engine cannot run are refused with the
// key or tensor at fault named.
func TestPhi3BadFiles(t *testing.T) {
	_, kvs, ts := phi3Parts(t)
	var oneFactor []WriteTensor
	for _, w := range ts {
		if w.Name != "rope_factors_long.weight" {
			oneFactor = append(oneFactor, w)
		}
	}
	if _, err := openBytes(t, writeParts(t, kvs, oneFactor)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "rope_factors_long.weight") {
		t.Errorf("one LongRoPE tensor: %v", err)
	}
	edit := func(key string, v any) []KV {
		out := append([]KV(nil), kvs...)
		for i := range out {
			if out[i].Key == key {
				out[i].Value = v
			}
		}
		return out
	}
	// A head size whose heads do not make up the embedding.
	bad := edit("phi3.attention.key_length", uint32(4))
	for i := range bad {
		if bad[i].Key == "phi3.attention.value_length" || bad[i].Key == "phi3.rope.dimension_count" {
			bad[i].Value = uint32(4)
		}
	}
	if _, err := openBytes(t, writeParts(t, bad, ts)); !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "phi3") {
		t.Errorf("phi3 head size: %v", err)
	}
	if _, err := openBytes(t, writeParts(t, edit("phi3.rope.scaling.original_context_length", uint32(1<<30)), ts)); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "original_context_length") {
		t.Errorf("original context past the trained one: %v", err)
	}
	if _, err := openBytes(t, writeParts(t, edit("phi3.rope.scaling.attn_factor", float32(-1)), ts)); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "attn_factor") {
		t.Errorf("negative attention factor: %v", err)
	}
	for _, c := range []GenConfig{
		{Arch: "phi3", Layers: 1, Dim: 64, Heads: 4, HeadDim: 8, FFN: 64, Vocab: 300},
		{Arch: "phi3", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 260},
		{Arch: "llama", Layers: 1, Dim: 64, Heads: 4, FFN: 64, Vocab: 300, LongRoPE: true},
	} {
		if err := GenerateFile(t.TempDir()+"/x.gguf", c); !errors.Is(err, ErrShape) {
			t.Errorf("generate %+v: %v", c, err)
		}
	}
}

// TestPhi3Chat: a generated phi3 file carries Phi-3.5's template, its
// control tokens encode as single tokens, <|end|> ends a turn, and a file
// without a template gets the same prompt from the built-in format.
func TestPhi3Chat(t *testing.T) {
	c := testShapes["phi3"]
	tok, err := LoadTokenizer(genModel(t, c))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello world"}}
	want := "<|system|>\nbe brief<|end|>\n<|user|>\nhello world<|end|>\n<|assistant|>\n"
	got, err := tok.RenderChat(ChatRequest{Messages: chatMessages(msgs, false), AddGenerationPrompt: true})
	if err != nil || got != want {
		t.Fatalf("template: %q, %v; want %q", got, err, want)
	}
	if p := tok.ChatPrompt(msgs); p != want {
		t.Errorf("built-in format %q, want %q", p, want)
	}
	// The generated template renders as Phi-3.5-mini-instruct's own.
	real, err := os.ReadFile("testdata/chat/templates/microsoft-Phi-3.5-mini-instruct.jinja")
	if err != nil {
		t.Fatal(err)
	}
	realTok := *tok
	realTok.chat = &chatTemplate{src: string(real)}
	for _, r := range []ChatRequest{
		{Messages: chatMessages(msgs, false), AddGenerationPrompt: true},
		{Messages: chatMessages(append(msgs, Message{Role: "assistant", Content: "hi"}, Message{Role: "user", Content: "again"}), false), AddGenerationPrompt: true},
		{Messages: chatMessages(append(msgs, Message{Role: "assistant", Content: "hi"}), false)},
		{Messages: chatMessages([]Message{{Role: "system", Content: ""}, {Role: "user", Content: "x"}}, false), AddGenerationPrompt: true},
	} {
		a, errA := tok.RenderChat(r)
		b, errB := realTok.RenderChat(r)
		if errA != nil || errB != nil || a != b {
			t.Errorf("generated template %q (%v), Phi-3.5's %q (%v)", a, errA, b, errB)
		}
	}
	ids, err := tok.EncodeChat(msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, id := range ids {
		count[tok.Token(id)]++
	}
	if count["<|system|>"] != 1 || count["<|user|>"] != 1 || count["<|assistant|>"] != 1 || count["<|end|>"] != 2 {
		t.Errorf("control tokens in %v: %v", ids, count)
	}
	end := int32(-1)
	for _, id := range ids {
		if tok.Token(id) == "<|end|>" {
			end = id
		}
	}
	if !tok.ends[end] || !tok.ends[tok.eos] || tok.Token(tok.eos) != "<|endoftext|>" {
		t.Errorf("<|end|> (%d) and EOS %q must end generation", end, tok.Token(tok.eos))
	}
}
