package engine

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"time"
)

// Stage runs a contiguous range of a model's layers. Both the real engine
// (*Local) and the simulated backend (*SimStage) implement it.
type Stage interface {
	Info() Info
	// NewSession reserves a KV cache of maxTokens positions.
	NewSession(maxTokens int) (Session, error)
	// Forward runs one step of one session: a prefill of n tokens or a
	// decode of one go through the same code.
	Forward(ctx context.Context, step Step) (Output, error)
	// ForwardBatch runs steps of distinct sessions together, reading each
	// weight once for all of them; each result is bit-identical to Forward.
	ForwardBatch(ctx context.Context, steps []Step) ([]Output, error)
	Close() error
}

// Session is one sequence's KV cache on one stage.
type Session interface {
	Len() int // positions held
	Cap() int // positions reserved
	// Truncate drops positions n and after, to redo or replay from n.
	Truncate(n int) error
	// Close frees the cache; the session cannot be used afterwards.
	Close() error
}

// Step is the input of one session for one call.
type Step struct {
	Session Session
	// Pos is the position of the first input; it must equal Session.Len().
	Pos int
	// Tokens feed the first stage; Hidden (n × Info().Hidden, row-major)
	// feeds the others. Exactly one is set.
	Tokens []int32
	Hidden []float32
}

// N is the number of positions the step advances.
func (s Step) N(hidden int) int {
	if s.Tokens != nil {
		return len(s.Tokens)
	}
	if hidden <= 0 {
		return 0
	}
	return len(s.Hidden) / hidden
}

// Output is what one step produces.
type Output struct {
	// Hidden are the n × Info().Hidden output states of a stage that is
	// not last.
	Hidden []float32
	// Logits are the Info().Vocab logits of the step's last position, on
	// the last stage.
	Logits []float32
}

// The engines of this module, as Info.Engine names them.
const (
	EngineGo  = "go"
	EngineSim = "sim"
)

// Info describes a loaded stage.
type Info struct {
	Name        string // general.name; ends in "-simulated" for a SimStage
	Arch        string
	Layers      int // layers in the whole model
	Lo, Hi      int // this stage's range [Lo, Hi)
	Hidden      int
	Vocab       int
	Context     int // the model's trained context length
	Fingerprint string
	Simulated   bool
	// Engine names the backend that computes the stage: "go" (Local),
	// "sim" (SimStage), or another backend's label such as "ggml-CPU" or
	// "ggml-CUDA0". Only "go" is bit-reproducible across machines.
	Engine  string
	Threads int
	// WeightBytes is the memory the stage's weights take.
	WeightBytes int64
	// StepBytes is the weight bytes one decode step reads: WeightBytes but
	// the token embeddings, of which it reads one row (all of them where
	// the output matrix is the same table). 0: not known (WeightBytes).
	StepBytes int64
	// KVBytesPerToken is the KV cache one position takes across the
	// stage's layers.
	KVBytesPerToken int64
	HParams         HParams
}

// First reports whether the stage holds the token embedding.
func (i Info) First() bool { return i.Lo == 0 }

// Last reports whether the stage holds the output head.
func (i Info) Last() bool { return i.Hi == i.Layers }

// Option configures Open and NewSimStage.
type Option func(*options)

type options struct {
	lo, hi   int
	hasRange bool
	threads  int
	simSleep func(context.Context, time.Duration) error
	// exactGELU: see WithExactGELU.
	exactGELU bool
}

// WithRange loads layers [lo, hi) only (default: all).
func WithRange(lo, hi int) Option {
	return func(o *options) { o.lo, o.hi, o.hasRange = lo, hi, true }
}

// WithThreads sets the goroutines a step uses (default: GOMAXPROCS).
// Results are bit-identical at any count.
func WithThreads(n int) Option { return func(o *options) { o.threads = n } }

