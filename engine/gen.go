package engine

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"strings"
)

// GenConfig is the shape of a random-weight model.
type GenConfig struct {
	Arch     string // "llama", "qwen2", "qwen3", "qwen3moe", "phi3", "gemma3", "gemma2", "gpt-oss" or "deepseek2"
	Name     string // general.name; default "strata-random-<arch>"
	Layers   int
	Dim      int // embedding length
	Heads    int
	KVHeads  int // 0: same as Heads
	FFN      int
	Vocab    int
	Context  int // context_length; 0: 2048
	RopeBase float32
	NormEps  float32
	Seed     uint64
	DType    DType // type of the 2-D weights; norms and biases stay F32
	// Mix, "q4_k_m" or "q5_k_m", picks each 2-D weight's type as
	// llama.cpp does for those file types (DType is then ignored);
	// "mxfp4_moe" writes the FFN weights in MXFP4 and the rest in Q8_0,
	// as llama.cpp's MXFP4_MOE does with a MoE model's experts (our dense
	// FFN standing in for them).
	Mix  string
	Tied bool // no output.weight: the head reuses token_embd
	// HeadDim, when set, is a head size other than Dim/Heads, written as
	// attention.key_length (as qwen3 files do).
	HeadDim int
	// RopeFreqs writes rope_freqs.weight with Llama 3.1's RoPE scaling
	// (factor 8, low/high frequency factors 1 and 4, 8192 original context).
	RopeFreqs bool
	// LongRoPE (phi3 only) writes rope_factors_short/long.weight and
	// rope.scaling.attn_factor as the 128k Phi-3 models and Phi-3.5 mini
	// have them: Context becomes rope.scaling.original_context_length and
	// context_length is 32 times it.
	LongRoPE bool
	// RopeScaling, "linear" or "yarn" (llama, qwen2 and qwen3), writes
	// rope.scaling.type, rope.scaling.factor (RopeScalingFactor) and
	// rope.scaling.original_context_length (RopeOrigContext; 0: Context
	// divided by the factor), as converted Qwen2.5/Qwen3 files with YaRN
	// have them.
	RopeScaling       string
	RopeScalingFactor float32
	RopeOrigContext   int
	// Tokenizer, when set, is the tokenizer metadata to write instead of
	// the generated vocabulary (see HFTokenizerKVs); Vocab must be its
	// number of tokens.
	Tokenizer []KV
	// Experts > 0 writes a mixture of experts (qwen3moe, or llama as
	// Mixtral): ExpertsUsed of Experts experts per token, each ExpertFFN
	// wide (llama: FFN); see gen_moe.go.
	Experts, ExpertsUsed, ExpertFFN int
	// SlidingWindow is attention.sliding_window: gemma3's and gemma2's
	// local layers' window (0: 512); gpt-oss's even layers' (0: 128, as
	// the released models).
	SlidingWindow int
	// DeepSeek2 shapes a deepseek2 model (gen_deepseek2.go).
	DeepSeek2 DeepSeek2Gen
}

// DefaultGenConfig is a tiny llama that tests run in milliseconds.
func DefaultGenConfig() GenConfig {
	return GenConfig{Arch: "llama", Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, FFN: 160, Vocab: 512,
		Context: 2048, RopeBase: 10000, NormEps: 1e-5, Seed: 1, DType: F32}
}

