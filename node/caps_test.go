package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
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
	} {
		if _, err := New(ctx, opts...); err == nil || !isConfig(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