// WithExactGELU computes GELU by its tanh formula in float32 (as ggml's
// GPU kernels do) instead of the F16 table ggml's CPU uses (the default,
// which llama.cpp's CPU output needs). Results stay bit-identical at any
// batch size and thread count either way.
func WithExactGELU() Option { return func(o *options) { o.exactGELU = true } }

func buildOptions(opts []Option) options {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	if o.threads <= 0 {
		o.threads = runtime.GOMAXPROCS(0)
	}
	return o
}

// Local is a stage that really computes its layers.
type Local struct {
	mu     sync.Mutex
	info   Info
	hp     HParams
	arch   *Arch
	embd   *matrix
	layers []Layer // Weights: *matrix for matrices, []float32 for vectors
	// globals are the architecture's tensors outside the layers (RoPE
	// factors), as layers hold theirs.
	globals map[string]Weight
	freqs   map[Rope][]float32 // RoPE's frequencies per variant in use
	onorm   []float32
	out     *matrix
	// exactGELU: GELU by its formula, not ggml's CPU table (WithExactGELU).
	exactGELU bool
	tok       *Tokenizer
	pool      *pool
	closed    bool
}

// Open loads the stage of the GGUF model at path given by the options
// (all layers by default), reading only that stage's tensors. path may
// name any part of a split model; see OpenFile.
func Open(path string, opts ...Option) (*Local, error) {
	f, fh, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	s, err := Load(f, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// OpenReaderAt is Open on size bytes behind r. It does not keep r.
func OpenReaderAt(r io.ReaderAt, size int64, opts ...Option) (*Local, error) {
	f, err := ReadFile(r, size)
	if err != nil {
		return nil, err
	}
	return Load(f, opts...)
}

// Load loads the stage given by the options from the parsed model f (from
// ReadFile, OpenFile or ReadSplit), reading only that stage's tensors, by
// offset, from the parts that hold them. It does not keep f.
func Load(f *File, opts ...Option) (*Local, error) {
	o := buildOptions(opts)
	hp, err := ReadHParams(f)
	if err != nil {
		return nil, err
	}
	slo, shi, sfp, slice, err := f.SliceRange()
	if err != nil {
		return nil, err
	}
	if !o.hasRange {
		o.lo, o.hi = 0, hp.Layers
		if slice {
			o.lo, o.hi = slo, shi // a slice loads its own range by default
		}
	}
	if slice && (o.lo < slo || o.hi > shi) {
		return nil, fmt.Errorf("%w: [%d, %d) of a slice of layers [%d, %d)", ErrRange, o.lo, o.hi, slo, shi)
	}
	if o.lo < 0 || o.hi > hp.Layers || o.lo >= o.hi {
		return nil, fmt.Errorf("%w: [%d, %d) of a %d-layer model", ErrRange, o.lo, o.hi, hp.Layers)
	}
	fp, err := f.Fingerprint()
	if err != nil {
		return nil, err
	}
	if slice {
		fp = sfp // the model's identity, not this file's
	}
	tok, err := NewTokenizer(f)
	if err != nil {
		return nil, err
	}
	if tok.Vocab() != hp.Vocab {
		return nil, fmt.Errorf("%w: %d tokenizer tokens for %d embedding rows", ErrShape, tok.Vocab(), hp.Vocab)
	}
	s := &Local{hp: hp, tok: tok}
	kd, vd := hp.CacheDims()
	s.info = Info{Engine: EngineGo, Name: hp.Name, Arch: hp.Arch, Layers: hp.Layers, Lo: o.lo, Hi: o.hi, Hidden: hp.Dim,
		Vocab: hp.Vocab, Context: hp.Context, Fingerprint: fp, Threads: o.threads, HParams: hp,
		KVBytesPerToken: int64(o.hi-o.lo) * int64(kd+vd) * 4}
	if s.arch, err = Architecture(hp.Arch); err != nil {
		return nil, err
	}
	l := &loader{f: f}
	d := hp.Dim
	var globals []TensorSpec
	if s.arch.Globals != nil {
		globals = s.arch.Globals(&s.hp)
	}
	if s.globals, err = l.weights("", globals, false); err != nil {
		return nil, err
	}
	if s.info.First() {
		if s.embd, err = l.matrix("token_embd.weight", hp.Vocab, d, false); err != nil {
			return nil, err
		}
	}
	for i := o.lo; i < o.hi; i++ {
		w, err := l.weights(LayerPrefix(i), s.arch.Tensors(&s.hp, i), true)
		if err != nil {
			return nil, err
		}
		s.layers = append(s.layers, Layer{Index: i, HP: &s.hp, Weights: w})
	}
	if s.info.Last() {
		if s.onorm, err = l.vector("output_norm.weight", d); err != nil {
			return nil, err
		}
		// The head takes part in products only (the kernels' layout),
		// unless it is the embedding too, read a row at a time.
		switch _, ok := f.Tensor("output.weight"); {
		case ok:
			s.out, err = l.matrix("output.weight", hp.Vocab, d, true)
		case s.embd != nil:
			s.out = s.embd // tied head
		default:
			s.out, err = l.matrix("token_embd.weight", hp.Vocab, d, true)
		}
		if err != nil {
			return nil, err
		}
		if s.out != s.embd {
			l.settle(s.out)
		}
	}
	s.info.WeightBytes = s.weightBytes()
	s.info.StepBytes = s.info.WeightBytes
	if s.embd != nil && s.out != s.embd {
		s.info.StepBytes -= s.embd.bytes() - s.embd.bytes()/int64(hp.Vocab)
	}
	s.pool = newPool(o.threads)
	s.exactGELU = o.exactGELU
	return s, nil
}

func (s *Local) weightBytes() int64 {
	n := int64(0)
	if s.embd != nil {
		n += s.embd.bytes()
	}
	if s.out != nil && s.out != s.embd {
		n += s.out.bytes()
	}
	n += int64(len(s.onorm)) * 4
	for _, l := range s.layers {
		for _, w := range l.Weights {
			switch w := w.(type) {
			case *matrix:
				n += w.bytes()
			case []*matrix:
				for _, m := range w {
					n += m.bytes()
				}
			case []float32:
				n += int64(len(w)) * 4
			}
		}
	}
	return n
}

// Info describes the stage.
func (s *Local) Info() Info { return s.info }

// Tokenizer is the model's tokenizer (from the file's metadata).
func (s *Local) Tokenizer() *Tokenizer { return s.tok }

// Close stops the stage's workers. Sessions die with it.
func (s *Local) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.pool.close()
	}
	return nil
}