func (c GenConfig) withDefaults() GenConfig {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.Context == 0 {
		c.Context = 2048
	}
	if c.RopeBase == 0 {
		switch c.Arch {
		case "llama", "phi3":
			c.RopeBase = 10000
		case "gpt-oss":
			c.RopeBase = 150000 // as gpt-oss-20b and -120b
		default:
			c.RopeBase = 1000000
		}
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
		if c.Arch != "llama" && c.Arch != "phi3" && c.Arch != "gpt-oss" {
			c.NormEps = 1e-6
		}
	}
	if c.Arch == "gpt-oss" && c.SlidingWindow == 0 {
		c.SlidingWindow = 128
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.Name == "" {
		c.Name = "strata-random-" + c.Arch
	}
	return c
}

func (c GenConfig) validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: generate %s: %s = %v", ErrShape, c.Arch, f, v) }
	switch {
	case c.Arch != "llama" && c.Arch != "qwen2" && c.Arch != "qwen3" && c.Arch != "qwen3moe" && c.Arch != "phi3" && c.Arch != "gpt-oss":
		return fmt.Errorf("%w: %q (want llama, qwen2, qwen3, qwen3moe, phi3, gemma3, gemma2 or gpt-oss)", ErrUnsupportedArch, c.Arch)
	case c.SlidingWindow < 0 || c.SlidingWindow > 0 && c.Arch != "gpt-oss":
		return bad("sliding-window (gemma3, gemma2 and gpt-oss only, > 0)", c.SlidingWindow)
	case c.Layers <= 0:
		return bad("layers", c.Layers)
	case c.Heads <= 0 || c.Dim <= 0 || c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return bad("dim/heads/head-dim", fmt.Sprintf("%d/%d/%d", c.Dim, c.Heads, c.HeadDim))
	case c.RopeFreqs && c.Arch != "llama":
		return bad("rope-freqs", "only for llama")
	case c.LongRoPE && c.Arch != "phi3":
		return bad("long-rope", "only for phi3")
	case c.RopeScaling != "" && c.RopeScaling != "linear" && c.RopeScaling != "yarn":
		return bad("rope-scaling (want linear or yarn)", c.RopeScaling)
	case c.RopeScaling != "" && (c.Arch == "phi3" || c.RopeFreqs):
		return bad("rope-scaling", "not with phi3 or rope-freqs")
	case c.RopeScaling != "" && (!(c.RopeScalingFactor > 0) || math.IsInf(float64(c.RopeScalingFactor), 0)):
		return bad("rope-scaling-factor", c.RopeScalingFactor)
	case c.RopeOrigContext < 0:
		return bad("rope-orig-ctx", c.RopeOrigContext)
	case c.Arch == "phi3" && c.HeadDim*c.Heads != c.Dim:
		return bad("head-dim (phi3 needs heads × head size = dim)", c.HeadDim)
	case c.Arch == "phi3" && c.Tokenizer == nil && c.Vocab < minVocab+len(phi3Specials):
		return bad("vocab", c.Vocab)
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return bad("kv-heads", c.KVHeads)
	case c.FFN <= 0:
		return bad("ffn", c.FFN)
	case c.Vocab < minVocab:
		return bad("vocab", c.Vocab)
	case c.Mix != "" && c.Mix != "q4_k_m" && c.Mix != "q5_k_m" && c.Mix != "mxfp4_moe":
		return fmt.Errorf("%w: generate mix %q (want q4_k_m, q5_k_m or mxfp4_moe)", ErrUnsupportedType, c.Mix)
	case c.Mix == "" && !c.DType.Supported():
		return fmt.Errorf("%w: generate %s", ErrUnsupportedType, c.DType)
	case c.Mix != "" && (c.Dim%32 != 0 || c.FFN%32 != 0):
		return bad("dim/ffn ("+c.Mix+" needs multiples of 32)", fmt.Sprintf("%d/%d", c.Dim, c.FFN))
	case c.Mix == "" && (c.Dim%dtypes[c.DType].block != 0 || c.FFN%dtypes[c.DType].block != 0):
		return bad(fmt.Sprintf("dim/ffn (%s needs multiples of %d)", c.DType, dtypes[c.DType].block), fmt.Sprintf("%d/%d", c.Dim, c.FFN))
	}
	return c.validateMoE()
}

// GenerateFile writes a random-weight model to path.
func GenerateFile(path string, c GenConfig) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Generate(f, c); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// FileLayout is how a model is laid out in files.
type FileLayout struct {
	// Alignment is general.alignment, a power of two; 0: GGUF's default,
	// 32 bytes.
	Alignment uint32
	// SplitMaxTensors, when > 0, splits the model into parts of at most
	// that many tensors, as llama-gguf-split --split-max-tensors does.
	SplitMaxTensors int
}

