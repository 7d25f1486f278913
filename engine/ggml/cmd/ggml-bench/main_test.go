package main

import (
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/ggml"
	"github.com/stratanet/strata/engine/internal/benchrun"
)

// TestMeasure runs each mode on a small Q4_K_M file (256 wide, so that it
// holds Q4_K matrices), as llamabench drive -ggml runs them.
func TestMeasure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small.gguf")
	c := engine.GenConfig{Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 1200, Seed: 1, Mix: "q4_k_m"}
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	for _, flash := range []bool{false, true} {
		for _, mode := range []string{benchrun.Decode, benchrun.Prefill, benchrun.Batch16} {
			r, err := measure(path, mode, 4, 4, 32, []ggml.Option{ggml.WithDevice(ggml.CPU), ggml.WithThreads(2), ggml.WithFlashAttention(flash)})
			if err != nil {
				t.Fatalf("%s, flash %v: %v", mode, flash, err)
			}
			want := map[string]int{benchrun.Decode: 4, benchrun.Prefill: 32, benchrun.Batch16: 64}[mode]
			if r.Tokens != want || !(r.TokS > 0) || r.Engine != "ggml-CPU" || r.CPUVariant == "" || r.FlashAttention == nil || *r.FlashAttention != flash {
				t.Errorf("%s: %+v, want %d tokens, a rate, engine ggml-CPU, its kernels and flash attention %v", mode, r, want, flash)
			}
		}
	}
}
