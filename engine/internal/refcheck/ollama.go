package refcheck

import (
	"context"
	"errors"
	"fmt"

	"github.com/ollama/ollama/ml"
	"github.com/ollama/ollama/model"
	"github.com/ollama/ollama/model/input"
	_ "github.com/ollama/ollama/model/models" // registers ollama's architectures
)

var (
	// errNoLogits is returned when ollama's forward pass yields no logits.
	errNoLogits = errors.New("ollama: forward pass returned no logits")
	// errOllamaPanic wraps a panic inside ollama: its loaders leave a
	// tensor the file lacks nil and its forward pass then dereferences it.
	errOllamaPanic = errors.New("ollama: panic")
)

// ollamaLogits is the last position's logits of tokens at positions
// 0..n-1, computed by ollama's own implementation of the file's
// architecture (its model package, as its runner drives it) on ggml's CPU
// device, with an F32 KV cache so that the cache rounds nothing.
func ollamaLogits(path string, tokens []int32) (logits []float32, err error) {
	if len(tokens) == 0 {
		return nil, errors.New("ollama: no tokens")
	}
	defer func() {
		if r := recover(); r != nil {
			logits, err = nil, fmt.Errorf("%w: %s: %v", errOllamaPanic, path, r)
		}
	}()
	m, err := model.New(path, ml.BackendParams{AllocMemory: true, NumThreads: 1, FlashAttention: ml.FlashAttentionDisabled})
	if err != nil {
		return nil, fmt.Errorf("ollama: %s: %w", path, err)
	}
	b := m.Backend()
	defer b.Close()
	if err := b.Load(context.Background(), func(float32) {}); err != nil {
		return nil, fmt.Errorf("ollama: loading %s: %w", path, err)
	}
	n := len(tokens)
	if cache := m.Config().Cache; cache != nil {
		cache.Init(b, ml.DTypeF32, 1, n, n)
		defer cache.Close()
	}
	ctx := b.NewContext()
	defer ctx.Close()
	batch := input.Batch{
		Inputs:    ctx.Input().FromInts(tokens, n),
		Outputs:   ctx.Input().FromInts([]int32{int32(n - 1)}, 1),
		Positions: make([]int32, n),
		Sequences: make([]int, n),
	}
	for i := range batch.Positions {
		batch.Positions[i] = int32(i)
	}
	ctx.SetBatchSize(n)
	t, err := model.Forward(ctx, m, batch)
	if err != nil {
		return nil, fmt.Errorf("ollama: %s: %w", path, err)
	}
	ctx.Compute(t)
	out := t.Floats()
	if len(out) == 0 {
		return nil, errNoLogits
	}
	return out, nil
}