// GenerateFiles writes a random-weight model laid out as l and returns the
// paths written: path itself, or for a split model the parts
// SplitPath(prefix, i, n), prefix being path without its .gguf suffix.
func GenerateFiles(path string, c GenConfig, l FileLayout) ([]string, error) {
	kvs, ts, err := genParts(c)
	if err != nil {
		return nil, err
	}
	if l.Alignment != 0 {
		for i := range kvs {
			if kvs[i].Key == "general.alignment" {
				kvs[i].Value = l.Alignment
			}
		}
	}
	if l.SplitMaxTensors <= 0 {
		return []string{path}, writeFile(path, func(w io.Writer) error { return WriteGGUF(w, kvs, ts) })
	}
	prefix := strings.TrimSuffix(path, ".gguf")
	var paths []string
	err = WriteSplitGGUF(func(i, n int) (io.WriteCloser, error) {
		p := SplitPath(prefix, i, n)
		paths = append(paths, p)
		return os.Create(p)
	}, kvs, ts, l.SplitMaxTensors)
	if err != nil {
		for _, p := range paths {
			os.Remove(p)
		}
		return nil, err
	}
	return paths, nil
}

// writeFile writes path with write, removing it if write fails.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// Generate writes a random-weight model with llama.cpp's tensor names and
// metadata keys. The same config always gives the same bytes.
func Generate(w io.Writer, c GenConfig) error {
	kvs, ts, err := genParts(c)
	if err != nil {
		return err
	}
	return WriteGGUF(w, kvs, ts)
}

