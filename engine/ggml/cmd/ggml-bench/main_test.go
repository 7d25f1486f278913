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
	for _, mode := range []string{benchrun.Decode, benchrun.Prefill, benchrun.Batch16} {
		r, err := measure(path, 2, ggml.CPU, mode, 4, 4, 32, false)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		want := map[string]int{benchrun.Decode: 4, benchrun.Prefill: 32, benchrun.Batch16: 64}[mode]
		if r.Tokens != want || !(r.TokS > 0) || r.Engine != "ggml-CPU" || r.CPUVariant == "" {
			t.Errorf("%s: %+v, want %d tokens, a rate, engine ggml-CPU and its kernels", mode, r, want)
		}
	}
}
