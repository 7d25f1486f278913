package engine

import (
	"fmt"
	"io"
	"math"
)

// Gemma3Config is the shape of a random-weight Gemma 3 (or Gemma 2) text
// model, written with the keys and tensor names of llama.cpp's
// convert_hf_to_gguf.py (Gemma3Model, Gemma2Model). GenConfig with Arch
// "gemma3" or "gemma2" writes these files too (strata model gen).
type Gemma3Config struct {
	// Arch is "gemma3" (default) or "gemma2": no Q/K norms, attention and
	// final logit soft-capping (attn_logit_softcapping 50, and Softcap, 30
	// by default, as the converter writes them).
	Arch    string
	Name    string // general.name; default "strata-random-gemma3"
	Layers  int
	Dim     int // embedding length
	Heads   int
	KVHeads int // 0: same as Heads
	HeadDim int // attention.key_length and value_length; 0: 256, as the converter defaults
	FFN     int
	Vocab   int
	Context int // context_length; 0: 2048
	// SlidingWindow is attention.sliding_window, the window of the local
	// layers (every layer but each sixth); 0: 512.
	SlidingWindow int
	RopeBase      float32 // rope.freq_base of the global layers; 0: 1e6 (local layers use 10000)
	NormEps       float32 // 0: 1e-6
	// Softcap, when set, is final_logit_softcapping (Gemma 3 ships none).
	Softcap float32
	Seed    uint64
	DType   DType // type of the 2-D weights; norms stay F32
	// Mix, "q4_k_m" or "q5_k_m", picks each 2-D weight's type as
	// GenConfig.Mix does (DType is then ignored).
	Mix string
	// LinearScaling, when > 0, writes rope.scaling.type linear and this
	// factor, as Gemma 3 4B, 12B and 27B have (factor 8): llama.cpp
	// applies it to the global layers only.
	LinearScaling float32
}

func (c Gemma3Config) withDefaults() Gemma3Config {
	if c.Arch == "" {
		c.Arch = "gemma3"
	}
	if c.Arch == "gemma2" && c.Softcap == 0 {
		c.Softcap = 30
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 {
		c.HeadDim = 256
	}
	if c.Context == 0 {
		c.Context = 2048
	}
	if c.SlidingWindow == 0 {
		c.SlidingWindow = 512
	}
	if c.RopeBase == 0 {
		c.RopeBase = 1e6
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-6
	}
	if c.Name == "" {
		c.Name = "strata-random-" + c.Arch
	}
	return c
}

func (c Gemma3Config) validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: generate gemma3: %s = %v", ErrShape, f, v) }
	switch {
	case c.Arch != "gemma3" && c.Arch != "gemma2":
		return fmt.Errorf("%w: generate %q (want gemma3 or gemma2)", ErrUnsupportedArch, c.Arch)
	case c.Mix != "" && c.Mix != "q4_k_m" && c.Mix != "q5_k_m":
		return fmt.Errorf("%w: generate %s mix %q (want q4_k_m or q5_k_m)", ErrUnsupportedType, c.Arch, c.Mix)
	case c.Mix != "" && (c.Dim%256 != 0 || c.FFN%256 != 0 || c.HeadDim*c.Heads%256 != 0):
		return bad("dim/ffn/heads×head-dim ("+c.Mix+" needs multiples of 256)", fmt.Sprintf("%d/%d/%d", c.Dim, c.FFN, c.HeadDim*c.Heads))
	case c.Layers <= 0:
		return bad("layers", c.Layers)
	case c.Heads <= 0 || c.Dim <= 0 || c.HeadDim%2 != 0:
		return bad("dim/heads/head-dim", fmt.Sprintf("%d/%d/%d", c.Dim, c.Heads, c.HeadDim))
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return bad("kv-heads", c.KVHeads)
	case c.FFN <= 0:
		return bad("ffn", c.FFN)
	case c.Vocab < minVocab:
		return bad("vocab", c.Vocab)
	case c.SlidingWindow < 0:
		return bad("sliding-window", c.SlidingWindow)
	case c.LinearScaling < 0 || math.IsInf(float64(c.LinearScaling), 0) || math.IsNaN(float64(c.LinearScaling)):
		return bad("linear-scaling", c.LinearScaling)
	case c.Mix == "" && !c.DType.Supported():
		return fmt.Errorf("%w: generate gemma3 %s", ErrUnsupportedType, c.DType)
	case c.Mix == "" && c.Dim%dtypes[c.DType].block != 0 || c.FFN%dtypes[c.DType].block != 0 || c.HeadDim*c.Heads%dtypes[c.DType].block != 0:
		return bad(fmt.Sprintf("dim/ffn/heads×head-dim (%s needs multiples of %d)", c.DType, dtypes[c.DType].block),
			fmt.Sprintf("%d/%d/%d", c.Dim, c.FFN, c.HeadDim*c.Heads))
	}
	return nil
}

// GenerateGemma3File writes a random-weight Gemma 3 text model to path.
func GenerateGemma3File(path string, c Gemma3Config) error {
	return writeFile(path, func(w io.Writer) error { return GenerateGemma3(w, c) })
}

// GenerateGemma3 writes a random-weight Gemma 3 text model: tied embeddings
// (no output.weight), per-head Q/K norms, norms after attention and after
// the FFN, and a SentencePiece vocabulary. Norm weights are stored as
// llama.cpp's converter stores them, already shifted by +1 (Gemma's
// RMSNorm scales by 1 + w), so they are drawn around 1. The same config
// always gives the same bytes.
func GenerateGemma3(w io.Writer, c Gemma3Config) error {
	kvs, ts, err := gemmaParts(c)
	if err != nil {
		return err
	}
	return WriteGGUF(w, kvs, ts)
}