// genParts is the metadata and tensors of a generated model.
func genParts(c GenConfig) ([]KV, []WriteTensor, error) {
	if c.Arch == "gemma3" || c.Arch == "gemma2" {
		gc, err := c.gemmaConfig()
		if err != nil {
			return nil, nil, err
		}
		return gemmaParts(gc)
	}
	if c.Arch == "deepseek2" {
		return deepseek2Parts(c)
	}
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	headDim := c.HeadDim
	kvDim := headDim * c.KVHeads
	qDim := headDim * c.Heads
	a := c.Arch
	fileType := fileTypes[c.DType]
	if c.Mix != "" {
		fileType = map[string]uint32{"q4_k_m": 15, "q5_k_m": 17, "mxfp4_moe": 38}[c.Mix]
	}
	ctxLen := c.Context
	if c.LongRoPE {
		ctxLen = 32 * c.Context
	}
	kvs := []KV{
		{"general.architecture", a},
		{"general.name", c.Name},
		{"general.file_type", fileType},
		{"general.quantization_version", uint32(2)},
		{"general.alignment", uint32(ggufDefaultAlign)},
		{a + ".context_length", uint32(ctxLen)},
		{a + ".embedding_length", uint32(c.Dim)},
		{a + ".block_count", uint32(c.Layers)},
		{a + ".feed_forward_length", uint32(c.FFN)},
		{a + ".attention.head_count", uint32(c.Heads)},
		{a + ".attention.head_count_kv", uint32(c.KVHeads)},
		{a + ".rope.freq_base", c.RopeBase},
		{a + ".rope.dimension_count", uint32(headDim)},
		{a + ".attention.key_length", uint32(headDim)},
		{a + ".attention.value_length", uint32(headDim)},
		{a + ".attention.layer_norm_rms_epsilon", c.NormEps},
		{a + ".vocab_size", uint32(c.Vocab)},
		{"strata.generator.seed", c.Seed},
	}
	if a == "phi3" {
		// As convert_hf_to_gguf.py writes Phi-3: the original context
		// always, the window of the 4k models (not applied; see HParams),
		// and LongRoPE's attention factor √(1 + ln s / ln orig).
		window := c.Context - 1 // Phi-3-mini-4k: 2047 of 4096
		if c.LongRoPE {
			window = 2 * ctxLen // Phi-3-mini-128k: 262144
		}
		kvs = append(kvs, KV{a + ".rope.scaling.original_context_length", uint32(c.Context)},
			KV{a + ".attention.sliding_window", uint32(window)})
		if c.LongRoPE {
			kvs = append(kvs, KV{a + ".rope.scaling.attn_factor",
				float32(math.Sqrt(1 + math.Log(float64(ctxLen)/float64(c.Context))/math.Log(float64(c.Context))))})
		}
	}
	if c.RopeScaling != "" {
		orig := c.RopeOrigContext
		if orig == 0 {
			orig = max(1, int(float32(c.Context)/c.RopeScalingFactor))
		}
		kvs = append(kvs, KV{a + ".rope.scaling.type", c.RopeScaling}, KV{a + ".rope.scaling.factor", c.RopeScalingFactor},
			KV{a + ".rope.scaling.original_context_length", uint32(orig)})
	}
	if a == "gpt-oss" {
		kvs = append(kvs, KV{a + ".attention.sliding_window", uint32(c.SlidingWindow)})
	}
	kvs = append(kvs, c.moeKVs()...)
	if c.Tokenizer != nil {
		kvs = append(kvs, c.Tokenizer...)
	} else {
		v, err := buildVocab(c.Arch, c.Vocab)
		if err != nil {
			return nil, nil, err
		}
		kvs = append(kvs, vocabKVs(v, chatTemplates[c.Arch])...)
	}
	d, f, vv := uint64(c.Dim), uint64(c.FFN), uint64(c.Vocab)
	var ts []WriteTensor
	mat := func(name string, cols, rows uint64, scale float32) {
		t := c.DType
		if c.Mix != "" {
			t = mixType(c.Mix, name, c.Layers, int(cols), c.Experts)
		}
		ts = append(ts, randTensor(name, []uint64{cols, rows}, t, c.Seed, scale, 0))
	}
	mat3 := func(name string, cols, rows, n uint64, scale float32) {
		t := c.DType
		if c.Mix != "" {
			t = mixType(c.Mix, name, c.Layers, int(cols), c.Experts)
		}
		ts = append(ts, randTensor(name, []uint64{cols, rows, n}, t, c.Seed, scale, 0))
	}
	vec := func(name string, n uint64, scale, bias float32) {
		ts = append(ts, randTensor(name, []uint64{n}, F32, c.Seed, scale, bias))
	}
	mat("token_embd.weight", d, vv, 1)
	if c.LongRoPE {
		short, long := phi3RopeFactors(headDim)
		for _, t := range []struct {
			name string
			v    []float32
		}{{"rope_factors_long.weight", long}, {"rope_factors_short.weight", short}} {
			ts = append(ts, WriteTensor{Name: t.name, Dims: []uint64{uint64(headDim / 2)}, Type: F32,
				Data: func(w io.Writer) error { return binary.Write(w, binary.LittleEndian, t.v) }})
		}
	}
	if c.RopeFreqs {
		ts = append(ts, WriteTensor{Name: "rope_freqs.weight", Dims: []uint64{uint64(headDim / 2)}, Type: F32,
			Data: func(w io.Writer) error {
				return binary.Write(w, binary.LittleEndian, llama3RopeFactors(c.RopeBase, headDim))
			}})
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		s := 1 / float32(math.Sqrt(float64(c.Dim)))
		vec(p+"attn_norm.weight", d, 0.2, 1)
		if a == "phi3" {
			mat(p+"attn_qkv.weight", d, uint64(qDim+2*kvDim), s)
		} else {
			mat(p+"attn_q.weight", d, uint64(qDim), s)
			mat(p+"attn_k.weight", d, uint64(kvDim), s)
			mat(p+"attn_v.weight", d, uint64(kvDim), s)
		}
		if a == "qwen3" || a == "qwen3moe" {
			vec(p+"attn_q_norm.weight", uint64(headDim), 0.2, 1)
			vec(p+"attn_k_norm.weight", uint64(headDim), 0.2, 1)
		}
		if a == "qwen2" || a == "gpt-oss" {
			vec(p+"attn_q.bias", uint64(qDim), 0.1, 0)
			vec(p+"attn_k.bias", uint64(kvDim), 0.1, 0)
			vec(p+"attn_v.bias", uint64(kvDim), 0.1, 0)
		}
		mat(p+"attn_output.weight", uint64(qDim), d, s)
		if a == "gpt-oss" {
			c.gptossTensors(p, func(t WriteTensor) { ts = append(ts, t) }, mat3)
			continue
		}
		vec(p+"ffn_norm.weight", d, 0.2, 1)
		if c.Experts > 0 {
			c.moeTensors(p, func(t WriteTensor) { ts = append(ts, t) }, mat3)
			continue
		}
		if a == "phi3" {
			mat(p+"ffn_up.weight", d, 2*f, s) // gate rows, then up rows
		} else {
			mat(p+"ffn_gate.weight", d, f, s)
			mat(p+"ffn_up.weight", d, f, s)
		}
		mat(p+"ffn_down.weight", f, d, 1/float32(math.Sqrt(float64(c.FFN))))
	}
	vec("output_norm.weight", d, 0.2, 1)
	if !c.Tied {
		mat("output.weight", d, vv, 2/float32(math.Sqrt(float64(c.Dim))))
	}
	return kvs, ts, nil
}

