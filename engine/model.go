package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"

	"github.com/stratanet/strata/layers"
)

// HParams are a model's hyper-parameters as read from GGUF metadata.
type HParams struct {
	Arch     string
	Name     string
	Layers   int
	Dim      int
	Heads    int
	KVHeads  int
	HeadDim  int
	FFN      int
	Vocab    int
	Context  int
	RopeBase float32
	NormEps  float32
	// NeoxRope rotates pairs (i, i+d/2) (qwen2); otherwise consecutive pairs
	// (2i, 2i+1), as GGUF stores llama's Q and K.
	NeoxRope bool
	QKVBias  bool
	// QKNorm applies an RMSNorm to each head of Q and K before RoPE (qwen3).
	QKNorm bool
	// RopeFactors: the file has rope_freqs.weight, per-dimension divisors
	// of RoPE's frequencies (Llama 3.1 and later bake their scaling there).
	RopeFactors bool
	// LongRoPE: the file has rope_factors_short/long.weight (phi3's 128k
	// models, Phi-3.5 mini). The engine uses the short factors, as
	// llama.cpp does for a context up to the original one, and Context is
	// then that original context (TrainContext keeps context_length).
	LongRoPE     bool
	TrainContext int
	// RopeAttnFactor scales RoPE's cos and sin (rope.scaling.attn_factor,
	// which LongRoPE files set); 1 when absent.
	RopeAttnFactor float32
	// RopeScaling is the RoPE scaling applied (rope.scaling.type): "" for
	// none, "linear" or "yarn". RopeFreqScale is 1/rope.scaling.factor (1
	// without scaling) and RopeOrigContext YaRN's original context
	// (rope.scaling.original_context_length; context_length without).
	RopeScaling     string
	RopeFreqScale   float32
	RopeOrigContext int
	// YaRN's parameters: llama.cpp's rope.scaling.yarn_* keys where it
	// reads them (yarnKeys: of the architectures run here, deepseek2's
	// log multiplier), else its defaults (ext_factor 1 for yarn and 0 for
	// linear, attn_factor 1, beta_fast 32, beta_slow 1, log multiplier 0).
	YarnExtFactor, YarnAttnFactor, YarnBetaFast, YarnBetaSlow, YarnLogMul float32
	// SlidingWindow is attention.sliding_window as the file declares it.
	// gemma2 and gemma3 apply it on their local layers; phi3's is not
	// applied: llama.cpp disables Phi-3's sliding window too
	// (ggml-org/llama.cpp#13676), so full attention matches its output.
	SlidingWindow int
	// AttnSoftCap and FinalSoftCap are gemma2's attention and final logit
	// soft-capping (c·tanh(s/c); 0: none). Both engines apply FinalSoftCap
	// to the logits.
	AttnSoftCap, FinalSoftCap float32
	// QueryScale multiplies Q after RoPE (gemma's query_pre_attn_scalar,
	// as llama.cpp derives it); 0 where the architecture does not use it.
	QueryScale float32
	// Experts > 0 makes every layer's FFN a mixture of experts (qwen3moe,
	// and llama files with experts, as Mixtral's): a router picks
	// ExpertsUsed of Experts SwiGLU experts of width ExpertFFN per token
	// (moe.go). FFN is then feed_forward_length as the file declares it.
	Experts, ExpertsUsed, ExpertFFN int
	// SharedExperts (of width SharedFFN) and LeadingDense layers are read
	// for the families that have them (deepseek2, qwen2moe); only
	// deepseek2 runs them (Arch.DeepSeekMoE), the others are refused.
	SharedExperts, SharedFFN, LeadingDense int
	// deepseek2's routing: ExpertGating is expert_gating_func (1 softmax,
	// 2 sigmoid); ExpertGroups and GroupsUsed its group-limited top-k
	// (0: none); ExpertWeightsNorm renormalises the chosen weights and
	// ExpertWeightsScale multiplies them.
	ExpertGating, ExpertGroups, GroupsUsed int
	ExpertWeightsNorm                      bool
	ExpertWeightsScale                     float32
	// deepseek2's multi-head latent attention (arch_deepseek2.go): the
	// ranks of the Q and KV projections (QLoraRank 0: a plain attn_q, as
	// llama.cpp's 26- and 27-layer "lite" models), a head's RoPE and
	// non-RoPE parts of Q·K, its V width, and MLA: the file splits kv_b
	// into attn_k_b and attn_v_b, which the engines run absorbed (HeadDim
	// is then KVLoraRank+RopeDims over KVHeads 1, and V is the latent).
	QLoraRank, KVLoraRank, RopeDims, NopeDims, VHeadDim int
	MLA                                                 bool
}