// kvSession holds one sequence's K and V for the stage's layers:
// k[layer][pos*kvDim + head*headDim + i].
type kvSession struct {
	positions
	st   *Local
	k, v [][]float32
}

// positions is the bookkeeping every backend's session shares: how many
// positions it holds, of how many, and whether it is closed, guarded by
// the stage's lock (so Len may wait for a running step).
type positions struct {
	mu     *sync.Mutex
	n, cap int
	closed bool
}

func (p *positions) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *positions) Cap() int { return p.cap }

func (p *positions) Truncate(n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w: closed", ErrSession)
	}
	if n < 0 || n > p.n {
		return fmt.Errorf("%w: truncate to %d of %d positions", ErrPosition, n, p.n)
	}
	p.n = n
	return nil
}

// NewSession reserves a KV cache of maxTokens positions
// (maxTokens × Info().KVBytesPerToken bytes).
func (s *Local) NewSession(maxTokens int) (Session, error) {
	if maxTokens <= 0 || maxTokens > 1<<24 {
		return nil, fmt.Errorf("%w: %d positions", ErrInput, maxTokens)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.hp.LongRoPE && maxTokens > s.hp.Context {
		return nil, fmt.Errorf("%w: %d positions > the original context %d: the long RoPE factors (rope_factors_long.weight) are not supported",
			ErrContextFull, maxTokens, s.hp.Context)
	}
	kd, vd := s.hp.CacheDims()
	ss := &kvSession{st: s, positions: positions{mu: &s.mu, cap: maxTokens}}
	for range s.layers {
		ss.k = append(ss.k, make([]float32, maxTokens*kd))
		ss.v = append(ss.v, make([]float32, maxTokens*vd))
	}
	return ss, nil
}

func (k *kvSession) Close() error {
	k.st.mu.Lock()
	defer k.st.mu.Unlock()
	k.closed = true
	k.k, k.v = nil, nil
	return nil
}

// Forward runs one step; see Stage.
func (s *Local) Forward(ctx context.Context, step Step) (Output, error) {
	out, err := s.ForwardBatch(ctx, []Step{step})
	if err != nil {
		return Output{}, err
	}
	return out[0], nil
}

// ForwardBatch runs several sessions' steps together; see Stage.
func (s *Local) ForwardBatch(ctx context.Context, steps []Step) ([]Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if len(steps) == 0 {
		return nil, nil
	}
	d := s.hp.Dim
	sess := make([]*kvSession, len(steps))
	rows := make([]rowRef, 0, len(steps))
	seen := map[*kvSession]bool{}
	for i, st := range steps {
		ks, ok := st.Session.(*kvSession)
		if !ok || ks.st != s || ks.closed {
			return nil, fmt.Errorf("%w: step %d: closed or from another stage", ErrSession, i)
		}
		if seen[ks] {
			return nil, fmt.Errorf("%w: step %d: session twice in one batch", ErrSession, i)
		}
		seen[ks] = true
		sess[i] = ks
		if st.Pos != ks.n {
			return nil, fmt.Errorf("%w: step %d starts at %d, session holds %d", ErrPosition, i, st.Pos, ks.n)
		}
		var n int
		if s.info.First() {
			if st.Tokens == nil || st.Hidden != nil {
				return nil, fmt.Errorf("%w: step %d: the first stage takes tokens", ErrInput, i)
			}
			for _, t := range st.Tokens {
				if t < 0 || int(t) >= s.hp.Vocab {
					return nil, fmt.Errorf("%w: step %d: token %d outside vocabulary of %d", ErrInput, i, t, s.hp.Vocab)
				}
			}
			n = len(st.Tokens)
		} else {
			if st.Tokens != nil || len(st.Hidden)%d != 0 {
				return nil, fmt.Errorf("%w: step %d: %d hidden values, want a multiple of %d", ErrShape, i, len(st.Hidden), d)
			}
			n = len(st.Hidden) / d
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: step %d is empty", ErrInput, i)
		}
		if ks.n+n > ks.cap {
			return nil, fmt.Errorf("%w: step %d: %d + %d positions > %d", ErrContextFull, i, ks.n, n, ks.cap)
		}
		for t := 0; t < n; t++ {
			rows = append(rows, rowRef{step: i, sess: ks, pos: ks.n + t})
		}
	}
	x := make([]float32, len(rows)*d)
	r := 0
	for _, st := range steps {
		if s.info.First() {
			for _, t := range st.Tokens {
				s.embd.row(int(t), x[r*d:(r+1)*d])
				r++
			}
		} else {
			copy(x[r*d:], st.Hidden)
			r += len(st.Hidden) / d
		}
	}
	fw := &forward{s: s, rows: rows}
	xt := &goTensor{f: x, w: d}
	for li := range s.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := fw.layer(li, xt); err != nil {
			return nil, err
		}
	}
	outs := make([]Output, len(steps))
	if s.info.Last() {
		// Logits only for each step's last position.
		last := make([]float32, len(steps)*d)
		for i := range rows {
			if i == len(rows)-1 || rows[i+1].step != rows[i].step {
				rmsNorm(last[rows[i].step*d:(rows[i].step+1)*d], x[i*d:(i+1)*d], s.onorm, s.hp.NormEps)
			}
		}
		logits := make([]float32, len(steps)*s.hp.Vocab)
		s.matmul(logits, s.out, newAct(last, len(steps), d))
		if c := s.hp.FinalSoftCap; c != 0 {
			softCap(logits, c)
		}
		for i := range outs {
			outs[i].Logits = logits[i*s.hp.Vocab : (i+1)*s.hp.Vocab : (i+1)*s.hp.Vocab]
		}
	} else {
		r := 0
		for i, st := range steps {
			n := st.N(d)
			if s.info.First() {
				n = len(st.Tokens)
			}
			outs[i].Hidden = x[r*d : (r+n)*d : (r+n)*d]
			r += n
		}
	}
	for i, st := range steps {
		if s.info.First() {
			sess[i].n += len(st.Tokens)
		} else {
			sess[i].n += len(st.Hidden) / d
		}
	}
	return outs, nil
}

