package main

import (
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestStart: the engine this binary registers opens ggml stages on the
// device it names, and claims a GPU only where ggml has one.
func TestStart(t *testing.T) {
	e, err := start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gpu := hasGPU("")
	if (e.Name == "ggml-CPU") == gpu || (e.Memory > 0) != gpu {
		t.Fatalf("engine %q with %d bytes of device memory; a GPU: %v", e.Name, e.Memory, gpu)
	}
	path := t.TempDir() + "/m.gguf"
	c := engine.DefaultGenConfig()
	c.Layers = 2
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	st, err := e.Open(path, 1, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if in := st.Info(); in.Engine != e.Name || in.Lo != 1 || in.Hi != 2 {
		t.Fatalf("stage %s [%d, %d), want %s [1, 2)", in.Engine, in.Lo, in.Hi, e.Name)
	}
}