// MoE reports whether the model's FFNs are mixtures of experts.
func (h HParams) MoE() bool { return h.Experts > 0 }

// KVDim is the width of one token's K (or V) in one layer.
func (h HParams) KVDim() int { return h.KVHeads * h.HeadDim }

// VHead is the width of one V head as an engine that caches V apart
// from K holds it: HeadDim, or deepseek2's (with MLA, the latent).
func (h HParams) VHead() int {
	switch {
	case h.Arch != "deepseek2":
		return h.HeadDim
	case h.MLA:
		return h.KVLoraRank
	}
	return h.VHeadDim
}

// CacheDims are the widths of what one layer caches per token: K and V,
// both KVDim, except for deepseek2: with MLA, the latent and its RoPE
// part only (K; V is K's latent part, v 0); without, V's own width.
func (h HParams) CacheDims() (k, v int) {
	switch {
	case h.Arch != "deepseek2":
		return h.KVDim(), h.KVDim()
	case h.MLA:
		return h.KVDim(), 0
	}
	return h.KVDim(), h.KVHeads * h.VHeadDim
}

// QDim is the width of one token's Q (and attention output) in one layer:
// Dim, unless the file sets a head size of its own (qwen3's key_length).
func (h HParams) QDim() int { return h.Heads * h.HeadDim }

// Spec returns the hyper-parameters as package layers models them, for
// weights of the given bytes per parameter.
func (h HParams) Spec(bytesPerParam float64) (layers.ModelSpec, error) {
	hp := layers.HyperParams{Name: h.Name, Layers: h.Layers, Hidden: h.Dim, Heads: h.Heads, KVHeads: h.KVHeads,
		HeadDim: h.HeadDim, FFN: h.FFN, Vocab: h.Vocab, BytesPerParam: bytesPerParam, KVBytes: 4}
	if h.MoE() {
		// Memory counts every expert, compute the used ones (package layers).
		hp.Experts, hp.ActiveExperts, hp.ExpertFFN = h.Experts, h.ExpertsUsed, h.ExpertFFN
		hp.SharedExperts, hp.DenseLayers = h.SharedExperts, h.LeadingDense
	}
	if h.Arch == "deepseek2" {
		// Package layers counts MLA's weights and its cache (the latent
		// and the RoPE part, as the Go engine holds it); a kv_b file's
		// engines cache every head's K and V.
		hp.KVHeads, hp.HeadDim = h.Heads, h.NopeDims+h.RopeDims
		if h.MLA {
			hp.HeadDim, hp.VHeadDim, hp.KVLoRARank, hp.RopeHeadDim, hp.QLoRARank = h.NopeDims, h.VHeadDim, h.KVLoraRank, h.RopeDims, h.QLoraRank
		}
	}
	return layers.NewModelSpec(hp)
}

// uintKey reads the integer metadata key, def where the file lacks it
// (def < 0: the key is required).
func uintKey(f *File, key string, def int) (int, error) {
	n, err := f.Uint(key)
	if err != nil {
		if _, present := f.Get(key); present || def < 0 {
			return 0, err
		}
		n = uint64(def)
	}
	if n > 1<<31 {
		return 0, fmt.Errorf("%w: key %q = %d is too large", ErrCorrupt, key, n)
	}
	return int(n), nil
}