// rowRef is one position of the batch.
type rowRef struct {
	step int
	sess *kvSession
	pos  int
}

// forward holds the scratch of one ForwardBatch call; it is the Go
// engine's Ops (ops.go).
type forward struct {
	s     *Local
	rows  []rowRef
	li    int // the layer being computed
	arena arena
	trigs map[Rope][2][]float32 // per RoPE variant: cos, sin per row
	moe   *moeScratch
	err   error
}

// ropeFreqs are base^(-2i/d), divided by the file's frequency factors where
// it has them (as ggml's rope does with rope_freqs.weight), rounded to
// float32.
func ropeFreqs(base float32, d int, factors []float32) []float32 {
	out := make([]float32, d/2)
	for i := range out {
		f := math.Pow(float64(base), -float64(2*i)/float64(d))
		if factors != nil {
			f /= float64(factors[i])
		}
		out[i] = float32(f)
	}
	return out
}

// layer runs the architecture's block of layer li over x, in place.
func (fw *forward) layer(li int, x *goTensor) error {
	fw.li = li
	fw.arena.reset()
	out := fw.s.arch.Block(fw, &fw.s.layers[li], x)
	if fw.err != nil {
		return fw.err
	}
	if y := fw.t(out); y != x {
		copy(x.f, y.f) // a block whose last op was not x's own
	}
	return nil
}

