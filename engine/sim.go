package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/stratanet/strata/layers"
)

// SimSuffix ends the name of every simulated model, so that nothing a
// simulated stage serves can pass for a real model's output.
const SimSuffix = "-simulated"

// SimStage is the simulated backend: the Stage interface with no weights.
// Each call waits as long as package layers' cost model says the declared
// device takes for the declared model, and returns deterministic
// pseudo-hidden-states (each layer a fixed hash of the state, the layer and
// the position), so that pipelines chain, any split gives the same tokens,
// and a laptop can stand in for a swarm of big GPUs.
type SimStage struct {
	mu     sync.Mutex
	spec   layers.ModelSpec
	hw     layers.Hardware
	info   Info
	sleep  func(context.Context, time.Duration) error
	closed bool
}

// WithSimSleep replaces the simulated stage's wait (for tests: record the
// duration instead of sleeping).
func WithSimSleep(f func(context.Context, time.Duration) error) Option {
	return func(o *options) { o.simSleep = f }
}

// NewSimStage simulates layers [lo, hi) (WithRange; default all) of model
// spec on device hw.
func NewSimStage(spec layers.ModelSpec, hw layers.Hardware, opts ...Option) (*SimStage, error) {
	if err := hw.Validate(); err != nil {
		return nil, err
	}
	if _, err := layers.NewModelSpec(spec.HyperParams); err != nil || spec.HeadDim() == 0 {
		return nil, fmt.Errorf("%w: simulated model spec %q: %v", ErrShape, spec.Name, err)
	}
	o := buildOptions(opts)
	if !o.hasRange {
		o.lo, o.hi = 0, spec.Layers
	}
	if o.lo < 0 || o.hi > spec.Layers || o.lo >= o.hi {
		return nil, fmt.Errorf("%w: [%d, %d) of a %d-layer model", ErrRange, o.lo, o.hi, spec.Layers)
	}
	s := &SimStage{spec: spec, hw: hw, sleep: o.simSleep}
	if s.sleep == nil {
		s.sleep = sleepCtx
	}
	k := o.hi - o.lo
	h := sha256.Sum256([]byte(fmt.Sprintf("strata simulated model %+v", spec.HyperParams)))
	s.info = Info{Engine: EngineSim, Name: spec.Name + SimSuffix, Arch: "simulated", Layers: spec.Layers, Lo: o.lo, Hi: o.hi,
		Hidden: spec.Hidden, Vocab: spec.Vocab, Context: 1 << 20, Simulated: true, Threads: 1,
		Fingerprint:     "simulated-" + hex.EncodeToString(h[:16]),
		WeightBytes:     int64(float64(k) * spec.LayerWeightBytes()),
		KVBytesPerToken: int64(float64(k) * spec.KVBytesPerToken()),
		HParams: HParams{Arch: "simulated", Name: spec.Name + SimSuffix, Layers: spec.Layers, Dim: spec.Hidden,
			Heads: spec.Heads, KVHeads: spec.KVHeads, HeadDim: spec.HeadDim(), FFN: spec.FFN, Vocab: spec.Vocab}}
	if s.info.First() {
		s.info.WeightBytes += int64(spec.EmbeddingBytes())
	}
	if s.info.Last() {
		s.info.WeightBytes += int64(spec.HeadBytes())
	}
	return s, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Info describes the stage; Simulated is true and Name ends in SimSuffix.
func (s *SimStage) Info() Info { return s.info }

// String labels the stage for logs.
func (s *SimStage) String() string {
	return fmt.Sprintf("SIMULATED %s on %s, layers [%d, %d)", s.spec.Name, s.hw.Name, s.info.Lo, s.info.Hi)
}

// Close marks the stage closed.
func (s *SimStage) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

type simSession struct {
	positions
}

func (k *simSession) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return nil
}

