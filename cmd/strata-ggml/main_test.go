package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestStart: the engine this binary registers opens ggml stages on the
// device it names, and claims a GPU only where ggml has one. Under make
// test-vulkan (STRATA_VULKAN_LIB_DIR set) it loads ggml-vulkan as
// --ggml-lib-dir does and must then find and name the Vulkan device.
func TestStart(t *testing.T) {
	dir, vulkan := os.Getenv("STRATA_VULKAN_LIB_DIR"), true
	if dir == "" {
		dir, vulkan = t.TempDir(), false
	} else if os.Getenv("GGML_VK_VISIBLE_DEVICES") == "" {
		os.Setenv("GGML_VK_VISIBLE_DEVICES", "0") // lavapipe, a CPU-type device, only where selected
	}
	e, err := start(dir)
	if err != nil {
		t.Fatal(err)
	}
	gpu := hasGPU("")
	if (e.Name == "ggml-CPU") == gpu || (e.Memory > 0) != gpu {
		t.Fatalf("engine %q with %d bytes of device memory; a GPU: %v", e.Name, e.Memory, gpu)
	}
	if vulkan && !strings.HasPrefix(e.Name, "ggml-Vulkan") {
		t.Fatalf("engine %q with ggml-vulkan loaded from %s: want a Vulkan device", e.Name, dir)
	}
	t.Logf("engine %q, %d bytes of device memory", e.Name, e.Memory)
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
