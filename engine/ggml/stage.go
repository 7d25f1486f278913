package ggml

/*
#include "decls.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

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
	flash    *bool
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

// WithFlashAttention chooses how attention is computed: one fused ggml
// flash_attn_ext over the cache (on), or K·Q, a masked softmax and V·P as
// separate products (off). Default: on the CPU with -tags ggmlrelease,
// whose kernel computes a prefill in tiles; off with the vendored ggml,
// whose kernel walks the keys one at a time, and on GPUs (whether each
// GPU backend takes flash_attn_ext over an F32 cache is untested). Either
// way the cache is F32; only the summation order differs.
func WithFlashAttention(on bool) Option { return func(o *options) { o.flash = &on } }

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
	flash    bool           // attention as flash_attn_ext (WithFlashAttention)
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
	if isCPU(s.backend) && !o.noRepack {
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
		return fmt.Errorf("%w: no %s device%s", ErrGGML, o.device, noDeviceHint())
	}
	s.flash = flashDefault && isCPU(s.backend)
	if o.flash != nil {
		s.flash = *o.flash
	}
	if isCPU(s.backend) {
		if err := setThreads(s.backend, o.threads); err != nil {
			s.free()
			return err
		}
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

// FlashAttention reports whether attention runs as flash_attn_ext.
func (s *Stage) FlashAttention() bool { return s.flash }

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