// ReadHParams reads and checks the hyper-parameters of f.
func ReadHParams(f *File) (HParams, error) {
	if no, count, _, err := splitKeys(f); err != nil {
		return HParams{}, err
	} else if count > len(f.Parts) {
		return HParams{}, fmt.Errorf("%w: this is part %d of a split model of %d parts, read alone (open it with OpenFile or ReadSplit, which read all parts)", ErrSplitPart, no+1, count)
	}
	arch, err := f.String("general.architecture")
	if err != nil {
		return HParams{}, err
	}
	ad, err := Architecture(arch)
	if err != nil {
		return HParams{}, err
	}
	h := HParams{Arch: arch}
	h.Name, _ = f.String("general.name")
	geti := func(key string, dst *int, def int) error {
		n, err := uintKey(f, arch+"."+key, def)
		if err == nil {
			*dst = n
		}
		return err
	}
	getf := func(key string, dst *float32, def float64) error {
		v, err := f.Float(arch + "." + key)
		if err != nil {
			if _, present := f.Get(arch + "." + key); present {
				return err
			}
			v = def
		}
		*dst = float32(v)
		return nil
	}
	if err := geti("expert_count", &h.Experts, 0); err != nil {
		return HParams{}, err
	}
	ffnDef := -1
	if h.MoE() {
		// qwen3moe files may leave the dense width out.
		if err := geti("expert_feed_forward_length", &h.ExpertFFN, 0); err != nil {
			return HParams{}, err
		}
		if h.ExpertFFN > 0 {
			ffnDef = h.ExpertFFN
		}
	}
	for _, e := range []error{
		geti("block_count", &h.Layers, -1),
		geti("embedding_length", &h.Dim, -1),
		geti("attention.head_count", &h.Heads, -1),
		geti("feed_forward_length", &h.FFN, ffnDef),
		geti("context_length", &h.Context, 2048),
		getf("rope.freq_base", &h.RopeBase, 10000),
		getf("attention.layer_norm_rms_epsilon", &h.NormEps, 1e-5),
		getf("rope.scaling.attn_factor", &h.RopeAttnFactor, 1),
	} {
		if e != nil {
			return HParams{}, e
		}
	}
	if err := geti("attention.head_count_kv", &h.KVHeads, h.Heads); err != nil {
		return HParams{}, err
	}
	bad := func(key string, v any) (HParams, error) {
		return HParams{}, fmt.Errorf("%w: key %q = %v", ErrCorrupt, arch+"."+key, v)
	}
	switch {
	case h.Layers <= 0 || h.Layers > 1<<16:
		return bad("block_count", h.Layers)
	case h.Dim <= 0:
		return bad("embedding_length", h.Dim)
	case h.Heads <= 0 || h.Heads > h.Dim:
		return bad("attention.head_count", h.Heads)
	case h.KVHeads <= 0 || h.Heads%h.KVHeads != 0:
		return bad("attention.head_count_kv", h.KVHeads)
	case h.FFN <= 0:
		return bad("feed_forward_length", h.FFN)
	case !(h.RopeBase > 0) || math.IsInf(float64(h.RopeBase), 0):
		return bad("rope.freq_base", h.RopeBase)
	case !(h.NormEps >= 0) || h.NormEps > 1:
		return bad("attention.layer_norm_rms_epsilon", h.NormEps)
	case !(h.RopeAttnFactor > 0) || h.RopeAttnFactor > 1e3:
		return bad("rope.scaling.attn_factor", h.RopeAttnFactor)
	}
	if err := readExperts(f, &h, ad, geti); err != nil {
		return HParams{}, err
	}
	h.TrainContext = h.Context
	if err := readRopeScaling(f, &h); err != nil {
		return HParams{}, err
	}
	hd := 0
	if h.Dim%h.Heads == 0 {
		hd = h.Dim / h.Heads
	}
	if err := geti("attention.key_length", &h.HeadDim, hd); err != nil {
		return HParams{}, err
	}
	vl := h.HeadDim
	if err := geti("attention.value_length", &vl, h.HeadDim); err != nil {
		return HParams{}, err
	}
	switch {
	case h.HeadDim <= 0 || h.HeadDim%2 != 0 || h.HeadDim > 1<<14:
		return bad("attention.key_length", h.HeadDim)
	case vl != h.HeadDim && !ad.OwnHeads:
		return HParams{}, fmt.Errorf("%w: %s with value length %d ≠ key length %d", ErrUnsupportedArch, arch, vl, h.HeadDim)
	}
	rd := h.HeadDim
	if err := geti("rope.dimension_count", &rd, h.HeadDim); err != nil {
		return HParams{}, err
	}
	if rd != h.HeadDim && !ad.OwnHeads {
		return HParams{}, fmt.Errorf("%w: %s with partial RoPE (rope.dimension_count %d, head size %d)", ErrUnsupportedArch, arch, rd, h.HeadDim)
	}
	if ad.OwnHeads {
		h.VHeadDim, h.RopeDims = vl, rd
	}
	_, h.RopeFactors = f.Tensor("rope_freqs.weight")
	if ad.Read != nil {
		if err := ad.Read(f, &h); err != nil {
			return HParams{}, err
		}
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		// A slice of middle layers holds no embedding; its vocabulary
		// size is then the metadata's.
		if _, _, _, slice, err := f.SliceRange(); err != nil {
			return HParams{}, err
		} else if slice {
			v, err := f.Uint(arch + ".vocab_size")
			if err != nil {
				return HParams{}, err
			}
			if v == 0 || v > 1<<24 {
				return bad("vocab_size", v)
			}
			h.Vocab = int(v)
			return h, nil
		}
		return HParams{}, fmt.Errorf("%w: missing tensor %q", ErrCorrupt, "token_embd.weight")
	}
	if len(emb.Dims) != 2 || emb.Dims[0] != uint64(h.Dim) || emb.Dims[1] > 1<<24 {
		return HParams{}, fmt.Errorf("%w: tensor %q has dims %v, want [%d vocab]", ErrShape, emb.Name, emb.Dims, h.Dim)
	}
	h.Vocab = int(emb.Dims[1])
	if v, err := f.Uint(arch + ".vocab_size"); err == nil && v != uint64(h.Vocab) {
		return bad("vocab_size", v)
	}
	return h, nil
}

