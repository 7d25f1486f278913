package ggml

/*
#include <stddef.h>
struct ggml_backend_buffer_type;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_backend * ggml_backend_t;
typedef struct ggml_gallocr * ggml_gallocr_t;
extern ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t backend);
extern ggml_gallocr_t ggml_gallocr_new(ggml_backend_buffer_type_t buft);
extern void ggml_gallocr_free(ggml_gallocr_t galloc);
*/
import "C"

import (
	"context"
	"fmt"

	"github.com/stratanet/strata/engine"
)

// Sub returns a stage over layers [lo, hi) of s's range that computes
// with s's weights and backend, holding no weights of its own (its
// Info().WeightBytes is 0): a node that loads its whole range as one
// stage runs a hop over part of it (a router's turning point) through a
// view, without loading those layers twice. Its sessions hold KV for
// [lo, hi) only. Its steps and s's are serialized, as they share one
// backend. Close the views, and their sessions, before s.
func (s *Stage) Sub(lo, hi int) (engine.Stage, error) {
	var v engine.Stage
	var err error
	s.locked(func() { v, err = s.sub(lo, hi) })
	return v, err
}

func (s *Stage) sub(lo, hi int) (engine.Stage, error) {
	if s.closed {
		return nil, engine.ErrClosed
	}
	if lo < s.info.Lo || hi > s.info.Hi || lo >= hi {
		return nil, fmt.Errorf("%w: [%d, %d) of a stage over [%d, %d)", engine.ErrRange, lo, hi, s.info.Lo, s.info.Hi)
	}
	// On a GPU the view's calls go to the same device thread as s's.
	v := &Stage{hp: s.hp, info: s.info, backend: s.backend, arch: s.arch, flash: s.flash, globals: s.globals,
		layers: s.layers[lo-s.info.Lo : hi-s.info.Lo], dev: s.dev, parent: s}
	v.info.Lo, v.info.Hi = lo, hi
	v.info.WeightBytes = 0
	v.info.KVBytesPerToken = int64(hi-lo) * 2 * int64(s.hp.KVDim()) * 4
	if v.info.First() {
		v.embd = s.embd
	}
	if v.info.Last() {
		v.onorm, v.head = s.onorm, s.head
	}
	// Its own graphs and their memory; the backend and weights are s's.
	if v.galloc = C.ggml_gallocr_new(C.ggml_backend_get_default_buffer_type(s.backend)); v.galloc == nil {
		return nil, fmt.Errorf("%w: cannot make a graph allocator", ErrGGML)
	}
	return &view{root: s, st: v}, nil
}

// view is a Stage over part of another's range (Sub). Its inner stage
// owns only its graphs: Close must not free the backend it shares.
type view struct {
	root *Stage
	st   *Stage
}

var _ engine.Stage = (*view)(nil)

func (v *view) Info() engine.Info { return v.st.info }

func (v *view) NewSession(maxTokens int) (engine.Session, error) {
	if v.root.dev != nil { // the device thread serializes s and its views
		return v.st.NewSession(maxTokens)
	}
	v.root.mu.Lock()
	defer v.root.mu.Unlock()
	if v.root.closed {
		return nil, engine.ErrClosed
	}
	return v.st.NewSession(maxTokens)
}

func (v *view) Forward(ctx context.Context, step engine.Step) (engine.Output, error) {
	outs, err := v.ForwardBatch(ctx, []engine.Step{step})
	if err != nil {
		return engine.Output{}, err
	}
	return outs[0], nil
}

// ForwardBatch holds the root stage's lock while it computes: ggml's
// backends compute one graph at a time.
func (v *view) ForwardBatch(ctx context.Context, steps []engine.Step) ([]engine.Output, error) {
	if v.root.dev != nil { // the device thread serializes s and its views
		return v.st.ForwardBatch(ctx, steps)
	}
	v.root.mu.Lock()
	defer v.root.mu.Unlock()
	if v.root.closed {
		return nil, engine.ErrClosed
	}
	return v.st.ForwardBatch(ctx, steps)
}

func (v *view) Close() error {
	s := v.st
	s.locked(func() {
		if s.closed {
			return
		}
		s.closed = true
		s.dropGraphs(nil)
		if s.galloc != nil {
			C.ggml_gallocr_free(s.galloc)
			s.galloc = nil
		}
	})
	return nil
}
