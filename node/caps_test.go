package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
)

// TestCapabilitiesCached: a real-engine node with no declared device
// measures one layer at start and caches the figures in its data dir;
// the next start reads them back.
func TestCapabilitiesCached(t *testing.T) {
	m, err := openModel(testModel(t), "", testHW, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	hw, err := measureHardware(ctx, m, 1<<30, dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if hw.Validate() != nil || hw.MemoryBytes != 1<<30 || hw.MemBandwidth <= 0 || hw.TFLOPS <= 0 {
		t.Fatalf("measured %+v", hw)
	}
	if _, err := os.Stat(filepath.Join(dir, CapsFile)); err != nil {
		t.Fatal(err)
	}
	again, err := measureHardware(ctx, m, 2<<30, dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if again.MemBandwidth != hw.MemBandwidth || again.TFLOPS != hw.TFLOPS || again.MemoryBytes != 2<<30 {
		t.Fatalf("cache gave %+v after %+v", again, hw)
	}
	t.Logf("measured: %.1f GB/s, %.3f TFLOPS", hw.MemBandwidth/1e9, hw.TFLOPS)

	// A corrupt cache is measured again, not trusted.
	if err := os.WriteFile(filepath.Join(dir, CapsFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := measureHardware(ctx, m, 1<<30, dir, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
}

// TestConfigErrors: bad options are refused with ErrConfig before
// anything starts.
func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string][]Option{
		"no model":         {},
		"two models":       {WithModelFile(testModel(t)), WithSimModel("llama-3-8b", testHW)},
		"unknown sim":      {WithSimModel("no-such-model", testHW)},
		"missing file":     {WithModelFile(filepath.Join(t.TempDir(), "none.gguf")), WithHardware(testHW)},
		"negative layers":  {WithModelFile(testModel(t)), WithHardware(testHW), WithMaxLayers(-1)},
		"zero timeout":     {WithModelFile(testModel(t)), WithHardware(testHW), WithStepTimeout(0)},
		"long region name": {WithModelFile(testModel(t)), WithHardware(testHW), WithRegion(string(make([]byte, 40)))},
		"engine, no open":  {WithModelFile(testModel(t)), WithEngine(Engine{Name: "x"})},
		"engine, no name":  {WithModelFile(testModel(t)), WithEngine(Engine{Open: openGo})},
		"engine for sim":   {WithSimModel("llama-3-8b", testHW), WithEngine(Engine{Name: "x", Open: openGo})},
		"engine named go":  {WithModelFile(testModel(t)), WithEngine(Engine{Name: "go", Open: openGo})},
	} {
		if _, err := New(ctx, opts...); err == nil || !isConfig(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// openGo is an Engine.Open on the pure-Go engine.
func openGo(path string, lo, hi, threads int) (engine.Stage, error) {
	return engine.Open(path, engine.WithRange(lo, hi), engine.WithThreads(threads))
}

// TestCapabilitiesPerEngine: a node on another engine measures through
// that engine's stages, names it in its hardware, declares the engine's
// memory, and neither reuses the pure-Go engine's cached figures nor
// leaves its own for the pure-Go engine.
func TestCapabilitiesPerEngine(t *testing.T) {
	m, err := openModel(testModel(t), "", testHW, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	goHW, err := measureHardware(ctx, m, 1<<30, dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	opened := 0
	other, err := openModel(testModel(t), "", testHW, 1)
	if err != nil {
		t.Fatal(err)
	}
	other.eng = &Engine{Name: "other-dev0", Open: func(path string, lo, hi, threads int) (engine.Stage, error) {
		opened++
		return openGo(path, lo, hi, threads)
	}}
	if capsKey(other) == capsKey(m) {
		t.Fatalf("one cache key %q for two engines", capsKey(m))
	}
	hw, err := measureHardware(ctx, other, 1<<30, dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if opened != 1 || hw.Name != "measured-other-dev0" || hw.Name == goHW.Name {
		t.Fatalf("measured %q through %d opens of the engine (go: %q)", hw.Name, opened, goHW.Name)
	}
	again, err := measureHardware(ctx, m, 1<<30, dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if again.Name != goHW.Name || again.MemBandwidth != goHW.MemBandwidth {
		t.Fatalf("the go engine read %+v from the cache, measured %+v", again, goHW)
	}
	if _, err := measureHardware(ctx, other, 1<<30, dir, zap.NewNop()); err != nil || opened != 1 {
		t.Fatalf("the engine's figures were not cached: %d opens, %v", opened, err)
	}

	// The engine's memory is what the node declares, under a memory cap.
	other.eng.Memory = 3 << 30
	cfg := defaultConfig()
	cfg.dataDir = dir
	if hw, err = nodeHardware(ctx, &cfg, other, zap.NewNop()); err != nil || hw.MemoryBytes != 3<<30 {
		t.Fatalf("declared %v bytes (%v), want the engine's", hw.MemoryBytes, err)
	}
	cfg.memory = 1 << 30
	if hw, err = nodeHardware(ctx, &cfg, other, zap.NewNop()); err != nil || hw.MemoryBytes != 1<<30 {
		t.Fatalf("declared %v bytes (%v) under a 1 GiB cap", hw.MemoryBytes, err)
	}
}
