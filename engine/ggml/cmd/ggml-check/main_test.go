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
	if err := run(path, "cpu", "", 1, 9, 3, true); err != nil {
		t.Fatal(err)
	}
	if err := run(path, "tpu", "", 1, 9, 3, true); !errors.Is(err, errUsage) {
		t.Errorf("-device tpu: %v, want a usage error", err)
	}
	if err := run("", "cpu", "", 1, 9, 3, true); !errors.Is(err, errUsage) {
		t.Errorf("no -model: %v, want a usage error", err)
	}
}