// vocabKVs is the tokenizer metadata of a generated vocabulary.
func vocabKVs(v *vocab, template string) []KV {
	kvs := []KV{{"tokenizer.ggml.model", v.model}}
	if v.model == "gpt2" {
		kvs = append(kvs, KV{"tokenizer.ggml.pre", "qwen2"})
	} else {
		kvs = append(kvs, KV{"tokenizer.ggml.pre", "default"})
	}
	kvs = append(kvs, KV{"tokenizer.ggml.tokens", v.tokens})
	if v.scores != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.scores", v.scores})
	}
	kvs = append(kvs, KV{"tokenizer.ggml.token_type", v.types})
	if v.merges != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.merges", v.merges})
	}
	kvs = append(kvs,
		KV{"tokenizer.ggml.bos_token_id", uint32(v.bos)},
		KV{"tokenizer.ggml.eos_token_id", uint32(v.eos)},
		KV{"tokenizer.ggml.add_bos_token", v.addBOS},
		KV{"tokenizer.ggml.add_eos_token", false})
	if v.unk >= 0 {
		kvs = append(kvs, KV{"tokenizer.ggml.unknown_token_id", uint32(v.unk)})
	}
	if template == "" {
		template = chatTemplates[v.model]
	}
	kvs = append(kvs, KV{"tokenizer.chat_template", template})
	return kvs
}

