package engine

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
)

// GenConfig is the shape of a random-weight model.
type GenConfig struct {
	Arch     string // "llama" or "qwen2"
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
	Tied     bool  // no output.weight: the head reuses token_embd
	// Tokenizer, when set, is the tokenizer metadata to write instead of
	// the generated vocabulary (see HFTokenizerKVs); Vocab must be its
	// number of tokens.
	Tokenizer []KV
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
		c.RopeBase = 10000
		if c.Arch == "qwen2" {
			c.RopeBase = 1000000
		}
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
		if c.Arch == "qwen2" {
			c.NormEps = 1e-6
		}
	}
	if c.Name == "" {
		c.Name = "strata-random-" + c.Arch
	}
	return c
}

func (c GenConfig) validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: generate %s: %s = %v", ErrShape, c.Arch, f, v) }
	switch {
	case c.Arch != "llama" && c.Arch != "qwen2":
		return fmt.Errorf("%w: %q (want llama or qwen2)", ErrUnsupportedArch, c.Arch)
	case c.Layers <= 0:
		return bad("layers", c.Layers)
	case c.Heads <= 0 || c.Dim <= 0 || c.Dim%c.Heads != 0 || (c.Dim/c.Heads)%2 != 0:
		return bad("dim/heads", fmt.Sprintf("%d/%d", c.Dim, c.Heads))
	case c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return bad("kv-heads", c.KVHeads)
	case c.FFN <= 0:
		return bad("ffn", c.FFN)
	case c.Vocab < minVocab:
		return bad("vocab", c.Vocab)
	case !c.DType.Supported():
		return fmt.Errorf("%w: %s", ErrUnsupportedType, c.DType)
	case c.DType == Q8_0 && (c.Dim%32 != 0 || c.FFN%32 != 0):
		return bad("dim/ffn (Q8_0 needs multiples of 32)", fmt.Sprintf("%d/%d", c.Dim, c.FFN))
	}
	return nil
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
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, nil, err
	}
	headDim := c.Dim / c.Heads
	kvDim := headDim * c.KVHeads
	a := c.Arch
	fileType := map[DType]uint32{F32: 0, F16: 1, Q8_0: 7, BF16: 32}[c.DType]
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
		{a + ".rope.freq_base", c.RopeBase},
		{a + ".rope.dimension_count", uint32(headDim)},
		{a + ".attention.layer_norm_rms_epsilon", c.NormEps},
		{a + ".vocab_size", uint32(c.Vocab)},
		{"strata.generator.seed", c.Seed},
	}
	if c.Tokenizer != nil {
		kvs = append(kvs, c.Tokenizer...)
	} else {
		v, err := buildVocab(c.Arch, c.Vocab)
		if err != nil {
			return nil, nil, err
		}
		kvs = append(kvs, vocabKVs(v)...)
	}
	d, f, vv := uint64(c.Dim), uint64(c.FFN), uint64(c.Vocab)
	var ts []WriteTensor
	mat := func(name string, cols, rows uint64, scale float32) {
		ts = append(ts, randTensor(name, []uint64{cols, rows}, c.DType, c.Seed, scale, 0))
	}
	vec := func(name string, n uint64, scale, bias float32) {
		ts = append(ts, randTensor(name, []uint64{n}, F32, c.Seed, scale, bias))
	}
	mat("token_embd.weight", d, vv, 1)
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		s := 1 / float32(math.Sqrt(float64(c.Dim)))
		vec(p+"attn_norm.weight", d, 0.2, 1)
		mat(p+"attn_q.weight", d, d, s)
		mat(p+"attn_k.weight", d, uint64(kvDim), s)
		mat(p+"attn_v.weight", d, uint64(kvDim), s)
		if a == "qwen2" {
			vec(p+"attn_q.bias", d, 0.1, 0)
			vec(p+"attn_k.bias", uint64(kvDim), 0.1, 0)
			vec(p+"attn_v.bias", uint64(kvDim), 0.1, 0)
		}
		mat(p+"attn_output.weight", d, d, s)
		vec(p+"ffn_norm.weight", d, 0.2, 1)
		mat(p+"ffn_gate.weight", d, f, s)
		mat(p+"ffn_up.weight", d, f, s)
		mat(p+"ffn_down.weight", f, d, 1/float32(math.Sqrt(float64(c.FFN))))
	}
	vec("output_norm.weight", d, 0.2, 1)
	if !c.Tied {
		mat("output.weight", d, vv, 2/float32(math.Sqrt(float64(c.Dim))))
	}
	return kvs, ts, nil
}

// vocabKVs is the tokenizer metadata of a generated vocabulary.
func vocabKVs(v *vocab) []KV {
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
	kvs = append(kvs, KV{"tokenizer.chat_template", chatTemplates[v.model]})
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
	}
	return dst
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
	"llama": "{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}" +
		"{% elif message['role'] == 'system' %}{{ '<<SYS>>\n' + message['content'] + '\n<</SYS>>\n\n' }}" +
		"{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}",
}