// NewSession reserves maxTokens positions (no memory is really taken).
func (s *SimStage) NewSession(maxTokens int) (Session, error) {
	if maxTokens <= 0 {
		return nil, fmt.Errorf("%w: %d positions", ErrInput, maxTokens)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return &simSession{positions{mu: &s.mu, cap: maxTokens}}, nil
}

// Forward runs one step; see Stage.
func (s *SimStage) Forward(ctx context.Context, step Step) (Output, error) {
	out, err := s.ForwardBatch(ctx, []Step{step})
	if err != nil {
		return Output{}, err
	}
	return out[0], nil
}

// StepTime is how long the cost model says a batch of steps takes: decode
// steps (one token each) as one batch at the longest context, each prefill
// on its own, plus the head on the last stage.
func (s *SimStage) StepTime(steps []Step, ctxLen int) time.Duration {
	k := float64(s.info.Hi - s.info.Lo)
	decode, sec := 0, 0.0
	for _, st := range steps {
		if n := st.N(s.info.Hidden); n > 1 {
			sec += k * layers.PrefillLayerTime(s.spec, s.hw, n)
		} else {
			decode++
		}
	}
	if decode > 0 {
		sec += k * layers.DecodeLayerTime(s.spec, s.hw, decode, ctxLen)
	}
	if s.info.Last() {
		sec += math.Max(s.spec.HeadBytes()/s.hw.MemBandwidth, float64(len(steps))*s.spec.HeadFLOPsPerToken()/s.hw.FLOPS())
	}
	return time.Duration(sec * float64(time.Second))
}

// ForwardBatch runs steps of distinct sessions; see Stage.
func (s *SimStage) ForwardBatch(ctx context.Context, steps []Step) ([]Output, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	d := s.info.Hidden
	sess := make([]*simSession, len(steps))
	seen := map[*simSession]bool{}
	ctxLen := 0
	for i, st := range steps {
		ks, ok := st.Session.(*simSession)
		if !ok || ks.mu != &s.mu || ks.closed || seen[ks] {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: step %d: closed, foreign or repeated session", ErrSession, i)
		}
		seen[ks] = true
		sess[i] = ks
		if st.Pos != ks.n {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: step %d starts at %d, session holds %d", ErrPosition, i, st.Pos, ks.n)
		}
		var n int
		if s.info.First() {
			if st.Tokens == nil || st.Hidden != nil {
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: step %d: the first stage takes tokens", ErrInput, i)
			}
			for _, t := range st.Tokens {
				if t < 0 || int(t) >= s.info.Vocab {
					s.mu.Unlock()
					return nil, fmt.Errorf("%w: step %d: token %d outside vocabulary of %d", ErrInput, i, t, s.info.Vocab)
				}
			}
			n = len(st.Tokens)
		} else {
			if st.Tokens != nil || len(st.Hidden)%d != 0 {
				s.mu.Unlock()
				return nil, fmt.Errorf("%w: step %d: %d hidden values, want a multiple of %d", ErrShape, i, len(st.Hidden), d)
			}
			n = len(st.Hidden) / d
		}
		if n == 0 || ks.n+n > ks.cap {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: step %d: %d + %d positions, capacity %d", ErrContextFull, i, ks.n, n, ks.cap)
		}
		ctxLen = max(ctxLen, ks.n+n)
	}
	s.mu.Unlock()
	if err := s.sleep(ctx, s.StepTime(steps, ctxLen)); err != nil {
		return nil, err
	}
	outs := make([]Output, len(steps))
	for i, st := range steps {
		n := st.N(d)
		h := make([]float32, n*d)
		for t := 0; t < n; t++ {
			row := h[t*d : (t+1)*d]
			pos := uint64(st.Pos + t)
			if s.info.First() {
				seed := uint64(st.Tokens[t])*0x9e3779b97f4a7c15 ^ 0x5151
				for j := range row {
					row[j] = unitFloat(&seed)
				}
			} else {
				copy(row, st.Hidden[t*d:(t+1)*d])
			}
			for l := s.info.Lo; l < s.info.Hi; l++ {
				simLayer(row, uint64(l), pos)
			}
		}
		if s.info.Last() {
			dg := uint64(14695981039346656037)
			for _, v := range h[(n-1)*d:] {
				dg = (dg ^ uint64(math.Float32bits(v))) * 1099511628211
			}
			logits := make([]float32, s.info.Vocab)
			for j := range logits {
				logits[j] = 4 * unitFloat(&dg)
			}
			outs[i].Logits = logits
		} else {
			outs[i].Hidden = h
		}
	}
	s.mu.Lock()
	for i, st := range steps {
		sess[i].n += st.N(d)
	}
	s.mu.Unlock()
	return outs, nil
}

// simLayer is one simulated layer: every value rehashed with the layer and
// position, so that the state after layer l is the same whichever stage ran
// the layers before it.
func simLayer(row []float32, l, pos uint64) {
	for j, v := range row {
		seed := uint64(math.Float32bits(v)) ^ l<<40 ^ pos<<20 ^ uint64(j)
		row[j] = unitFloat(&seed)
	}
}

// unitFloat is a pseudo-random float32 in [-1, 1).
func unitFloat(s *uint64) float32 { return float32(splitmix(s)>>40)/(1<<23) - 1 }