// randTensor is a tensor of uniform values in bias ± scale·√3 (unit variance
// times scale), seeded by the model seed and the tensor's name.
func randTensor(name string, dims []uint64, t DType, seed uint64, scale, bias float32) WriteTensor {
	return WriteTensor{Name: name, Dims: dims, Type: t, Data: func(w io.Writer) error {
		h := fnv.New64a()
		h.Write([]byte(name))
		rng := seed ^ h.Sum64()
		cols := int(dims[0])
		rows := 1
		for _, d := range dims[1:] {
			rows *= int(d)
		}
		row := make([]float32, cols)
		buf := make([]byte, 0, cols*4)
		for r := 0; r < rows; r++ {
			for i := range row {
				u := float32(splitmix(&rng)>>40)/(1<<24)*2 - 1
				row[i] = bias + u*scale*1.7320508
			}
			buf = encodeRow(buf[:0], row, t)
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return nil
	}}
}

// encodeRow appends one row of values in type t (F32, F16, BF16 or Q8_0).
func encodeRow(dst []byte, row []float32, t DType) []byte {
	le := binary.LittleEndian
	switch t {
	case F32:
		for _, x := range row {
			dst = le.AppendUint32(dst, math.Float32bits(x))
		}
	case F16:
		for _, x := range row {
			dst = le.AppendUint16(dst, f32ToF16(x))
		}
	case BF16:
		for _, x := range row {
			dst = le.AppendUint16(dst, f32ToBF16(x))
		}
	case Q8_0:
		var q [32]int8
		for b := 0; b+32 <= len(row); b += 32 {
			d := quantizeQ8Block(row[b:b+32], q[:])
			dst = le.AppendUint16(dst, d)
			for _, v := range q {
				dst = append(dst, byte(v))
			}
		}
	default:
		n := dtypes[t].block
		for b := 0; b+n <= len(row); b += n {
			dst = quantizeBlock(dst, row[b:b+n], t)
		}
	}
	return dst
}

// fileTypes is general.file_type (llama.cpp's llama_ftype) for a file of
// one weight type.
var fileTypes = map[DType]uint32{F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9,
	Q4_K: 14, Q5_K: 16, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30, BF16: 32, MXFP4: 38}

// mixType is a weight's type in a Q4_K_M or Q5_K_M file, after llama.cpp's
// llama_tensor_get_type: the head in Q6_K; attn_v and ffn_down in Q6_K on
// the first and last eighth of the layers and every third layer between
// (use_more_bits), phi3's fused attn_qkv one K type up (Q5_K, Q6_K), the
// rest in the base K type; and rows that are not whole
// 256-blocks fall back to Q5_0/Q5_1 (base) or Q8_0 (Q6_K).
// In a file with 8 experts (Mixtral), attn_v and attn_k are Q8_0 and a
// Q4_K_M file's attn_output Q5_K; ffn_down_exps follows ffn_down's rule.
// mxfp4_moe is llama.cpp's MXFP4_MOE: the experts in MXFP4, the rest in
// Q8_0; in a file without experts, the FFN weights stand in for them.
func mixType(mix, name string, layers, cols, experts int) DType {
	if mix == "mxfp4_moe" {
		if strings.HasPrefix(name, "blk.") && (strings.Contains(name, "_exps.") || experts == 0 && strings.Contains(name, ".ffn_")) {
			return MXFP4
		}
		return Q8_0
	}
	base := Q4_K
	if mix == "q5_k_m" {
		base = Q5_K
	}
	t := base
	var l int
	switch {
	case name == "output.weight":
		t = Q6_K
	case strings.Contains(name, "attn_qkv.weight"):
		// phi3's fused QKV: one K-type step up, on every layer.
		t = Q5_K
		if mix == "q5_k_m" {
			t = Q6_K
		}
	case experts == 8 && (strings.Contains(name, "attn_v.weight") || strings.Contains(name, "attn_k.weight")):
		t = Q8_0
	case experts == 8 && mix == "q4_k_m" && strings.Contains(name, "attn_output.weight"):
		t = Q5_K
	case strings.Contains(name, "attn_v.weight") || strings.Contains(name, "ffn_down"):
		if _, err := fmt.Sscanf(name, "blk.%d.", &l); err == nil &&
			(l < layers/8 || l >= 7*layers/8 || (l-layers/8)%3 == 2) {
			t = Q6_K
		}
	}
	if cols%256 != 0 {
		switch t {
		case Q6_K:
			return Q8_0
		case Q4_K:
			return Q5_0
		case Q5_K:
			return Q5_1
		}
	}
	return t
}

// splitmix is SplitMix64: a tiny, fast, well-mixed generator whose output is
// a pure function of its state, which is all that reproducibility needs.
func splitmix(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// chatTemplates are the Jinja templates written to tokenizer.chat_template,
// the same formats the built-in ChatPrompt renders.
var chatTemplates = map[string]string{
	"gpt2": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
	// phi3: Phi-3.5-mini-instruct's own template.
	"phi3": "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}" +
		"{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}" +
		"{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}" +
		"{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
	"llama": "{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
		"{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' }}" +
		"{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}",
}

// phi3RopeFactors are LongRoPE factors of Phi-3.5 mini's shape: short ones
// rising gently from 1, long ones steeply (only the short ones are used).
func phi3RopeFactors(headDim int) (short, long []float32) {
	n := headDim / 2
	short, long = make([]float32, n), make([]float32, n)
	for i := range short {
		x := float64(i) / float64(max(n-1, 1))
		short[i] = float32(1 + 2*x*x)
		long[i] = float32(1 + 60*x*x*x)
	}
	return short, long
}

// llama3RopeFactors are the divisors Llama 3.1's conversion writes to
// rope_freqs.weight: 1 for short wavelengths, 8 for long ones, and a
// smooth blend between (factor 8, low and high frequency factors 1 and 4,
// original context 8192).
func llama3RopeFactors(base float32, headDim int) []float32 {
	const factor, lowFF, highFF, oldCtx = 8.0, 1.0, 4.0, 8192.0
	out := make([]float32, headDim/2)
	for i := range out {
		freq := 1 / math.Pow(float64(base), float64(2*i)/float64(headDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < oldCtx/highFF:
			out[i] = 1
		case wavelen > oldCtx/lowFF:
			out[i] = factor
		default:
			smooth := (oldCtx/wavelen - lowFF) / (highFF - lowFF)
			out[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}
