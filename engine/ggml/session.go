package ggml

/*
#include "decls.h"
*/
import "C"

import (
	"fmt"

	"github.com/stratanet/strata/engine"
)

// session is one sequence's KV cache: per layer, K as [headDim, cap,
// kvHeads], and V transposed as [cap, headDim, kvHeads] so that V·P reads
// contiguous rows, or, for flash attention, as K is.
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
		if s.flash {
			p.v = append(p.v, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(vd), C.int64_t(maxTokens), C.int64_t(nkv)))
		} else {
			p.v = append(p.v, C.ggml_new_tensor_3d(p.ctx, C.T_F32, C.int64_t(maxTokens), C.int64_t(vd), C.int64_t(nkv)))
		}
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