// gemmaParts is the metadata and tensors of a generated Gemma model.
func gemmaParts(c Gemma3Config) ([]KV, []WriteTensor, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	a := c.Arch
	v, err := buildVocab("llama", c.Vocab)
	if err != nil {
		return nil, nil, err
	}
	fileType := fileTypes[c.DType]
	if c.Mix != "" {
		fileType = map[string]uint32{"q4_k_m": 15, "q5_k_m": 17}[c.Mix]
	}
	kvs := []KV{
		{"general.architecture", a},
		{"general.name", c.Name},
		{"general.file_type", fileType},
		{"general.quantization_version", uint32(2)},
		{"general.alignment", uint32(ggufDefaultAlign)},
		{a + ".context_length", uint32(c.Context)},
		{a + ".embedding_length", uint32(c.Dim)},
		{a + ".block_count", uint32(c.Layers)},
		{a + ".feed_forward_length", uint32(c.FFN)},
		{a + ".attention.head_count", uint32(c.Heads)},
		{a + ".attention.head_count_kv", uint32(c.KVHeads)},
		{a + ".attention.layer_norm_rms_epsilon", c.NormEps},
		{a + ".attention.key_length", uint32(c.HeadDim)},
		{a + ".attention.value_length", uint32(c.HeadDim)},
		{a + ".rope.freq_base", c.RopeBase},
		{a + ".attention.sliding_window", uint32(c.SlidingWindow)},
		{"strata.generator.seed", c.Seed},
	}
	if a == "gemma2" {
		kvs = append(kvs, KV{a + ".attn_logit_softcapping", float32(50)})
	}
	if c.LinearScaling > 0 {
		kvs = append(kvs, KV{a + ".rope.scaling.type", "linear"}, KV{a + ".rope.scaling.factor", c.LinearScaling})
	}
	if c.Softcap != 0 {
		kvs = append(kvs, KV{a + ".final_logit_softcapping", c.Softcap})
	}
	kvs = append(kvs, vocabKVs(v, "")...)
	kvs = append(kvs, KV{"tokenizer.ggml.add_space_prefix", false})

	d, f, qDim, kvDim := uint64(c.Dim), uint64(c.FFN), uint64(c.HeadDim*c.Heads), uint64(c.HeadDim*c.KVHeads)
	var ts []WriteTensor
	mat := func(name string, cols, rows uint64, scale float32) {
		t := c.DType
		if c.Mix != "" {
			t = mixType(c.Mix, name, c.Layers, int(cols), 0)
		}
		ts = append(ts, randTensor(name, []uint64{cols, rows}, t, c.Seed, scale, 0))
	}
	norm := func(name string, n uint64) {
		ts = append(ts, randTensor(name, []uint64{n}, F32, c.Seed, 0.2, 1))
	}
	// Rows of variance 1/Dim: the forward pass scales the input embedding
	// by √Dim (to unit variance), and the tied head then gives logits of
	// about unit size.
	mat("token_embd.weight", d, uint64(c.Vocab), 1/float32(math.Sqrt(float64(c.Dim))))
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		s := 1 / float32(math.Sqrt(float64(c.Dim)))
		norm(p+"attn_norm.weight", d)
		mat(p+"attn_q.weight", d, qDim, s)
		mat(p+"attn_k.weight", d, kvDim, s)
		mat(p+"attn_v.weight", d, kvDim, s)
		if a == "gemma3" {
			norm(p+"attn_q_norm.weight", uint64(c.HeadDim))
			norm(p+"attn_k_norm.weight", uint64(c.HeadDim))
		}
		mat(p+"attn_output.weight", qDim, d, 1/float32(math.Sqrt(float64(qDim))))
		norm(p+"post_attention_norm.weight", d)
		norm(p+"ffn_norm.weight", d)
		mat(p+"ffn_gate.weight", d, f, s)
		mat(p+"ffn_up.weight", d, f, s)
		mat(p+"ffn_down.weight", f, d, 1/float32(math.Sqrt(float64(c.FFN))))
		norm(p+"post_ffw_norm.weight", d)
	}
	norm("output_norm.weight", d)
	return kvs, ts, nil
}

// gemmaConfig is c as a Gemma3Config (GenConfig with Arch gemma3 or
// gemma2). Fields Gemma files do not have must be unset.
func (c GenConfig) gemmaConfig() (Gemma3Config, error) {
	if c.Tied || c.RopeFreqs || c.LongRoPE || (c.RopeScaling != "" && c.RopeScaling != "linear") || c.Tokenizer != nil || c.Experts != 0 {
		return Gemma3Config{}, fmt.Errorf("%w: generate %s: tied, rope-freqs, long-rope, rope-scaling other than linear, a tokenizer and experts are not for gemma (its head is always tied)", ErrShape, c.Arch)
	}
	scaling := float32(0)
	if c.RopeScaling == "linear" {
		scaling = c.RopeScalingFactor
		if !(scaling > 0) {
			return Gemma3Config{}, fmt.Errorf("%w: generate %s: rope-scaling-factor %v", ErrShape, c.Arch, scaling)
		}
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads // as for the other architectures
	}
	return Gemma3Config{Arch: c.Arch, Name: c.Name, Layers: c.Layers, Dim: c.Dim, Heads: c.Heads, KVHeads: c.KVHeads,
		HeadDim: c.HeadDim, FFN: c.FFN, Vocab: c.Vocab, Context: c.Context, SlidingWindow: c.SlidingWindow,
		RopeBase: c.RopeBase, NormEps: c.NormEps, Seed: c.Seed, DType: c.DType, Mix: c.Mix, LinearScaling: scaling}, nil
}