// attention computes, for every (row, head), softmax(q·Kᵀ/√d)·V over the
// session's positions up to the row's own. Each (row, KV head) is one
// goroutine's work: the heads that share the KV head go through its cache
// together, a block of positions at a time, so each K and V row is read
// from memory once for all of them. Every score is still one dot product
// and every output one sequential sum over the positions, in order.
//
// sinks, where not nil, are each head's sink logit, which joins its
// softmax's denominator (Attn.Sinks).
//
// vInK: V is the last vDim values of each K head (Attn.VDim).
func (fw *forward) attention(li int, qs, att []float32, a Attn, sinks []float32, vInK bool) {
	d, kvd, hd := a.Heads*a.HeadDim, a.KVHeads*a.HeadDim, a.HeadDim
	vd := a.vDim()
	dv, vs := a.Heads*vd, a.KVHeads*vd // output width; V cache stride
	if vInK {
		vs = kvd
	}
	group := a.Heads / a.KVHeads
	sc := a.Scale
	if sc == 0 {
		sc = float32(1 / math.Sqrt(float64(hd)))
	}
	// first is the first position a row at pos sees: with a sliding
	// window, key p0 is masked for query p1 where p1−p0 ≥ Window (as
	// llama.cpp's SWA mask).
	first := func(pos int) int {
		if a.Window > 0 {
			return max(0, pos-a.Window+1)
		}
		return 0
	}
	// A unit is a row's KV head and up to unitHeads of the heads that
	// share it: deepseek2's absorbed attention has all its heads on one
	// KV head, and a decode step would otherwise be one goroutine's. Each
	// head's scores and sums are its own, so the split leaves the bits.
	hpu := min(group, unitHeads)
	nsub := (group + hpu - 1) / hpu
	units := len(fw.rows) * a.KVHeads * nsub
	work := 0
	for _, r := range fw.rows {
		work += (r.pos + 1 - first(r.pos)) * a.Heads * hd * 2
	}
	fw.s.pool.forRange(units, fw.s.pool.grainFor(units, 4), work, func(lo, hi int) {
		var scores []float32
		for u := lo; u < hi; u++ {
			r, kh, sub := u/(a.KVHeads*nsub), u/nsub%a.KVHeads, u%nsub
			g0 := kh*group + sub*hpu // the unit's first head
			gn := min(hpu, group-sub*hpu)
			row := fw.rows[r]
			p := first(row.pos)
			// The cache from the first position seen: scores index
			// positions from there.
			kc := row.sess.k[li][p*kvd+kh*hd:]
			var vc []float32
			if vInK {
				vc = row.sess.k[li][p*kvd+kh*hd+hd-vd:]
			} else {
				vc = row.sess.v[li][p*vs+kh*vd:]
			}
			np := row.pos + 1 - p
			if cap(scores) < gn*np {
				scores = make([]float32, gn*np)
			}
			scores = scores[:gn*np]
			q := qs[r*d+g0*hd : r*d+(g0+gn)*hd]
			out := att[r*dv+g0*vd : r*dv+(g0+gn)*vd]
			for p0 := 0; p0 < np; p0 += attnBlock {
				p1 := min(p0+attnBlock, np)
				for g := 0; g < gn; g++ {
					dotStridedF32(scores[g*np+p0:g*np+p1], kc[p0*kvd:], q[g*hd:(g+1)*hd], kvd)
				}
			}
			for g := 0; g < gn; g++ {
				sg := scores[g*np : (g+1)*np]
				if a.SoftCap != 0 {
					softCap(sg, a.SoftCap)
				}
				scale(sg, sc)
			}
			var sk []float32
			if sinks != nil {
				sk = sinks[g0 : g0+gn]
			}
			softmaxRows(scores, np, sk)
			clear(out)
			for p0 := 0; p0 < np; p0 += attnBlock {
				p1 := min(p0+attnBlock, np)
				for g := 0; g < gn; g++ {
					attnAV(out[g*vd:(g+1)*vd], vc[p0*vs:], vs, scores[g*np+p0:g*np+p1])
				}
			}
		}
	})
}