// matrix is a weight matrix of rows×cols, row-major, held as float32 (F32
// files), as Q8_0 blocks interleaved 16 rows at a time (q8il.go), or as
// the file stores it (F16, BF16 and the other quantised types).
type matrix struct {
	rows, cols int
	f          []float32
	q8         *q8il
	raw        []byte
	il         []byte // K-quant rows interleaved by 16 (kil.go), F16 by 8 (hil.go), instead of raw
	qf         *quantFormat
	typ        DType
}

func (m *matrix) bytes() int64 {
	return int64(len(m.f))*4 + m.q8.bytes() + int64(len(m.raw)) + int64(len(m.il))
}

// row dequantises row r into dst.
func (m *matrix) row(r int, dst []float32) {
	if m.f != nil {
		copy(dst, m.f[r*m.cols:(r+1)*m.cols])
		return
	}
	if m.typ == F16 || m.typ == BF16 {
		widenRow(dst[:m.cols], m.raw[2*r*m.cols:], m.typ)
		return
	}
	if m.qf != nil {
		nb := m.cols / m.qf.block
		row := m.raw[r*nb*m.qf.bytes:]
		for b := 0; b < nb; b++ {
			m.qf.dequant(dst[b*m.qf.block:(b+1)*m.qf.block], row[b*m.qf.bytes:(b+1)*m.qf.bytes])
		}
		return
	}
	m.q8.row(r, dst)
}

// rowsView is rows [lo, hi) of m, sharing m's memory: phi3's fused
// attn_qkv and gate+up tensors become the separate matrices of the llama
// graph without a copy, and each row's products stay those of the fused
// matrix (rows are independent).
func (m *matrix) rowsView(lo, hi int) *matrix {
	v := *m
	v.rows = hi - lo
	c := m.cols
	switch {
	case m.f != nil:
		v.f = m.f[lo*c : hi*c : hi*c]
	case m.typ == F16 || m.typ == BF16:
		v.raw = m.raw[2*lo*c : 2*hi*c : 2*hi*c]
	case m.qf != nil:
		rb := c / m.qf.block * m.qf.bytes
		v.raw = m.raw[lo*rb : hi*rb : hi*rb]
	default: // Q8_0
		v.q8 = m.q8.view(lo, hi)
	}
	return &v
}

// loader reads the tensors a stage needs, counting the bytes.
type loader struct {
	f *File
	// scratch holds the file's bytes of a layer tensor while they are
	// laid out anew for the kernels (settle), reused from tensor to
	// tensor: reading each into memory of its own left a stage's worth of
	// garbage behind its load (an 8B Q4_K_M stage peaked at 9.7 GB for
	// 4.9 GB of weights).
	scratch []byte
}

// read reads t's bytes: into memory of their own, or, with scratch, into
// the loader's scratch, valid until the next read.
func (l *loader) read(t *TensorInfo, scratch bool) ([]byte, error) {
	if !scratch {
		return l.f.readTensorBytes(t)
	}
	if int64(cap(l.scratch)) < t.Size {
		l.scratch = make([]byte, t.Size)
	}
	b := l.scratch[:t.Size]
	if err := l.f.ReadTensor(t, b); err != nil {
		return nil, err
	}
	return b, nil
}

