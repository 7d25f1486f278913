package ggml

/*
#cgo LDFLAGS: -lm -lstdc++
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// The ggml declarations used, as in ggml.h and ggml-cpu.h of the ggml that
// the pinned ollama module vendors (its Go package compiles and links
// ggml; the headers are not on cgo's include path).
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
enum { T_F32 = 0, T_I32 = 26, T_I64 = 27 };
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
extern struct ggml_tensor * ggml_gelu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_tanh(struct ggml_context * ctx, struct ggml_tensor * a);
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

typedef struct ggml_backend_device * ggml_backend_dev_t;
typedef struct ggml_backend_reg * ggml_backend_reg_t;
extern ggml_backend_dev_t ggml_backend_get_device(ggml_backend_t backend);
extern ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params);
extern const char * ggml_backend_dev_name(ggml_backend_dev_t device);
extern ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
extern void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
extern const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
extern ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors_from_buft(struct ggml_context * ctx, ggml_backend_buffer_type_t buft);
extern void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value);
extern struct ggml_tensor * ggml_set_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c);
extern struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_concat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int dim);
extern struct ggml_tensor * ggml_view_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
extern struct ggml_tensor * ggml_soft_max(struct ggml_context * ctx, struct ggml_tensor * a);
extern void ggml_soft_max_add_sinks(struct ggml_tensor * a, struct ggml_tensor * sinks);
extern struct ggml_tensor * ggml_argsort_top_k(struct ggml_context * ctx, struct ggml_tensor * a, int k);
extern struct ggml_tensor * ggml_sum_rows(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_clamp(struct ggml_context * ctx, struct ggml_tensor * a, float min, float max);
extern struct ggml_tensor * ggml_div(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_mul_mat_id(struct ggml_context * ctx, struct ggml_tensor * as, struct ggml_tensor * b, struct ggml_tensor * ids);
extern struct ggml_tensor * ggml_add_id(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * ids);
extern struct ggml_tensor * ggml_swiglu_split(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_swiglu_oai(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, float alpha, float limit);
extern struct ggml_tensor * ggml_sigmoid(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_fill(struct ggml_context * ctx, struct ggml_tensor * a, float c);
extern struct ggml_tensor * ggml_repeat_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
extern struct ggml_tensor * ggml_reshape_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
extern int ggml_cpu_has_avx2(void);
extern int ggml_cpu_has_avx512(void);
extern int ggml_cpu_has_neon(void);
extern int ggml_cpu_has_dotprod(void);
extern int ggml_cpu_has_matmul_int8(void);

// cpu_repack_buft is the CPU device's CPU_REPACK buffer type: ggml lists
// it among the device's extra buffer types where ggml-cpu was compiled
// with GGML_USE_CPU_REPACK (make build-ggml does); NULL otherwise.
static ggml_backend_buffer_type_t cpu_repack_buft(ggml_backend_t backend) {
	ggml_backend_dev_t dev = ggml_backend_get_device(backend);
	if (dev == NULL) return NULL;
	typedef ggml_backend_buffer_type_t * (*extra_fn)(ggml_backend_dev_t);
	extra_fn fn = (extra_fn) ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
	if (fn == NULL) return NULL;
	for (ggml_backend_buffer_type_t * b = fn(dev); b != NULL && *b != NULL; b++) {
		const char * name = ggml_backend_buft_name(*b);
		if (name != NULL && strcmp(name, "CPU_REPACK") == 0) return *b;
	}
	return NULL;
}

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
	"slices"
	"strings"
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
	noRepack bool
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

// WithoutRepack keeps every weight in ggml's plain layout on the CPU, as
// builds without GGML_USE_CPU_REPACK do (for comparisons; slower).
func WithoutRepack() Option { return func(o *options) { o.noRepack = true } }

// gweight is a loaded weight (Layer.Weights holds them): rows [lo, hi)
// of t, which has rows rows of ne0 values (a vector is one row).
type gweight struct {
	t            tensor
	ne0          int
	lo, hi, rows int
}

// Stage is an engine.Stage computed by ggml on one of its devices.
type Stage struct {
	mu      sync.Mutex    // guards a CPU stage; see locked
	dev     *deviceThread // a GPU stage's device thread, or nil
	parent  *Stage        // a view's (Sub), whose closing closes it too
	info    engine.Info
	hp      engine.HParams
	backend C.ggml_backend_t
	galloc  C.ggml_gallocr_t // a step's graph memory, reused across steps
	weights *C.struct_ggml_context
	wbuf    C.ggml_backend_buffer_t
	packed  *C.struct_ggml_context // weights held repacked (CPU_REPACK), or nil
	pbuf    C.ggml_backend_buffer_t
	graphs  map[string]*graph // built once per shape, reused
	// dropped are a GPU stage's graphs dropped since its last step: freed
	// after the next one (see dropGraphs).
	dropped []*graph
	nextID  uint64 // session ids, for graph keys
	steps   uint64 // steps computed, for graph eviction
	builds  int    // graphs built (a test checks reuse)
	// repacked counts the matrices held in ggml's CPU_REPACK layout.
	repacked int
	embd     tensor // first stage (and a tied head)
	onorm    tensor // last stage
	head     tensor // last stage
	arch     *engine.Arch
	layers   []engine.Layer // Weights: *gweight
	globals  map[string]engine.Weight
	closed   bool
}

var _ engine.Stage = (*Stage)(nil)

// deviceThread runs every call on a GPU device (loading, sessions,
// steps, freeing) on one OS thread, one call at a time. ggml-vulkan on
// Mesa's lavapipe corrupted the heap (glibc "double free or corruption"
// in a lavapipe thread) when one stage's steps came from several threads
// in turn, each waiting for the last (TestVulkanThreads); on one thread it
// does not. ggml-vulkan is not safe either with contexts on one device
// computing from two threads at once (llama.cpp issues 7575 and 11371).
// A GPU runs one graph at a time anyway.
type deviceThread struct{ calls chan func() }

var deviceThreads sync.Map // ggml's device name → *deviceThread

func deviceThreadFor(name string) *deviceThread {
	if d, ok := deviceThreads.Load(name); ok {
		return d.(*deviceThread)
	}
	d := &deviceThread{calls: make(chan func())}
	if old, loaded := deviceThreads.LoadOrStore(name, d); loaded {
		return old.(*deviceThread)
	}
	go func() {
		runtime.LockOSThread() // for the process's life: the device's one thread
		for f := range d.calls {
			f()
		}
	}()
	return d
}

// do runs f on the device's thread and waits for it.
func (d *deviceThread) do(f func()) {
	done := make(chan struct{})
	d.calls <- func() {
		defer close(done)
		f()
	}
	<-done
}

// locked runs f with the stage to itself: on its device's thread for a
// GPU stage, under its mutex on the CPU.
func (s *Stage) locked(f func()) {
	if s.dev != nil {
		s.dev.do(f)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

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
	LoadLibDir(o.libDir) // once per directory: each load registers its devices again
	var dev *deviceThread
	if d := pick(o.device); d != nil {
		if name := C.GoString(C.ggml_backend_dev_name(d)); name != "CPU" {
			dev = deviceThreadFor(name)
		}
	}
	var s *Stage
	if dev != nil {
		dev.do(func() { s, err = load(f, o) })
	} else {
		s, err = load(f, o)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.dev = dev
	return s, nil
}

func load(f *engine.File, o options) (*Stage, error) {
	hp, err := engine.ReadHParams(f)
	if err != nil {
		return nil, err
	}
	arch, err := engine.Architecture(hp.Arch)
	if err != nil {
		return nil, err
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
	s := &Stage{hp: hp, arch: arch}
	s.info = engine.Info{Name: hp.Name, Arch: hp.Arch, Layers: hp.Layers, Lo: o.lo, Hi: o.hi, Hidden: hp.Dim,
		Vocab: hp.Vocab, Context: hp.Context, Fingerprint: fp, Threads: o.threads, HParams: hp,
		KVBytesPerToken: int64(o.hi-o.lo) * int64(hp.KVDim()+hp.KVHeads*hp.VHead()) * 4}

	// The names this stage needs, with their expected ggml shapes.
	// mat marks the weights that only a matrix product reads (which the
	// CPU may hold repacked for its kernels).
	// An architecture's tensor sets into, for each of its parts, a
	// *gweight.
	type want struct {
		name  string
		ne    []uint64
		dst   *tensor
		mat   bool
		parts []engine.TensorPart
		into  map[string]engine.Weight
	}
	var ws []want
	add := func(name string, dst *tensor, ne ...int) {
		u := make([]uint64, len(ne))
		for i, n := range ne {
			u[i] = uint64(n)
		}
		ws = append(ws, want{name: name, ne: u, dst: dst})
	}
	addMat := func(name string, dst *tensor, ne ...int) {
		add(name, dst, ne...)
		ws[len(ws)-1].mat = true
	}
	d := hp.Dim
	if s.info.First() {
		add("token_embd.weight", &s.embd, d, hp.Vocab)
	}
	// plan adds the architecture's tensors, each after prefix.
	plan := func(prefix string, specs []engine.TensorSpec) (map[string]engine.Weight, error) {
		loads, err := engine.Plan(f, prefix, specs)
		if err != nil {
			return nil, err
		}
		into := map[string]engine.Weight{}
		for _, t := range loads {
			add(t.Name, nil, t.Dims...)
			w := &ws[len(ws)-1]
			w.mat, w.parts, w.into = len(t.Dims) == 2, t.Parts, into
		}
		return into, nil
	}
	var globals []engine.TensorSpec
	if arch.Globals != nil {
		globals = arch.Globals(&s.hp)
	}
	if s.globals, err = plan("", globals); err != nil {
		return nil, err
	}
	for i := o.lo; i < o.hi; i++ {
		w, err := plan(engine.LayerPrefix(i), arch.Tensors(&s.hp, i))
		if err != nil {
			return nil, err
		}
		s.layers = append(s.layers, engine.Layer{Index: i, HP: &s.hp, Weights: w})
	}
	if s.info.Last() {
		add("output_norm.weight", &s.onorm, d)
		if _, ok := f.Tensor("output.weight"); ok {
			addMat("output.weight", &s.head, d, hp.Vocab)
		} else if s.embd == nil {
			addMat("token_embd.weight", &s.head, d, hp.Vocab) // tied head
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
	s.info.Engine = deviceInfo(C.ggml_backend_get_device(s.backend)).Engine()
	// The contexts hold the tensors' metadata; their data goes to the
	// backend's device: on the CPU, the matrices its repacking kernels
	// take go to ggml's CPU_REPACK buffer (where this build has one), which
	// rearranges them as they are set, as llama.cpp does; the rest to one
	// plain buffer.
	packBuft := C.ggml_backend_buffer_type_t(nil)
	if bool(C.ggml_backend_is_cpu(s.backend)) && !o.noRepack {
		packBuft = C.cpu_repack_buft(s.backend)
	}
	meta := C.size_t(uintptr(len(ws))*(uintptr(C.ggml_tensor_overhead())+64) + 1<<16)
	if s.weights = C.new_ctx(meta, true); s.weights == nil {
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
		into := s.weights
		if packBuft != nil && w.mat && repackable(t.Type, t.Dims) {
			if s.packed == nil {
				if s.packed = C.new_ctx(meta, true); s.packed == nil {
					s.free()
					return nil, fmt.Errorf("%w: cannot allocate a context", ErrGGML)
				}
			}
			into = s.packed
			s.repacked++
		}
		ct := C.ggml_new_tensor(into, C.int(t.Type), C.int(len(ne)), &ne[0])
		if ct == nil || int64(C.ggml_nbytes(ct)) != t.Size {
			s.free()
			return nil, fmt.Errorf("%w: tensor %q: ggml's size differs from the file's %d bytes", engine.ErrCorrupt, t.Name, t.Size)
		}
		if w.dst != nil {
			*w.dst = ct
		}
		rows := 1
		if len(w.ne) > 1 {
			rows = int(w.ne[1])
		}
		for _, p := range w.parts {
			w.into[p.Name] = &gweight{t: ct, ne0: int(w.ne[0]), lo: p.Lo, hi: p.Hi, rows: rows}
		}
		biggest = max(biggest, t.Size)
	}
	if s.wbuf = C.ggml_backend_alloc_ctx_tensors(s.weights, s.backend); s.wbuf == nil {
		s.free()
		return nil, fmt.Errorf("%w: cannot allocate %d bytes of weights on %s", ErrGGML, total, s.Device())
	}
	if s.packed != nil {
		if s.pbuf = C.ggml_backend_alloc_ctx_tensors_from_buft(s.packed, packBuft); s.pbuf == nil {
			s.free()
			return nil, fmt.Errorf("%w: cannot allocate %d bytes of repacked weights on %s", ErrGGML, total, s.Device())
		}
	}
	buf := make([]byte, biggest)
	for i, w := range ws {
		t := infos[i]
		b := buf[:t.Size]
		if err := f.ReadTensor(t, b); err != nil {
			s.free()
			return nil, err
		}
		var ct tensor
		if w.dst != nil {
			ct = *w.dst
		} else {
			ct = w.into[w.parts[0].Name].(*gweight).t
		}
		C.ggml_backend_tensor_set(ct, unsafe.Pointer(&b[0]), 0, C.size_t(t.Size))
		s.info.WeightBytes += t.Size
	}
	if s.info.Last() && s.head == nil {
		s.head = s.embd
	}
	return s, nil
}

// initBackend starts the chosen device's backend and its graph allocator.
func (s *Stage) initBackend(o options) error {
	if dev := pick(o.device); dev != nil {
		s.backend = C.ggml_backend_dev_init(dev, nil)
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
	s.dropGraphs(nil)
	if s.wbuf != nil {
		C.ggml_backend_buffer_free(s.wbuf)
		s.wbuf = nil
	}
	if s.pbuf != nil {
		C.ggml_backend_buffer_free(s.pbuf)
		s.pbuf = nil
	}
	if s.packed != nil {
		C.ggml_free(s.packed)
		s.packed = nil
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

// Repacked is how many weight matrices the stage holds in ggml's
// CPU_REPACK layout (0 off the CPU, or where ggml was built without it).
func (s *Stage) Repacked() int { return s.repacked }

// Info describes the stage.
func (s *Stage) Info() engine.Info { return s.info }

// Close frees the weights. Sessions must be closed first.
func (s *Stage) Close() error {
	s.locked(func() {
		if !s.closed {
			s.closed = true
			s.free()
		}
	})
	return nil
}

// session is one sequence's KV cache: per layer, K as [headDim, cap, kvHeads]
// and V transposed as [cap, headDim, kvHeads], so that attention reads
// both as contiguous rows.
type session struct {
	stage  *Stage
	id     uint64
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
	p.stage.locked(func() {
		p.stage.dropGraphs(p)
		p.free()
	})
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
	if s.hp.LongRoPE && maxTokens > s.hp.Context {
		return nil, fmt.Errorf("%w: %d positions > the original context %d: the long RoPE factors (rope_factors_long.weight) are not supported",
			engine.ErrContextFull, maxTokens, s.hp.Context)
	}
	n := len(s.layers)
	size := uintptr(2*n)*(uintptr(C.ggml_tensor_overhead())+64) + 1<<16
	p := &session{stage: s, cap: maxTokens}
	var err error
	s.locked(func() { err = s.reserve(p, size) })
	if err != nil {
		return nil, err
	}
	return p, nil
}

// reserve allocates session p's cache (size: its context's metadata).
func (s *Stage) reserve(p *session, size uintptr) error {
	hd, vd, nkv, maxTokens := s.hp.HeadDim, s.hp.VHead(), s.hp.KVHeads, p.cap
	if s.closed || (s.parent != nil && s.parent.closed) {
		return engine.ErrClosed
	}
	if p.ctx = C.new_ctx(C.size_t(size), true); p.ctx == nil {
		return fmt.Errorf("%w: cannot allocate a context", ErrGGML)
	}
	for range s.layers {
		p.k = append(p.k, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(hd), C.int64_t(maxTokens), C.int64_t(nkv)))
		p.v = append(p.v, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(maxTokens), C.int64_t(vd), C.int64_t(nkv)))
	}
	if p.buf = C.ggml_backend_alloc_ctx_tensors(p.ctx, s.backend); p.buf == nil {
		p.free()
		return fmt.Errorf("%w: cannot allocate a KV cache of %d bytes on %s", ErrGGML,
			int64(maxTokens)*s.info.KVBytesPerToken, s.Device())
	}
	// Attention reads cache rows past the session's end, masked: they
	// must hold numbers (0·NaN would not vanish).
	C.ggml_backend_buffer_clear(p.buf, 0)
	s.nextID++
	p.id = s.nextID
	return nil
}

// Forward runs one step: the stage's layers over n new positions.
func (s *Stage) Forward(ctx context.Context, step engine.Step) (engine.Output, error) {
	outs, err := s.ForwardBatch(ctx, []engine.Step{step})
	if err != nil {
		return engine.Output{}, err
	}
	return outs[0], nil
}

// ForwardBatch runs steps of distinct sessions as one graph: the rows of
// all steps go through each weight matrix together (read once for all),
// and each session's rows attend over its own cache. Unlike engine.Local,
// a session's result in a batch is not bit-identical to its result alone
// (ggml picks its kernels, and their summation order, by the row count);
// it agrees within ggml's rounding (see TestBatchMatchesAlone). An invalid
// step fails the batch before any session advances.
func (s *Stage) ForwardBatch(ctx context.Context, steps []engine.Step) ([]engine.Output, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, nil
	}
	d := s.hp.Dim
	parts := make([]part, len(steps))
	rows := 0
	for i, step := range steps {
		p, ok := step.Session.(*session)
		if !ok || p.stage != s {
			return nil, fmt.Errorf("%w: step %d: not a session of this stage", engine.ErrSession, i)
		}
		n := step.N(d)
		switch {
		case s.info.First() != (step.Tokens != nil) || (step.Tokens == nil) == (step.Hidden == nil):
			return nil, fmt.Errorf("%w: step %d: a first stage takes tokens, the others hidden states", engine.ErrInput, i)
		case n == 0 || (step.Hidden != nil && len(step.Hidden) != n*d):
			return nil, fmt.Errorf("%w: step %d: %d values for a hidden size of %d", engine.ErrInput, i, len(step.Hidden), d)
		}
		for _, t := range step.Tokens {
			if t < 0 || int(t) >= s.hp.Vocab {
				return nil, fmt.Errorf("%w: step %d: token %d outside a vocabulary of %d", engine.ErrInput, i, t, s.hp.Vocab)
			}
		}
		parts[i] = part{p: p, n: n, row0: rows}
		rows += n
	}
	var outs []engine.Output
	var err error
	s.locked(func() { outs, err = s.forward(parts, steps, rows) })
	return outs, err
}

// forward runs a checked batch, the stage held (locked).
func (s *Stage) forward(parts []part, steps []engine.Step, rows int) ([]engine.Output, error) {
	if s.closed || (s.parent != nil && s.parent.closed) {
		return nil, engine.ErrClosed
	}
	seen := make(map[*session]bool, len(parts))
	for i := range parts {
		pt := &parts[i]
		switch p := pt.p; {
		case p.ctx == nil:
			return nil, fmt.Errorf("%w: step %d: session closed", engine.ErrSession, i)
		case seen[p]:
			return nil, fmt.Errorf("%w: step %d: session twice in one batch", engine.ErrSession, i)
		case steps[i].Pos != p.n:
			return nil, fmt.Errorf("%w: step %d at %d, session holds %d", engine.ErrPosition, i, steps[i].Pos, p.n)
		case p.n+pt.n > p.cap:
			return nil, fmt.Errorf("%w: step %d: %d + %d positions, %d reserved", engine.ErrContextFull, i, p.n, pt.n, p.cap)
		}
		seen[pt.p] = true
		pt.pos = pt.p.n
		// Attention reads the cache up to a multiple of kvPad (the rest
		// masked), so that the same graph serves kvPad decode steps.
		pt.kvLen = min(pt.p.cap, (pt.pos+pt.n+kvPad-1)/kvPad*kvPad)
	}
	dropped := s.dropped
	s.dropped = nil
	outs, err := s.compute(parts, steps, rows)
	for _, g := range dropped {
		g.free()
	}
	if err != nil {
		return nil, err
	}
	for _, pt := range parts {
		pt.p.n += pt.n
	}
	return outs, nil
}

// kvPad is the granularity of the cache length a graph attends over.
const kvPad = 256

// maxGraphs bounds the decode graphs a stage keeps for reuse (each holds
// its own intermediate memory, small for one row per session). Graphs with
// a prefill in them, whose shapes seldom repeat, are built for one use, in
// memory shared with the other such graphs.
const maxGraphs = 32

// A part is one step of a batch: n rows of session p from position pos,
// rows row0.. of the batch, attending over the first kvLen positions of
// its cache.
type part struct {
	p                   *session
	pos, n, row0, kvLen int
}

// graph is the ggml graph of one step shape: which sessions, their row
// counts and cache lengths. Positions are inputs (the rotary positions, the
// cache rows written, the causal masks), so that the graph serves every
// step of that shape unchanged: on a GPU backend, the same graph each step.
type graph struct {
	key       string
	ctx       *C.struct_ggml_context
	gf        *C.struct_ggml_cgraph
	galloc    C.ggml_gallocr_t // its own intermediate memory (nil: the stage's)
	input     tensor           // tokens (I32 [rows]) or hidden states (F32 [dim, rows])
	positions tensor           // I32 [rows]
	vIdx      []tensor         // per part: I64, where each new V value goes in the transposed cache
	// masks are per window (0: none), per part: F32 [kvLen, n], 0 or
	// -inf; made as the layers that use them are built, so that each is
	// in the graph (a stage of gemma's local layers only has no causal
	// mask).
	masks    map[int][]tensor
	outRows  tensor // last stage: I32, the last row of each part
	out      tensor
	sessions []*session
	used     uint64 // for eviction: the step it last served
}

func (g *graph) free() {
	if g.galloc != nil {
		C.ggml_gallocr_free(g.galloc)
		g.galloc = nil
	}
	if g.ctx != nil {
		C.ggml_free(g.ctx)
		g.ctx = nil
	}
}

// dropGraphs frees the kept graphs that use session p (all where p is nil).
//
// On a GPU a dropped graph's memory is freed only after the stage's next
// step (or when it closes): freeing it between steps made ggml-vulkan on
// lavapipe compute the next step wrong and corrupt the heap (glibc
// "double free or corruption" in a lavapipe thread), in TestVulkanMixedSwarm
// when a session closed and another began.
func (s *Stage) dropGraphs(p *session) {
	for k, g := range s.graphs {
		if p == nil || slices.Contains(g.sessions, p) {
			if s.dev != nil && p != nil {
				s.dropped = append(s.dropped, g)
			} else {
				g.free()
			}
			delete(s.graphs, k)
		}
	}
	if p == nil {
		for _, g := range s.dropped {
			g.free()
		}
		s.dropped = nil
	}
}

func graphKey(parts []part) string {
	var b strings.Builder
	for _, pt := range parts {
		fmt.Fprintf(&b, "%d:%d:%d;", pt.p.id, pt.n, pt.kvLen)
	}
	return b.String()
}

// build makes the graph of parts' shape.
func (s *Stage) build(parts []part, rows int) (*graph, error) {
	h := s.hp
	vd, nkv := h.VHead(), h.KVHeads
	// Per layer: its ops, and per part attention's views, cache writes
	// and products (gemma2's soft cap adds 3).
	nodes := (160+24*len(parts))*len(s.layers) + 64
	// The context holds the graph's metadata only; an allocator places
	// its tensors in the backend's memory.
	size := uintptr(nodes)*(uintptr(C.ggml_tensor_overhead())+64) + uintptr(C.ggml_graph_overhead_custom(C.size_t(nodes), false))
	c := C.new_ctx(C.size_t(size), true)
	if c == nil {
		return nil, fmt.Errorf("%w: cannot allocate a step's graph", ErrGGML)
	}
	g := &graph{ctx: c, gf: C.ggml_new_graph_custom(c, C.size_t(nodes), false)}
	s.builds++
	R := C.int64_t(rows)
	var x tensor
	if s.info.First() {
		g.input = C.ggml_new_tensor_1d(c, C.T_I32, R)
		x = C.ggml_get_rows(c, s.embd, g.input)
	} else {
		g.input = C.ggml_new_tensor_2d(c, C.T_F32, C.int64_t(h.Dim), R)
		x = g.input
	}
	C.ggml_set_input(g.input)
	g.positions = C.ggml_new_tensor_1d(c, C.T_I32, R)
	C.ggml_set_input(g.positions)
	for _, pt := range parts {
		vi := C.ggml_new_tensor_1d(c, C.T_I64, C.int64_t(pt.n*vd*nkv))
		C.ggml_set_input(vi)
		g.vIdx = append(g.vIdx, vi)
		g.sessions = append(g.sessions, pt.p)
	}
	o := &ops{s: s, c: c, g: g, parts: parts, rows: rows}
	xt := &act{t: x, w: h.Dim}
	for i := range s.layers {
		o.li = i
		xt = s.arch.Block(o, &s.layers[i], xt).(*act)
	}
	if o.err != nil {
		g.free()
		return nil, o.err
	}
	x = xt.t
	if s.info.Last() {
		g.outRows = C.ggml_new_tensor_1d(c, C.T_I32, C.int64_t(len(parts)))
		C.ggml_set_input(g.outRows)
		x = C.ggml_get_rows(c, x, g.outRows) // [dim, parts]
		x = C.ggml_mul(c, C.ggml_rms_norm(c, x, C.float(h.NormEps)), s.onorm)
		x = C.ggml_mul_mat(c, s.head, x) // [vocab, parts]
		if sc := h.FinalSoftCap; sc != 0 {
			x = C.ggml_scale(c, C.ggml_tanh(c, C.ggml_scale(c, x, C.float(1/sc))), C.float(sc))
		}
	}
	C.ggml_set_output(x)
	C.ggml_build_forward_expand(g.gf, x)
	g.out = x
	return g, nil
}

// graphFor returns the graph of parts' shape, allocated: a kept one, or a
// new one (kept when it decodes one row per session).
func (s *Stage) graphFor(parts []part, rows int) (*graph, error) {
	key := graphKey(parts)
	s.steps++
	if g := s.graphs[key]; g != nil {
		g.used = s.steps
		return g, nil
	}
	g, err := s.build(parts, rows)
	if err != nil {
		return nil, err
	}
	g.key = key
	galloc := s.galloc
	if rows == len(parts) { // decode steps only
		if g.galloc = C.ggml_gallocr_new(C.ggml_backend_get_default_buffer_type(s.backend)); g.galloc == nil {
			g.free()
			return nil, fmt.Errorf("%w: cannot make a graph allocator", ErrGGML)
		}
		galloc = g.galloc
	}
	if !C.ggml_gallocr_alloc_graph(galloc, g.gf) {
		g.free()
		return nil, fmt.Errorf("%w: cannot allocate a step's graph on %s", ErrGGML, s.Device())
	}
	if g.galloc != nil {
		if len(s.graphs) >= maxGraphs {
			var old *graph
			for _, o := range s.graphs {
				if old == nil || o.used < old.used {
					old = o
				}
			}
			old.free()
			delete(s.graphs, old.key)
		}
		if s.graphs == nil {
			s.graphs = map[string]*graph{}
		}
		g.used = s.steps
		s.graphs[key] = g
	}
	return g, nil
}

func (s *Stage) compute(parts []part, steps []engine.Step, rows int) ([]engine.Output, error) {
	h := s.hp
	g, err := s.graphFor(parts, rows)
	if err != nil {
		return nil, err
	}
	if g.galloc == nil {
		defer g.free() // built for this step only
	}
	vd, nkv := h.VHead(), h.KVHeads
	if s.info.First() {
		toks := make([]int32, 0, rows)
		for _, st := range steps {
			toks = append(toks, st.Tokens...)
		}
		C.ggml_backend_tensor_set(g.input, unsafe.Pointer(&toks[0]), 0, C.size_t(4*rows))
	} else {
		for i, st := range steps {
			C.ggml_backend_tensor_set(g.input, unsafe.Pointer(&st.Hidden[0]), C.size_t(4*h.Dim*parts[i].row0), C.size_t(4*len(st.Hidden)))
		}
	}
	ps := make([]int32, 0, rows)
	var last []int32
	for j, pt := range parts {
		for t := range pt.n {
			ps = append(ps, int32(pt.pos+t))
		}
		last = append(last, int32(pt.row0+pt.n-1))
		// V value e (of vd·kvHeads) of new row t goes to position pos+t of
		// channel e in the transposed cache [cap, vd, kvHeads].
		vi := make([]int64, pt.n*vd*nkv)
		for t := range pt.n {
			for e := range vd * nkv {
				vi[t*vd*nkv+e] = int64(pt.pos+t) + int64(pt.p.cap)*int64(e)
			}
		}
		C.ggml_backend_tensor_set(g.vIdx[j], unsafe.Pointer(&vi[0]), 0, C.size_t(8*len(vi)))
		// Row t sees positions 0..pos+t; the rest of the kvLen read is
		// masked (stale or zero rows past the session's end included).
		for w, ms := range g.masks {
			m := attnMask(pt, w)
			C.ggml_backend_tensor_set(ms[j], unsafe.Pointer(&m[0]), 0, C.size_t(4*len(m)))
		}
	}
	C.ggml_backend_tensor_set(g.positions, unsafe.Pointer(&ps[0]), 0, C.size_t(4*rows))
	if g.outRows != nil {
		C.ggml_backend_tensor_set(g.outRows, unsafe.Pointer(&last[0]), 0, C.size_t(4*len(last)))
	}
	if rc := C.ggml_backend_graph_compute(s.backend, g.gf); rc != 0 {
		return nil, fmt.Errorf("%w: graph compute returned status %d", ErrGGML, int(rc))
	}
	outs := make([]engine.Output, len(parts))
	if s.info.Last() {
		all := make([]float32, len(parts)*h.Vocab)
		C.ggml_backend_tensor_get(g.out, unsafe.Pointer(&all[0]), 0, C.size_t(4*len(all)))
		for i := range parts {
			outs[i].Logits = all[i*h.Vocab : (i+1)*h.Vocab : (i+1)*h.Vocab]
		}
		return outs, nil
	}
	all := make([]float32, rows*h.Dim)
	C.ggml_backend_tensor_get(g.out, unsafe.Pointer(&all[0]), 0, C.size_t(4*len(all)))
	for i, pt := range parts {
		outs[i].Hidden = all[pt.row0*h.Dim : (pt.row0+pt.n)*h.Dim : (pt.row0+pt.n)*h.Dim]
	}
	return outs, nil
}

// repackable reports whether ggml's CPU_REPACK buffer holds a matrix of
// type t and dims in a layout of its own on this CPU (the conditions of
// repack.cpp's ggml_repack_get_optimal_repack_type, which a tensor set
// there must meet: it has no fallback).
func repackable(t engine.DType, dims []uint64) bool {
	if len(dims) != 2 || dims[1]%8 != 0 || dims[0]%8 != 0 {
		return false
	}
	avx2, arm := C.ggml_cpu_has_avx2() != 0, C.ggml_cpu_has_neon() != 0
	switch t {
	case engine.Q4_0, engine.Q4_K:
		return avx2 || arm && (C.ggml_cpu_has_matmul_int8() != 0 || C.ggml_cpu_has_dotprod() != 0)
	case engine.IQ4_NL:
		return avx2 || arm && C.ggml_cpu_has_dotprod() != 0
	case engine.Q2_K:
		return C.ggml_cpu_has_avx512() != 0
	}
	return false
}

// attnMask is part pt's mask, [kvLen, n]: row t (at position pos+t) sees
// positions up to its own, and with a sliding window (w > 0) only those
// less than w before it (key p0 is masked for query p1 where p1−p0 ≥ w,
// as llama.cpp's SWA mask).
func attnMask(pt part, w int) []float32 {
	m := make([]float32, pt.n*pt.kvLen)
	inf := float32(math.Inf(-1))
	for t := range pt.n {
		row := m[t*pt.kvLen : (t+1)*pt.kvLen]
		p := pt.pos + t
		for c := range row {
			if c > p || (w > 0 && p-c >= w) {
				row[c] = inf
			}
		}
	}
	return m
}

// act is an activation of the graph: [w, rows], contiguous.
type act struct {
	t tensor
	w int
}

// ops is the ggml engine's engine.Ops: each op adds nodes to the step's
// graph.
type ops struct {
	s     *Stage
	c     *C.struct_ggml_context
	g     *graph
	parts []part
	rows  int
	li    int // the layer being built, an index into s.layers
	err   error
}

var _ engine.Ops = (*ops)(nil)

func (o *ops) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

func (o *ops) R() C.int64_t { return C.int64_t(o.rows) }

func (o *ops) RMSNorm(x engine.Tensor, w engine.Weight, eps float32) engine.Tensor {
	xt, gw := x.(*act), w.(*gweight)
	n := gw.ne0
	if xt.w == n {
		return &act{C.ggml_mul(o.c, C.ggml_rms_norm(o.c, xt.t, C.float(eps)), gw.t), n}
	}
	if xt.w%n != 0 {
		o.fail(fmt.Errorf("%w: RMSNorm of rows of %d by a weight of %d", engine.ErrShape, xt.w, n))
		return xt
	}
	// Runs of n values (qwen3's heads): rms_norm works along ne0, and the
	// weight broadcasts over the runs.
	t := C.ggml_reshape_2d(o.c, xt.t, C.int64_t(n), C.int64_t(xt.w/n)*o.R())
	t = C.ggml_mul(o.c, C.ggml_rms_norm(o.c, t, C.float(eps)), gw.t)
	return &act{C.ggml_reshape_2d(o.c, t, C.int64_t(xt.w), o.R()), xt.w}
}

func (o *ops) Linear(x engine.Tensor, w engine.Weight) engine.Tensor {
	return o.Linears(x, w)[0]
}

// Linears multiplies by each fused tensor once and views each part's rows
// of the product (made contiguous for the ops that reshape them).
func (o *ops) Linears(x engine.Tensor, ws ...engine.Weight) []engine.Tensor {
	xt := x.(*act)
	done := map[tensor]tensor{}
	out := make([]engine.Tensor, len(ws))
	for i, w := range ws {
		gw := w.(*gweight)
		y, ok := done[gw.t]
		if !ok {
			y = C.ggml_mul_mat(o.c, gw.t, xt.t)
			done[gw.t] = y
		}
		if gw.lo == 0 && gw.hi == gw.rows {
			out[i] = &act{y, gw.rows}
			continue
		}
		n := gw.hi - gw.lo
		v := C.ggml_view_2d(o.c, y, C.int64_t(n), o.R(), C.size_t(4*gw.rows), C.size_t(4*gw.lo))
		out[i] = &act{C.ggml_cont(o.c, v), n}
	}
	return out
}

func (o *ops) AddBias(x engine.Tensor, b engine.Weight) engine.Tensor {
	xt := x.(*act)
	return &act{C.ggml_add(o.c, xt.t, b.(*gweight).t), xt.w}
}

func (o *ops) Rope(x engine.Tensor, r engine.Rope) engine.Tensor {
	xt := x.(*act)
	var factors tensor
	if r.Factors != "" {
		factors = o.s.globals[r.Factors].(*gweight).t
	}
	mode := C.int(0)
	if r.Neox {
		mode = 2 // GGML_ROPE_TYPE_NEOX
	}
	// Unset values as engine.Rope reads them.
	or1 := func(v, def float32) C.float {
		if v == 0 {
			return C.float(def)
		}
		return C.float(v)
	}
	t := C.ggml_reshape_3d(o.c, xt.t, C.int64_t(r.Dims), C.int64_t(xt.w/r.Dims), o.R())
	t = C.ggml_rope_ext(o.c, t, o.g.positions, factors, C.int(r.Dims), mode, C.int(r.OrigContext), C.float(r.Base),
		or1(r.FreqScale, 1), C.float(r.ExtFactor), or1(r.AttnFactor, 1), or1(r.BetaFast, 32), or1(r.BetaSlow, 1))
	return &act{C.ggml_reshape_2d(o.c, t, C.int64_t(xt.w), o.R()), xt.w}
}

// windowMasks are the graph's input masks of window w (0: causal only),
// one per part, made on first use.
func (g *graph) windowMasks(c *C.struct_ggml_context, w int, parts []part) []tensor {
	if ms, ok := g.masks[w]; ok {
		return ms
	}
	var ms []tensor
	for _, pt := range parts {
		m := C.ggml_new_tensor_2d(c, C.T_F32, C.int64_t(pt.kvLen), C.int64_t(pt.n))
		C.ggml_set_input(m)
		ms = append(ms, m)
	}
	if g.masks == nil {
		g.masks = map[int][]tensor{}
	}
	g.masks[w] = ms
	return ms
}

// Attention writes each part's new K and V rows into its session's cache
// and attends over the cache, part by part.
func (o *ops) Attention(q, k, v engine.Tensor, a engine.Attn) engine.Tensor {
	c, g := o.c, o.g
	var sinks tensor
	if a.Sinks != "" {
		w, ok := o.s.layers[o.li].W(a.Sinks).(*gweight)
		if !ok || w.ne0 != a.Heads || w.rows != 1 {
			o.fail(fmt.Errorf("%w: attention sinks %q: want a vector of %d heads", engine.ErrShape, a.Sinks, a.Heads))
			return q
		}
		sinks = w.t
	}
	if a.Window < 0 {
		o.fail(fmt.Errorf("%w: attention window %d", engine.ErrShape, a.Window))
		return q
	}
	masks := g.windowMasks(c, a.Window, o.parts)
	const f4 = 4
	hd, nh, nkv := a.HeadDim, a.Heads, a.KVHeads
	vd := a.VDim
	if vd == 0 {
		vd = hd
	}
	scale := a.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(hd)))
	}
	qa, ka := q.(*act).t, k.(*act).t
	switch {
	case v == nil && vd > hd:
		o.fail(fmt.Errorf("%w: attention V heads of %d in K heads of %d", engine.ErrShape, vd, hd))
		return q
	case vd != o.s.hp.VHead():
		// The session's V cache is VHead wide.
		o.fail(fmt.Errorf("%w: attention V heads of %d; the cache holds %d", engine.ErrShape, vd, o.s.hp.VHead()))
		return q
	}
	var va tensor
	if v != nil {
		va = v.(*act).t
	} else {
		// V is the last vd values of each K head (deepseek2's latent):
		// cached apart, as the transposed V cache wants it.
		va = C.ggml_cont_2d(c, C.ggml_view_3d(c, ka, C.int64_t(vd), C.int64_t(nkv), o.R(), C.size_t(hd*f4), C.size_t(hd*nkv*f4), C.size_t((hd-vd)*f4)),
			C.int64_t(vd*nkv), o.R())
	}
	var att tensor
	for j, pt := range o.parts {
		n, r0 := C.int64_t(pt.n), C.size_t(pt.row0)
		kc, vc := pt.p.k[o.li], pt.p.v[o.li]
		qj := C.ggml_view_3d(c, qa, C.int64_t(hd), C.int64_t(nh), n, C.size_t(hd*f4), C.size_t(hd*nh*f4), r0*C.size_t(hd*nh*f4))
		kj := C.ggml_view_3d(c, ka, C.int64_t(hd), C.int64_t(nkv), n, C.size_t(hd*f4), C.size_t(hd*nkv*f4), r0*C.size_t(hd*nkv*f4))
		vj := C.ggml_view_2d(c, va, 1, n*C.int64_t(vd*nkv), f4, r0*C.size_t(vd*nkv*f4))
		// The new rows go into the cache first (K as rows of
		// [hd, cap, kvHeads] at their positions; V, transposed, value by
		// value at vIdx), and attention reads views of what that wrote,
		// so that ggml orders the writes before the reads.
		kIdx := C.ggml_view_1d(c, g.positions, n, r0*f4)
		kSet := C.ggml_set_rows(c, kc, C.ggml_permute(c, kj, 0, 2, 1, 3), kIdx)
		vFlat := C.ggml_reshape_2d(c, vc, 1, C.int64_t(pt.p.cap*vd*nkv))
		vSet := C.ggml_set_rows(c, vFlat, vj, g.vIdx[j])
		C.ggml_build_forward_expand(g.gf, kSet)
		C.ggml_build_forward_expand(g.gf, vSet)
		kv := C.int64_t(pt.kvLen)
		kAll := C.ggml_view_3d(c, kSet, C.int64_t(hd), kv, C.int64_t(nkv),
			C.size_t(hd*f4), C.size_t(hd*pt.p.cap*f4), 0) // [hd, kvLen, nkv]
		vAll := C.ggml_view_3d(c, vSet, kv, C.int64_t(vd), C.int64_t(nkv),
			C.size_t(pt.p.cap*f4), C.size_t(pt.p.cap*vd*f4), 0) // [kvLen, vd, nkv]
		// Q made contiguous so that ggml may take llamafile's sgemm
		// (which wants a contiguous right operand) for K·Q.
		qp := C.ggml_cont(c, C.ggml_permute(c, qj, 0, 2, 1, 3)) // [hd, n, nh]
		kq := C.ggml_mul_mat(c, kAll, qp)                       // [kvLen, n, nh]
		if a.SoftCap != 0 {
			// As llama.cpp: the raw scores capped, then scaled in the
			// softmax.
			kq = C.ggml_scale(c, C.ggml_tanh(c, C.ggml_scale(c, kq, C.float(1/a.SoftCap))), C.float(a.SoftCap))
		}
		kq = C.ggml_soft_max_ext(c, kq, masks[j], C.float(scale), 0)
		if sinks != nil {
			// Each head's sink joins its softmax's denominator.
			C.ggml_soft_max_add_sinks(kq, sinks)
		}
		kqv := C.ggml_mul_mat(c, vAll, kq) // [vd, n, nh]
		out := C.ggml_cont_2d(c, C.ggml_permute(c, kqv, 0, 2, 1, 3), C.int64_t(vd*nh), n)
		if att == nil {
			att = out
		} else {
			att = C.ggml_concat(c, att, out, 1)
		}
	}
	return &act{att, vd * nh}
}

func (o *ops) SwiGLU(gate, up engine.Tensor) engine.Tensor {
	gt := gate.(*act)
	return &act{C.ggml_mul(o.c, C.ggml_silu(o.c, gt.t), up.(*act).t), gt.w}
}

func (o *ops) Add(a, b engine.Tensor) engine.Tensor {
	at := a.(*act)
	return &act{C.ggml_add(o.c, at.t, b.(*act).t), at.w}
}

func (o *ops) GELU(gate, up engine.Tensor) engine.Tensor {
	gt := gate.(*act)
	return &act{C.ggml_mul(o.c, C.ggml_gelu(o.c, gt.t), up.(*act).t), gt.w}
}

func (o *ops) Scale(x engine.Tensor, s float32) engine.Tensor {
	xt := x.(*act)
	return &act{C.ggml_scale(o.c, xt.t, C.float(s)), xt.w}
}

// MoE is llama.cpp's build_moe_ffn: the router's top k experts by
// mul_mat_id, their outputs weighed and added in rank order. Softmax
// gating with renormalised weights (qwen3moe, Mixtral) and SiLU experts,
// or gpt-oss's: biases, a softmax over the chosen logits, SwiGLU-OAI.
func (o *ops) MoE(x engine.Tensor, m engine.MoE) engine.Tensor {
	c, xt := o.c, x.(*act)
	if m.GELU || !(m.NormTopK || m.WeighChosen || m.DeepSeek) || m.Sigmoid && !m.DeepSeek {
		o.fail(fmt.Errorf("%w: a mixture of experts without renormalised weights, or of GELU experts, on the ggml backend", engine.ErrUnsupportedArch))
		return x
	}
	rw := m.Router.(*gweight)
	router := rw.t
	ne, k, n, d := C.int64_t(rw.rows), C.int64_t(m.TopK), o.R(), C.int64_t(xt.w)
	logits := C.ggml_mul_mat(c, router, xt.t) // [experts, n]
	if m.RouterBias != nil {
		logits = C.ggml_add(c, logits, m.RouterBias.(*gweight).t)
	}
	probs := logits
	switch {
	case m.Sigmoid:
		probs = C.ggml_sigmoid(c, logits)
	case !m.WeighChosen:
		probs = C.ggml_soft_max(c, logits)
	}
	choose := probs
	if m.DeepSeek {
		var err error
		if choose, err = o.deepseekChoice(probs, m, int(ne)); err != nil {
			o.fail(err)
			return x
		}
	}
	sel := C.ggml_argsort_top_k(c, choose, C.int(m.TopK))               // [k, n]
	w := C.ggml_get_rows(c, C.ggml_reshape_3d(c, probs, 1, ne, n), sel) // [1, k, n]
	w2 := C.ggml_reshape_2d(c, w, k, n)
	switch {
	case m.WeighChosen:
		w2 = C.ggml_soft_max(c, w2)
	case m.NormTopK:
		sum := C.ggml_clamp(c, C.ggml_sum_rows(c, w2), C.float(minWeightSum), C.float(math.Inf(1)))
		w2 = C.ggml_div(c, w2, sum)
	}
	if m.DeepSeek {
		w2 = C.ggml_scale(c, w2, C.float(m.WeightScale))
	}
	w = C.ggml_reshape_3d(c, w2, 1, k, n)
	cur := C.ggml_reshape_3d(c, xt.t, d, 1, n)
	expert := func(wt, b engine.Weight, in tensor) tensor {
		y := C.ggml_mul_mat_id(c, wt.(*gweight).t, in, sel)
		if b != nil {
			y = C.ggml_add_id(c, y, b.(*gweight).t, sel)
		}
		return y
	}
	up := expert(m.Up, m.UpBias, cur)       // [ff, k, n]
	gate := expert(m.Gate, m.GateBias, cur) // [ff, k, n]
	var a tensor
	if m.OAI {
		a = C.ggml_swiglu_oai(c, gate, up, C.float(m.OAIAlpha), C.float(m.OAILimit))
	} else {
		a = C.ggml_swiglu_split(c, gate, up)
	}
	ex := C.ggml_mul(c, expert(m.Down, m.DownBias, a), w) // [d, k, n]
	// The experts added in rank order, as llama.cpp's chain of adds.
	// ex is contiguous: a row's k outputs are 4·d bytes apart, rows 4·d·k.
	nb1, nb2 := C.size_t(4*d), C.size_t(4*d*k)
	out := C.ggml_view_2d(c, ex, d, n, nb2, 0)
	for i := C.size_t(1); i < C.size_t(k); i++ {
		out = C.ggml_add(c, out, C.ggml_view_2d(c, ex, d, n, nb2, i*nb1))
	}
	return &act{C.ggml_cont(c, out), xt.w}
}

// Slice views each head's values [lo, hi), made contiguous.
func (o *ops) Slice(x engine.Tensor, every, lo, hi int) engine.Tensor {
	xt := x.(*act)
	if every <= 0 || lo < 0 || hi <= lo || hi > every || xt.w%every != 0 {
		o.fail(fmt.Errorf("%w: slice [%d, %d) of each %d of rows of %d", engine.ErrShape, lo, hi, every, xt.w))
		return x
	}
	n, w := xt.w/every, hi-lo
	v := C.ggml_view_3d(o.c, xt.t, C.int64_t(w), C.int64_t(n), o.R(), C.size_t(4*every), C.size_t(4*xt.w), C.size_t(4*lo))
	return &act{C.ggml_cont_2d(o.c, v, C.int64_t(n*w), o.R()), n * w}
}

// Concat is ggml_concat along each head, the one-headed input repeated
// for every head first (as llama.cpp's non-MLA K).
func (o *ops) Concat(a, b engine.Tensor, aw, bw int) engine.Tensor {
	at, bt := a.(*act), b.(*act)
	if aw <= 0 || bw <= 0 || at.w%aw != 0 || bt.w%bw != 0 {
		o.fail(fmt.Errorf("%w: concat of rows of %d and %d by heads of %d and %d", engine.ErrShape, at.w, bt.w, aw, bw))
		return a
	}
	na, nb := at.w/aw, bt.w/bw
	n := max(na, nb)
	if na != nb && min(na, nb) != 1 {
		o.fail(fmt.Errorf("%w: concat of %d heads and %d heads", engine.ErrShape, na, nb))
		return a
	}
	a3 := C.ggml_reshape_3d(o.c, at.t, C.int64_t(aw), C.int64_t(na), o.R())
	b3 := C.ggml_reshape_3d(o.c, bt.t, C.int64_t(bw), C.int64_t(nb), o.R())
	if na < n {
		a3 = C.ggml_repeat_4d(o.c, a3, C.int64_t(aw), C.int64_t(n), o.R(), 1)
	}
	if nb < n {
		b3 = C.ggml_repeat_4d(o.c, b3, C.int64_t(bw), C.int64_t(n), o.R(), 1)
	}
	cat := C.ggml_concat(o.c, a3, b3, 0)
	return &act{C.ggml_reshape_2d(o.c, cat, C.int64_t(n*(aw+bw)), o.R()), n * (aw + bw)}
}

// HeadLinear is one ggml_mul_mat of the 3-D weight by x's heads, as
// llama.cpp's deepseek2 multiplies by attn_k_b and attn_v_b.
func (o *ops) HeadLinear(x engine.Tensor, w engine.Weight) engine.Tensor {
	xt, gw := x.(*act), w.(*gweight)
	cols, rows := gw.ne0, gw.rows
	if cols <= 0 || xt.w%cols != 0 {
		o.fail(fmt.Errorf("%w: per-head product of rows of %d by heads of %d", engine.ErrShape, xt.w, cols))
		return x
	}
	nh := xt.w / cols
	x3 := C.ggml_permute(o.c, C.ggml_reshape_3d(o.c, xt.t, C.int64_t(cols), C.int64_t(nh), o.R()), 0, 2, 1, 3) // [cols, n, nh]
	y := C.ggml_mul_mat(o.c, gw.t, x3)                                                                         // [rows, n, nh]
	return &act{C.ggml_cont_2d(o.c, C.ggml_permute(o.c, y, 0, 2, 1, 3), C.int64_t(nh*rows), o.R()), nh * rows}
}

// deepseekChoice is what deepseek2's experts are chosen by (llama.cpp's
// build_moe_ffn): the probabilities plus exp_probs_b, and with expert
// groups, the groups outside the GroupsUsed whose two best sum highest
// masked to −∞.
func (o *ops) deepseekChoice(probs tensor, m engine.MoE, ne int) (tensor, error) {
	c, n := o.c, o.R()
	choose := probs
	if m.SelectBias != nil {
		b := m.SelectBias.(*gweight)
		if b.ne0 != ne || b.rows != 1 {
			return nil, fmt.Errorf("%w: expert selection bias of %d for %d experts", engine.ErrShape, b.ne0, ne)
		}
		choose = C.ggml_add(c, probs, b.t)
	}
	if m.Groups <= 1 {
		return choose, nil
	}
	if ne%m.Groups != 0 || ne/m.Groups < 2 || m.GroupsUsed <= 0 || m.GroupsUsed >= m.Groups {
		return nil, fmt.Errorf("%w: %d experts in %d groups, %d used", engine.ErrShape, ne, m.Groups, m.GroupsUsed)
	}
	per, ng := C.int64_t(ne/m.Groups), C.int64_t(m.Groups)
	groups := C.ggml_reshape_3d(c, choose, per, ng, n)                                               // [per, groups, n]
	best := C.ggml_argsort_top_k(c, groups, 2)                                                       // [2, groups, n]
	scores := C.ggml_get_rows(c, C.ggml_reshape_4d(c, groups, 1, per, ng, n), best)                  // [1, 2, groups, n]
	scores = C.ggml_reshape_2d(c, C.ggml_sum_rows(c, C.ggml_reshape_3d(c, scores, 2, ng, n)), ng, n) // [groups, n]
	kept := C.ggml_argsort_top_k(c, scores, C.int(m.GroupsUsed))                                     // [used, n]
	keep := C.ggml_get_rows(c, groups, kept)                                                         // [per, used, n]
	masked := C.ggml_set_rows(c, C.ggml_fill(c, groups, C.float(math.Inf(-1))), keep, kept)
	return C.ggml_reshape_2d(c, masked, C.int64_t(ne), n), nil
}

// minWeightSum is llama.cpp's clamp of the chosen weights' sum before
// renormalising them (the smallest normal half).
const minWeightSum = 6.103515625e-5