// unitHeads is the most heads one attention unit takes (more share a KV
// head only in deepseek2's absorbed attention).
const unitHeads = 16

// softCap turns each score s into c·tanh(s·(1/c)) in place, as ggml's
// scale, tanh, scale nodes do (llama.cpp's attention and final logit
// soft-capping), each step rounded to float32.
func softCap(s []float32, c float32) {
	inv := 1 / c
	for i, x := range s {
		s[i] = float32(c * float32(math.Tanh(float64(float32(x*inv)))))
	}
}

// attnBlock is the positions whose K (or V) rows the heads of a group
// meet while they are in cache: 64 rows of a 128-wide head are 32 KB.
const attnBlock = 64

// scalePortable is scale's definition.
func scalePortable(s []float32, f float32) {
	for i := range s {
		s[i] = float32(s[i] * f)
	}
}

// attnAVPortable is attnAV's definition: each output continues its
// sequential sum over the positions with products rounded to float32.
func attnAVPortable(out, v []float32, stride int, p []float32) {
	for j, pj := range p {
		vj := v[j*stride : j*stride+len(out)]
		for i := range out {
			out[i] += float32(pj * vj[i])
		}
	}
}

// rope rotates one head in place: consecutive pairs (2i, 2i+1), or NEOX
// pairs (i, i+d/2).
func rope(x, cos, sin []float32, neox bool) {
	half := len(x) / 2
	for i := 0; i < half; i++ {
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+half
		}
		x0, x1 := x[a], x[b]
		c, s := cos[i], sin[i]
		x[a] = float32(x0*c) - float32(x1*s)
		x[b] = float32(x0*s) + float32(x1*c)
	}
}

func addTo(dst, src []float32) {
	if len(src) == len(dst) {
		for i := range dst {
			dst[i] += src[i]
		}
		return
	}
	for i := range dst {
		dst[i] += src[i%len(src)]
	}
}