// settle lays a layer's matrix out for the kernels (interleave); bytes
// it still holds as the file stores them (no interleaved layout for its
// type on this CPU) move out of the scratch into memory of their own.
func (l *loader) settle(m *matrix) {
	m.interleave()
	if m.raw != nil {
		raw := allocWeights(len(m.raw))
		copy(raw, m.raw)
		m.raw = raw
	}
}

func (l *loader) info(name string, dims ...int) (*TensorInfo, error) {
	t, ok := l.f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: missing tensor %q", ErrCorrupt, name)
	}
	if len(t.Dims) != len(dims) {
		return nil, fmt.Errorf("%w: tensor %q has dims %v, want %v", ErrShape, name, t.Dims, dims)
	}
	for i, d := range dims {
		if t.Dims[i] != uint64(d) {
			return nil, fmt.Errorf("%w: tensor %q has dims %v, want %v", ErrShape, name, t.Dims, dims)
		}
	}
	if !t.Type.Supported() {
		return nil, fmt.Errorf("%w: tensor %q is %s (supported: %s)", ErrUnsupportedType, name, t.Type, supportedNames())
	}
	return t, nil
}

// vector loads a 1-D tensor of n elements as float32.
func (l *loader) vector(name string, n int) ([]float32, error) {
	t, err := l.info(name, n)
	if err != nil {
		return nil, err
	}
	m, err := l.load(t, 1, n, true) // copied out below, or by matrixFromBytes
	if err != nil {
		return nil, err
	}
	if m.f == nil {
		out := make([]float32, n)
		m.row(0, out)
		return out, nil
	}
	return m.f, nil
}

// matrix loads a 2-D tensor of rows×cols (GGUF dims [cols, rows]); with
// scratch, its bytes are the loader's scratch until settled.
func (l *loader) matrix(name string, rows, cols int, scratch bool) (*matrix, error) {
	t, err := l.info(name, cols, rows)
	if err != nil {
		return nil, err
	}
	return l.load(t, rows, cols, scratch)
}

// weights loads the tensors specs name (each after prefix) as Layer.Weights
// holds them: vectors as []float32, matrices as *matrix (the parts of a
// fused one as views of its rows), 3-D expert tensors as []*matrix. With
// layer, the matrices only take part in products: they are read through
// the scratch and settled at once.
func (l *loader) weights(prefix string, specs []TensorSpec, layer bool) (map[string]Weight, error) {
	plan, err := Plan(l.f, prefix, specs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Weight, len(specs))
	for _, t := range plan {
		switch len(t.Dims) {
		case 1:
			v, err := l.vector(t.Name, t.Dims[0])
			if err != nil {
				return nil, err
			}
			out[t.Parts[0].Name] = v
		case 2:
			m, err := l.matrix(t.Name, t.Dims[1], t.Dims[0], layer)
			if err != nil {
				return nil, err
			}
			for _, p := range t.Parts {
				v := m
				if p.Lo != 0 || p.Hi != m.rows {
					v = m.rowsView(p.Lo, p.Hi)
				}
				if layer {
					l.settle(v)
				}
				out[p.Name] = v
			}
		case 3: // experts: [cols, rows, experts]
			ms, err := l.experts(t.Name, t.Dims[2], t.Dims[1], t.Dims[0], layer)
			if err != nil {
				return nil, err
			}
			out[t.Parts[0].Name] = ms
		default:
			return nil, fmt.Errorf("%w: tensor %q of %d dimensions on the Go engine", ErrUnsupportedArch, t.Name, len(t.Dims))
		}
	}
	return out, nil
}

func (l *loader) load(t *TensorInfo, rows, cols int, scratch bool) (*matrix, error) {
	b, err := l.read(t, scratch)
	if err != nil {
		return nil, err
	}
	return matrixFromBytes(t, b, rows, cols)
}

