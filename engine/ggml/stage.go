package ggml

/*
#cgo LDFLAGS: -lm -lstdc++
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

// The ggml declarations used, as in ggml.h and ggml-cpu.h of the ggml that
// the pinned ollama module vendors (its Go package compiles and links
// ggml; the headers are not on cgo's include path).
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
enum { T_F32 = 0, T_I32 = 26 };
extern struct ggml_context * ggml_init(struct ggml_init_params params);
extern void ggml_free(struct ggml_context * ctx);
extern size_t ggml_tensor_overhead(void);
extern size_t ggml_graph_overhead_custom(size_t size, bool grads);
extern size_t ggml_nbytes(const struct ggml_tensor * tensor);
extern struct ggml_tensor * ggml_new_tensor(struct ggml_context * ctx, int type, int n_dims, const int64_t * ne);
extern struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
extern struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_new_tensor_3d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2);
extern struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_rms_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
extern struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
extern struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int axis0, int axis1, int axis2, int axis3);
extern struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_cont_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_view_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, size_t offset);
extern struct ggml_tensor * ggml_view_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
	size_t nb1, size_t nb2, size_t offset);
extern struct ggml_tensor * ggml_cpy(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_rope_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c,
	int n_dims, int mode, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor, float attn_factor, float beta_fast, float beta_slow);
extern struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
extern struct ggml_tensor * ggml_diag_mask_inf(struct ggml_context * ctx, struct ggml_tensor * a, int n_past);
extern struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale, float max_bias);
extern struct ggml_tensor * ggml_silu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_cgraph * ggml_new_graph_custom(struct ggml_context * ctx, size_t size, bool grads);
extern void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
extern void ggml_set_input(struct ggml_tensor * tensor);
extern void ggml_set_output(struct ggml_tensor * tensor);

// ggml-backend.h, ggml-alloc.h and ggml-cpu.h: weights, caches and graphs
// live in a backend's buffers, so that the same code runs on any device.
typedef struct ggml_backend * ggml_backend_t;
typedef struct ggml_backend_buffer * ggml_backend_buffer_t;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_gallocr * ggml_gallocr_t;
enum { DEV_CPU = 0, DEV_GPU = 1, DEV_IGPU = 2 };
extern ggml_backend_t ggml_backend_init_by_type(int type, const char * params);
extern void ggml_backend_load_all_from_path(const char * dir_path);
extern const char * ggml_backend_name(ggml_backend_t backend);
extern void ggml_backend_free(ggml_backend_t backend);
extern ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t backend);
extern ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, ggml_backend_t backend);
extern void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
extern void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
extern void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
extern int ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);
extern ggml_gallocr_t ggml_gallocr_new(ggml_backend_buffer_type_t buft);
extern void ggml_gallocr_free(ggml_gallocr_t galloc);
extern bool ggml_gallocr_alloc_graph(ggml_gallocr_t galloc, struct ggml_cgraph * graph);
extern bool ggml_backend_is_cpu(ggml_backend_t backend);
extern void ggml_backend_cpu_set_n_threads(ggml_backend_t backend_cpu, int n_threads);

static struct ggml_context * new_ctx(size_t size, bool no_alloc) {
	struct ggml_init_params p = { size, NULL, no_alloc };
	return ggml_init(p);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src" // compiles and links ggml

	"github.com/stratanet/strata/engine"
)

// ErrGGML reports a failure inside ggml (a context it could not allocate,
// a graph it did not compute).
var ErrGGML = errors.New("engine/ggml: ggml failed")

type tensor = *C.struct_ggml_tensor

// Option configures Open.
type Option func(*options)

type options struct {
	lo, hi   int
	hasRange bool
	threads  int
	device   Device
	libDir   string
}

// Device chooses where a stage computes.
type Device int

const (
	// Auto takes a GPU where ggml has one (see WithLibDir), else the CPU.
	Auto Device = iota
	CPU
	GPU
)

func (d Device) String() string {
	switch d {
	case Auto:
		return "auto"
	case CPU:
		return "CPU"
	case GPU:
		return "GPU"
	}
	return fmt.Sprintf("Device(%d)", int(d))
}

// WithDevice chooses the device (default Auto).
func WithDevice(d Device) Option { return func(o *options) { o.device = d } }

// WithLibDir loads ggml's backend libraries (libggml-cuda.so and the
// like, as make build-cuda writes them) from dir before choosing the
// device.
func WithLibDir(dir string) Option { return func(o *options) { o.libDir = dir } }

// WithRange loads layers [lo, hi) only (default: all).
func WithRange(lo, hi int) Option {
	return func(o *options) { o.lo, o.hi, o.hasRange = lo, hi, true }
}

// WithThreads sets the threads ggml computes with (default: GOMAXPROCS).
// Unlike engine.Local, results may differ in the last bits across counts.
func WithThreads(n int) Option { return func(o *options) { o.threads = n } }

type layer struct {
	attnNorm, ffnNorm tensor
	wq, wk, wv, wo    tensor
	bq, bk, bv        tensor
	qNorm, kNorm      tensor // per-head RMSNorm weights (qwen3)
	wGate, wUp, wDown tensor
	index             int
}

// Stage is an engine.Stage computed by ggml on one of its devices.
type Stage struct {
	mu      sync.Mutex
	info    engine.Info
	hp      engine.HParams
	backend C.ggml_backend_t
	galloc  C.ggml_gallocr_t // a step's graph memory, reused across steps
	weights *C.struct_ggml_context
	wbuf    C.ggml_backend_buffer_t
	embd    tensor // first stage (and a tied head)
	onorm   tensor // last stage
	head    tensor // last stage
	layers  []layer
	closed  bool
}

var _ engine.Stage = (*Stage)(nil)

// Open loads the stage's tensors (and only those) from the GGUF at path.
func Open(path string, opts ...Option) (*Stage, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.threads <= 0 {
		o.threads = runtime.GOMAXPROCS(0)
	}
	// OpenFile reads a split model's parts too, each tensor from its own.
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	s, err := load(f, o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func load(f *engine.File, o options) (*Stage, error) {
	hp, err := engine.ReadHParams(f)
	if err != nil {
		return nil, err
	}
	// The block below is llama's, with qwen2's biases and qwen3's per-head
	// Q/K norms; anything else engine reads would be computed wrongly here.
	switch {
	case hp.Arch != "llama" && hp.Arch != "qwen2" && hp.Arch != "qwen3":
		return nil, fmt.Errorf("%w: %s on the ggml backend (it runs llama, qwen2 and qwen3)", engine.ErrUnsupportedArch, hp.Arch)
	case hp.RopeFactors || hp.LongRoPE:
		return nil, fmt.Errorf("%w: RoPE frequency factors on the ggml backend", engine.ErrUnsupportedArch)
	}
	if !o.hasRange {
		o.lo, o.hi = 0, hp.Layers
	}
	if o.lo < 0 || o.hi > hp.Layers || o.lo >= o.hi {
		return nil, fmt.Errorf("%w: [%d, %d) of a %d-layer model", engine.ErrRange, o.lo, o.hi, hp.Layers)
	}
	fp, err := f.Fingerprint()
	if err != nil {
		return nil, err
	}
	s := &Stage{hp: hp}
	s.info = engine.Info{Name: hp.Name, Arch: hp.Arch, Layers: hp.Layers, Lo: o.lo, Hi: o.hi, Hidden: hp.Dim,
		Vocab: hp.Vocab, Context: hp.Context, Fingerprint: fp, Threads: o.threads, HParams: hp,
		KVBytesPerToken: int64(o.hi-o.lo) * 2 * int64(hp.KVDim()) * 4}

	// The names this stage needs, with their expected ggml shapes.
	type want struct {
		name string
		ne   []uint64
		dst  *tensor
	}
	var ws []want
	add := func(name string, dst *tensor, ne ...int) {
		u := make([]uint64, len(ne))
		for i, n := range ne {
			u[i] = uint64(n)
		}
		ws = append(ws, want{name, u, dst})
	}
	d, kv, qd := hp.Dim, hp.KVDim(), hp.QDim()
	if s.info.First() {
		add("token_embd.weight", &s.embd, d, hp.Vocab)
	}
	s.layers = make([]layer, o.hi-o.lo)
	for i := range s.layers {
		w := &s.layers[i]
		w.index = o.lo + i
		p := fmt.Sprintf("blk.%d.", w.index)
		add(p+"attn_norm.weight", &w.attnNorm, d)
		add(p+"attn_q.weight", &w.wq, d, qd)
		add(p+"attn_k.weight", &w.wk, d, kv)
		add(p+"attn_v.weight", &w.wv, d, kv)
		add(p+"attn_output.weight", &w.wo, qd, d)
		add(p+"ffn_norm.weight", &w.ffnNorm, d)
		add(p+"ffn_gate.weight", &w.wGate, d, hp.FFN)
		add(p+"ffn_up.weight", &w.wUp, d, hp.FFN)
		add(p+"ffn_down.weight", &w.wDown, hp.FFN, d)
		if hp.QKVBias {
			add(p+"attn_q.bias", &w.bq, qd)
			add(p+"attn_k.bias", &w.bk, kv)
			add(p+"attn_v.bias", &w.bv, kv)
		}
		if hp.QKNorm {
			add(p+"attn_q_norm.weight", &w.qNorm, hp.HeadDim)
			add(p+"attn_k_norm.weight", &w.kNorm, hp.HeadDim)
		}
	}
	if s.info.Last() {
		add("output_norm.weight", &s.onorm, d)
		if _, ok := f.Tensor("output.weight"); ok {
			add("output.weight", &s.head, d, hp.Vocab)
		} else if s.embd == nil {
			add("token_embd.weight", &s.head, d, hp.Vocab) // tied head
		}
	}

	var infos []*engine.TensorInfo
	total := int64(0)
	for _, w := range ws {
		t, ok := f.Tensor(w.name)
		if !ok {
			return nil, fmt.Errorf("%w: tensor %q missing", engine.ErrShape, w.name)
		}
		if len(t.Dims) != len(w.ne) {
			return nil, fmt.Errorf("%w: tensor %q has dims %v, want %v", engine.ErrShape, w.name, t.Dims, w.ne)
		}
		for i := range w.ne {
			if t.Dims[i] != w.ne[i] {
				return nil, fmt.Errorf("%w: tensor %q has dims %v, want %v", engine.ErrShape, w.name, t.Dims, w.ne)
			}
		}
		if t.Size <= 0 {
			return nil, fmt.Errorf("%w: tensor %q: %s", engine.ErrUnsupportedType, w.name, t.Type)
		}
		infos = append(infos, t)
		total += t.Size
	}
	if err := s.initBackend(o); err != nil {
		return nil, err
	}
	s.info.Engine = "ggml-" + s.Device()
	// The context holds the tensors' metadata; their data goes to one
	// buffer of the backend's device.
	s.weights = C.new_ctx(C.size_t(uintptr(len(ws))*(uintptr(C.ggml_tensor_overhead())+64)+1<<16), true)
	if s.weights == nil {
		s.free()
		return nil, fmt.Errorf("%w: cannot allocate a context", ErrGGML)
	}
	biggest := int64(0)
	for i, w := range ws {
		t := infos[i]
		ne := make([]C.int64_t, len(t.Dims))
		for j, n := range t.Dims {
			ne[j] = C.int64_t(n)
		}
		ct := C.ggml_new_tensor(s.weights, C.int(t.Type), C.int(len(ne)), &ne[0])
		if ct == nil || int64(C.ggml_nbytes(ct)) != t.Size {
			s.free()
			return nil, fmt.Errorf("%w: tensor %q: ggml's size differs from the file's %d bytes", engine.ErrCorrupt, t.Name, t.Size)
		}
		*w.dst = ct
		biggest = max(biggest, t.Size)
	}
	if s.wbuf = C.ggml_backend_alloc_ctx_tensors(s.weights, s.backend); s.wbuf == nil {
		s.free()
		return nil, fmt.Errorf("%w: cannot allocate %d bytes of weights on %s", ErrGGML, total, s.Device())
	}
	buf := make([]byte, biggest)
	for i, w := range ws {
		t := infos[i]
		b := buf[:t.Size]
		if err := f.ReadTensor(t, b); err != nil {
			s.free()
			return nil, err
		}
		C.ggml_backend_tensor_set(*w.dst, unsafe.Pointer(&b[0]), 0, C.size_t(t.Size))
		s.info.WeightBytes += t.Size
	}
	if s.info.Last() && s.head == nil {
		s.head = s.embd
	}
	return s, nil
}

// initBackend starts the chosen device's backend and its graph allocator.
func (s *Stage) initBackend(o options) error {
	if o.libDir != "" {
		dir := C.CString(o.libDir)
		C.ggml_backend_load_all_from_path(dir)
		C.free(unsafe.Pointer(dir))
	}
	switch o.device {
	case Auto:
		if s.backend = C.ggml_backend_init_by_type(C.DEV_GPU, nil); s.backend == nil {
			s.backend = C.ggml_backend_init_by_type(C.DEV_CPU, nil)
		}
	case CPU:
		s.backend = C.ggml_backend_init_by_type(C.DEV_CPU, nil)
	case GPU:
		s.backend = C.ggml_backend_init_by_type(C.DEV_GPU, nil)
	}
	if s.backend == nil {
		return fmt.Errorf("%w: no %s device", ErrGGML, o.device)
	}
	if C.ggml_backend_is_cpu(s.backend) {
		C.ggml_backend_cpu_set_n_threads(s.backend, C.int(o.threads))
	}
	if s.galloc = C.ggml_gallocr_new(C.ggml_backend_get_default_buffer_type(s.backend)); s.galloc == nil {
		s.free()
		return fmt.Errorf("%w: cannot make a graph allocator", ErrGGML)
	}
	return nil
}

// Device names the ggml backend the stage computes on ("CPU", "CUDA0"...).
func (s *Stage) Device() string {
	if s.backend == nil {
		return "none"
	}
	return C.GoString(C.ggml_backend_name(s.backend))
}

func (s *Stage) free() {
	if s.wbuf != nil {
		C.ggml_backend_buffer_free(s.wbuf)
		s.wbuf = nil
	}
	if s.weights != nil {
		C.ggml_free(s.weights)
		s.weights = nil
	}
	if s.galloc != nil {
		C.ggml_gallocr_free(s.galloc)
		s.galloc = nil
	}
	if s.backend != nil {
		C.ggml_backend_free(s.backend)
		s.backend = nil
	}
}

// Info describes the stage.
func (s *Stage) Info() engine.Info { return s.info }

// Close frees the weights. Sessions must be closed first.
func (s *Stage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.free()
	}
	return nil
}

// session is one sequence's KV cache: per layer, K as [headDim, cap, kvHeads]
// and V transposed as [cap, headDim, kvHeads], so that attention reads
// both as contiguous rows.
type session struct {
	stage  *Stage
	ctx    *C.struct_ggml_context
	buf    C.ggml_backend_buffer_t
	k, v   []tensor
	n, cap int
}

func (p *session) Len() int { return p.n }
func (p *session) Cap() int { return p.cap }

func (p *session) Truncate(n int) error {
	if n < 0 || n > p.n {
		return fmt.Errorf("%w: truncate to %d of %d positions", engine.ErrPosition, n, p.n)
	}
	p.n = n
	return nil
}

func (p *session) Close() error {
	p.stage.mu.Lock()
	defer p.stage.mu.Unlock()
	p.free()
	return nil
}

func (p *session) free() {
	if p.buf != nil {
		C.ggml_backend_buffer_free(p.buf)
		p.buf = nil
	}
	if p.ctx != nil {
		C.ggml_free(p.ctx)
		p.ctx = nil
	}
}

// NewSession reserves a KV cache of maxTokens positions.
func (s *Stage) NewSession(maxTokens int) (engine.Session, error) {
	if maxTokens <= 0 {
		return nil, fmt.Errorf("%w: %d positions", engine.ErrSession, maxTokens)
	}
	hd, nkv := s.hp.HeadDim, s.hp.KVHeads
	n := len(s.layers)
	size := uintptr(2*n)*(uintptr(C.ggml_tensor_overhead())+64) + 1<<16
	p := &session{stage: s, cap: maxTokens}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, engine.ErrClosed
	}
	if p.ctx = C.new_ctx(C.size_t(size), true); p.ctx == nil {
		return nil, fmt.Errorf("%w: cannot allocate a context", ErrGGML)
	}
	for range s.layers {
		p.k = append(p.k, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(hd), C.int64_t(maxTokens), C.int64_t(nkv)))
		p.v = append(p.v, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(maxTokens), C.int64_t(hd), C.int64_t(nkv)))
	}
	if p.buf = C.ggml_backend_alloc_ctx_tensors(p.ctx, s.backend); p.buf == nil {
		p.free()
		return nil, fmt.Errorf("%w: cannot allocate a KV cache of %d bytes on %s", ErrGGML,
			int64(maxTokens)*s.info.KVBytesPerToken, s.Device())
	}
	return p, nil
}

// ForwardBatch runs the steps one after the other (ggml gains nothing
// from stacking distinct sessions' rows here). A failing step stops the
// batch; the steps before it have advanced their sessions.
func (s *Stage) ForwardBatch(ctx context.Context, steps []engine.Step) ([]engine.Output, error) {
	outs := make([]engine.Output, len(steps))
	for i, st := range steps {
		o, err := s.Forward(ctx, st)
		if err != nil {
			return nil, err
		}
		outs[i] = o
	}
	return outs, nil
}

// Forward runs one step: the stage's layers over n new positions.
func (s *Stage) Forward(ctx context.Context, step engine.Step) (engine.Output, error) {
	if err := ctx.Err(); err != nil {
		return engine.Output{}, err
	}
	p, ok := step.Session.(*session)
	if !ok || p.stage != s {
		return engine.Output{}, fmt.Errorf("%w: not a session of this stage", engine.ErrSession)
	}
	d := s.hp.Dim
	n := step.N(d)
	switch {
	case s.info.First() != (step.Tokens != nil) || (step.Tokens == nil) == (step.Hidden == nil):
		return engine.Output{}, fmt.Errorf("%w: a first stage takes tokens, the others hidden states", engine.ErrInput)
	case n == 0 || (step.Hidden != nil && len(step.Hidden) != n*d):
		return engine.Output{}, fmt.Errorf("%w: %d values for a hidden size of %d", engine.ErrInput, len(step.Hidden), d)
	case step.Pos != p.n:
		return engine.Output{}, fmt.Errorf("%w: step at %d, session holds %d", engine.ErrPosition, step.Pos, p.n)
	case p.n+n > p.cap:
		return engine.Output{}, fmt.Errorf("%w: %d + %d positions, %d reserved", engine.ErrContextFull, p.n, n, p.cap)
	}
	for _, t := range step.Tokens {
		if t < 0 || int(t) >= s.hp.Vocab {
			return engine.Output{}, fmt.Errorf("%w: token %d outside a vocabulary of %d", engine.ErrInput, t, s.hp.Vocab)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return engine.Output{}, engine.ErrClosed
	}
	if p.ctx == nil {
		return engine.Output{}, fmt.Errorf("%w: session closed", engine.ErrSession)
	}
	out, err := s.compute(p, step, n)
	if err != nil {
		return engine.Output{}, err
	}
	p.n += n
	return out, nil
}

func (s *Stage) compute(p *session, step engine.Step, n int) (engine.Output, error) {
	h := s.hp
	pos, total := p.n, p.n+n
	hd, nkv, nh := h.HeadDim, h.KVHeads, h.Heads
	nodes := 64*len(s.layers) + 64
	// The context holds the graph's metadata only; the allocator places
	// its tensors in the backend's memory.
	size := uintptr(nodes)*(uintptr(C.ggml_tensor_overhead())+64) + uintptr(C.ggml_graph_overhead_custom(C.size_t(nodes), false))
	c := C.new_ctx(C.size_t(size), true)
	if c == nil {
		return engine.Output{}, fmt.Errorf("%w: cannot allocate a step's graph", ErrGGML)
	}
	defer C.ggml_free(c)
	gf := C.ggml_new_graph_custom(c, C.size_t(nodes), false)

	var x, input tensor
	if step.Tokens != nil {
		input = C.ggml_new_tensor_1d(c, C.T_I32, C.int64_t(n))
		C.ggml_set_input(input)
		x = C.ggml_get_rows(c, s.embd, input)
	} else {
		input = C.ggml_new_tensor_2d(c, C.T_F32, C.int64_t(h.Dim), C.int64_t(n))
		C.ggml_set_input(input)
		x = input
	}
	positions := C.ggml_new_tensor_1d(c, C.T_I32, C.int64_t(n))
	C.ggml_set_input(positions)
	mode := C.int(0)
	if h.NeoxRope {
		mode = 2
	}
	const f4 = 4
	eps := C.float(h.NormEps)
	// rope rotates each head of t ([heads*hd, n]), after qwen3's per-head
	// RMSNorm (rms_norm works along ne0, one head's hd values, and the
	// [hd] weight broadcasts over heads and rows), as engine does.
	rope := func(t tensor, heads int, norm tensor) tensor {
		t = C.ggml_reshape_3d(c, t, C.int64_t(hd), C.int64_t(heads), C.int64_t(n))
		if norm != nil {
			t = C.ggml_mul(c, C.ggml_rms_norm(c, t, eps), norm)
		}
		return C.ggml_rope_ext(c, t, positions, nil, C.int(hd), mode, 0, C.float(h.RopeBase), 1, 0, 1, 32, 1)
	}
	for i := range s.layers {
		w := &s.layers[i]
		cur := C.ggml_mul(c, C.ggml_rms_norm(c, x, eps), w.attnNorm)
		q := C.ggml_mul_mat(c, w.wq, cur)
		k := C.ggml_mul_mat(c, w.wk, cur)
		v := C.ggml_mul_mat(c, w.wv, cur)
		if h.QKVBias {
			q = C.ggml_add(c, q, w.bq)
			k = C.ggml_add(c, k, w.bk)
			v = C.ggml_add(c, v, w.bv)
		}
		q, k = rope(q, nh, w.qNorm), rope(k, nkv, w.kNorm)
		v = C.ggml_reshape_3d(c, v, C.int64_t(hd), C.int64_t(nkv), C.int64_t(n))
		// Store the new positions in the cache before attention reads it:
		// ggml computes nodes in the order they enter the graph.
		kDst := C.ggml_view_3d(c, p.k[i], C.int64_t(hd), C.int64_t(n), C.int64_t(nkv),
			C.size_t(hd*f4), C.size_t(hd*p.cap*f4), C.size_t(pos*hd*f4))
		C.ggml_build_forward_expand(gf, C.ggml_cpy(c, C.ggml_permute(c, k, 0, 2, 1, 3), kDst))
		vDst := C.ggml_view_3d(c, p.v[i], C.int64_t(n), C.int64_t(hd), C.int64_t(nkv),
			C.size_t(p.cap*f4), C.size_t(p.cap*hd*f4), C.size_t(pos*f4))
		C.ggml_build_forward_expand(gf, C.ggml_cpy(c, C.ggml_permute(c, v, 1, 2, 0, 3), vDst))

		kAll := C.ggml_cont(c, C.ggml_view_3d(c, p.k[i], C.int64_t(hd), C.int64_t(total), C.int64_t(nkv),
			C.size_t(hd*f4), C.size_t(hd*p.cap*f4), 0)) // [hd, total, nkv]
		vAll := C.ggml_cont(c, C.ggml_view_3d(c, p.v[i], C.int64_t(total), C.int64_t(hd), C.int64_t(nkv),
			C.size_t(p.cap*f4), C.size_t(p.cap*hd*f4), 0)) // [total, hd, nkv]
		qp := C.ggml_cont(c, C.ggml_permute(c, q, 0, 2, 1, 3)) // [hd, n, nh]
		kq := C.ggml_mul_mat(c, kAll, qp)                      // [total, n, nh]
		kq = C.ggml_diag_mask_inf(c, C.ggml_scale(c, kq, C.float(1/math.Sqrt(float64(hd)))), C.int(pos))
		kq = C.ggml_soft_max_ext(c, kq, nil, 1, 0)
		kqv := C.ggml_mul_mat(c, vAll, kq) // [hd, n, nh]
		cur = C.ggml_cont_2d(c, C.ggml_permute(c, kqv, 0, 2, 1, 3), C.int64_t(hd*nh), C.int64_t(n))
		x = C.ggml_add(c, C.ggml_mul_mat(c, w.wo, cur), x)
		cur = C.ggml_mul(c, C.ggml_rms_norm(c, x, eps), w.ffnNorm)
		gate := C.ggml_silu(c, C.ggml_mul_mat(c, w.wGate, cur))
		up := C.ggml_mul_mat(c, w.wUp, cur)
		x = C.ggml_add(c, C.ggml_mul_mat(c, w.wDown, C.ggml_mul(c, gate, up)), x)
	}
	last := s.info.Last()
	if last {
		x = C.ggml_view_1d(c, x, C.int64_t(h.Dim), C.size_t((n-1)*h.Dim*f4))
		x = C.ggml_mul(c, C.ggml_rms_norm(c, x, eps), s.onorm)
		x = C.ggml_mul_mat(c, s.head, x) // [vocab, 1]
	}
	C.ggml_set_output(x)
	C.ggml_build_forward_expand(gf, x)
	if !C.ggml_gallocr_alloc_graph(s.galloc, gf) {
		return engine.Output{}, fmt.Errorf("%w: cannot allocate a step's graph on %s", ErrGGML, s.Device())
	}
	if step.Tokens != nil {
		C.ggml_backend_tensor_set(input, unsafe.Pointer(&step.Tokens[0]), 0, C.size_t(4*n))
	} else {
		C.ggml_backend_tensor_set(input, unsafe.Pointer(&step.Hidden[0]), 0, C.size_t(4*n*h.Dim))
	}
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(pos + i)
	}
	C.ggml_backend_tensor_set(positions, unsafe.Pointer(&ps[0]), 0, C.size_t(4*n))
	if rc := C.ggml_backend_graph_compute(s.backend, gf); rc != 0 {
		return engine.Output{}, fmt.Errorf("%w: graph compute returned status %d", ErrGGML, int(rc))
	}
	out := make([]float32, n*h.Dim)
	if last {
		out = make([]float32, h.Vocab)
	}
	C.ggml_backend_tensor_get(x, unsafe.Pointer(&out[0]), 0, C.size_t(4*len(out)))
	if last {
		return engine.Output{Logits: out}, nil
	}
	return engine.Output{Hidden: out}, nil
}
