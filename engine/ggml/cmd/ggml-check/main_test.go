package main

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

func TestRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	c := engine.DefaultGenConfig()
	c.DType = engine.F16
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	if err := run(path, "cpu", "", 1, 9, 3, true, false); err != nil {
		t.Fatal(err)
	}
	// qwen3 in Q4_K_M (Q4_K and Q6_K weights: 256 wide).
	q3 := filepath.Join(t.TempDir(), "q3.gguf")
	if err := engine.GenerateFile(q3, engine.GenConfig{Arch: "qwen3", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2,
		HeadDim: 128, FFN: 512, Vocab: 600, Seed: 5, Mix: "q4_k_m"}); err != nil {
		t.Fatal(err)
	}
	if err := run(q3, "cpu", "", 1, 9, 3, true, true); err != nil {
		t.Fatal(err)
	}
	if err := run(path, "tpu", "", 1, 9, 3, true, false); !errors.Is(err, errUsage) {
		t.Errorf("-device tpu: %v, want a usage error", err)
	}
	if err := run("", "cpu", "", 1, 9, 3, true, false); !errors.Is(err, errUsage) {
		t.Errorf("no -model: %v, want a usage error", err)
	}
}