// matrixFromBytes is the rows×cols matrix stored in b as tensor t stores
// it (b may be one expert's part of a 3-D tensor).
func matrixFromBytes(t *TensorInfo, b []byte, rows, cols int) (*matrix, error) {
	m := &matrix{rows: rows, cols: cols}
	n := rows * cols
	if i, ok := dtypes[t.Type]; !ok || cols%i.block != 0 {
		return nil, fmt.Errorf("%w: tensor %q: rows of %d values are not whole %s blocks", ErrShape, t.Name, cols, t.Type)
	}
	le := binary.LittleEndian
	switch t.Type {
	case F32:
		m.f = make([]float32, n)
		for i := range m.f {
			m.f[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case F16, BF16:
		m.raw, m.typ = b, t.Type // half width in memory, widened per use
	case Q8_0:
		m.q8 = q8ilFromGGUF(b, rows, cols)
	default:
		m.raw, m.qf, m.typ = b, quantFormats[t.Type], t.Type
	}
	return m, nil
}

// Fingerprint identifies a model file without reading its weights in full:
// SHA-256 of the whole header (metadata and tensor table) and of the first
// 32 bytes of each tensor's data, so that files which differ only in their
// weights (another seed, another fine-tune) still differ.
func (f *File) Fingerprint() (string, error) {
	h := sha256.New()
	h.Write(f.headerFP[:])
	var buf [32]byte
	for i := range f.Tensors {
		t := &f.Tensors[i]
		n := int64(len(buf))
		if t.Size < n {
			n = t.Size
		}
		if n <= 0 {
			continue
		}
		if err := f.readAt(t, buf[:n], 0); err != nil {
			return "", fmt.Errorf("%w: tensor %q: %v", ErrCorrupt, t.Name, err)
		}
		h.Write(buf[:n])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ModelSpec is the model in f as package layers' cost model sees it, with
// the bytes per parameter measured from the layers' tensors (so a Q8_0
// file plans as Q8_0) and a float32 KV cache, as this engine keeps it.
func (f *File) ModelSpec() (layers.ModelSpec, error) {
	hp, err := ReadHParams(f)
	if err != nil {
		return layers.ModelSpec{}, err
	}
	var bytes, params float64
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if len(t.Name) > 4 && t.Name[:4] == "blk." && t.Size > 0 {
			bytes += float64(t.Size)
			params += float64(t.Elements())
		}
	}
	if params == 0 {
		return layers.ModelSpec{}, fmt.Errorf("%w: no layer tensors", ErrCorrupt)
	}
	spec, err := hp.Spec(bytes / params)
	if err != nil {
		return layers.ModelSpec{}, fmt.Errorf("%w: %v", ErrShape, err)
	}
	_, hasHead := f.Tensor("output.weight")
	spec.TiedEmbedding = !hasHead
	return spec, nil
}

// ReadModelSpec reads only the header of the GGUF file at path; see
// File.ModelSpec.
func ReadModelSpec(path string) (layers.ModelSpec, error) {
	f, fh, err := OpenFile(path)
	if err != nil {
		return layers.ModelSpec{}, err
	}
	defer fh.Close()
	return f.ModelSpec()
}

// yarnKeys are the rope.scaling.yarn_* keys llama.cpp reads, by
// architecture (llama_model::load_hparams): of those the engines run, only
// deepseek2's log multiplier; the others' yarn_* keys llama.cpp ignores, and
// so does the engine.
var yarnKeys = map[string][]string{
	"grok":      {"yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow"},
	"deepseek2": {"yarn_log_multiplier"},
	"mistral3":  {"yarn_beta_fast", "yarn_beta_slow", "yarn_log_multiplier"},
}

// readRopeScaling reads rope.scaling.* into h as llama.cpp reads them
// (llama_model::load_hparams, llama_context's cparams): a missing type with
// a factor is linear scaling, as in llama.cpp; YaRN's keys default as there.
func readRopeScaling(f *File, h *HParams) error {
	arch := h.Arch
	key := func(k string) string { return arch + ".rope.scaling." + k }
	bad := func(k string, v any) error { return fmt.Errorf("%w: key %q = %v", ErrCorrupt, key(k), v) }
	typ := ""
	if _, present := f.Get(key("type")); present {
		t, err := f.String(key("type"))
		if err != nil {
			return err
		}
		typ = t
	}
	factor := float32(0)
	for _, k := range []string{key("factor"), arch + ".rope.scale_linear"} {
		if _, present := f.Get(k); present {
			v, err := f.Float(k)
			if err != nil {
				return err
			}
			if !(v >= 0) || math.IsInf(v, 0) {
				return fmt.Errorf("%w: key %q = %v", ErrCorrupt, k, v)
			}
			factor = float32(v)
			break
		}
	}
	switch typ {
	case "none":
		typ = ""
	case "":
		if factor != 0 && factor != 1 {
			typ = "linear"
		}
	case "linear", "yarn":
	default:
		return fmt.Errorf("%w: %s with RoPE scaling %q (supported: none, linear, yarn)", ErrUnsupportedArch, arch, typ)
	}
	h.RopeScaling, h.RopeFreqScale, h.RopeOrigContext = typ, 1, h.TrainContext
	if typ != "" && factor != 0 {
		h.RopeFreqScale = 1 / factor
	}
	getf := func(k string, dst *float32, def float32) error {
		*dst = def
		if !slices.Contains(yarnKeys[arch], k) {
			return nil // llama.cpp does not read it for arch
		}
		if _, present := f.Get(key(k)); !present {
			return nil
		}
		v, err := f.Float(key(k))
		if err != nil {
			return err
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1e6 {
			return bad(k, v)
		}
		*dst = float32(v)
		return nil
	}
	ext := float32(0)
	if typ == "yarn" {
		ext = 1
	}
	for _, e := range []error{
		getf("yarn_ext_factor", &h.YarnExtFactor, ext),
		getf("yarn_attn_factor", &h.YarnAttnFactor, 1),
		getf("yarn_beta_fast", &h.YarnBetaFast, 32),
		getf("yarn_beta_slow", &h.YarnBetaSlow, 1),
		getf("yarn_log_multiplier", &h.YarnLogMul, 0),
	} {
		if e != nil {
			return e
		}
	}
	if arch == "deepseek2" {
		h.YarnLogMul /= 0.1 // as llama.cpp undoes its converter's factor
	}
	if typ == "" {
		return nil
	}
	if _, present := f.Get(key("original_context_length")); present {
		n, err := f.Uint(key("original_context_length"))
		if err != nil {
			return err
		}
		if n == 0 || n > 1<<31 {
			return bad("original_context_length", n)
		}
		h.RopeOrigContext = int(n)
	}
	if h.YarnExtFactor < 0 {
		return bad("yarn_ext_factor", h.YarnExtFactor)
	}
	return nil
}

// RopeExt is what llama.cpp gives ggml_rope_ext for this model: the
// original context, frequency scale, YaRN's ext_factor, the attention
// factor (its cparams.yarn_attn_factor: with YaRN, the magnitude
// correction divided by the one ggml's rope applies itself, times
// rope.scaling.attn_factor), beta_fast and beta_slow; each float32 step
// as llama_context computes it.
func (h HParams) RopeExt() (origCtx int, freqScale, extFactor, attnFactor, betaFast, betaSlow float32) {
	if h.RopeScaling == "" {
		return h.Context, 1, 0, h.RopeAttnFactor, 32, 1
	}
	attn := h.YarnAttnFactor
	if h.YarnExtFactor != 0 {
		factor := 1 / h.RopeFreqScale
		mscale := func(scale, m float32) float32 {
			if scale <= 1 {
				return 1
			}
			return float32(float32(0.1*m)*logf(scale)) + 1
		}
		if h.YarnLogMul != 0 {
			m := float32(1)
			if h.Arch == "deepseek2" && h.YarnLogMul != 1 {
				m = h.YarnLogMul // llama.cpp's special case for it
			}
			attn = mscale(factor, m) / mscale(factor, h.YarnLogMul)
		} else {
			attn = mscale(factor, 1)
		}
		attn *= 1 / (1 + float32(0.1*logf(factor)))
	}
	return h.RopeOrigContext, h.RopeFreqScale, h.YarnExtFactor, attn * h.RopeAttnFactor, h.YarnBetaFast, h.YarnBetaSlow
}

// ropeMScale is the factor RoPE's cos and sin are scaled by after
// rounding (Rope.mscale of the model's standard RoPE).
func (h HParams) ropeMScale() float32 { return standardRope(&h).mscale() }

// logf is C's logf: the natural log rounded to float32.
func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// scaleRope applies the model's linear or YaRN scaling to RoPE's inverse
// frequencies (Rope.scale of its standard RoPE).
func scaleRope(h HParams, freqs []float32) { standardRope(&h).scale(freqs) }
