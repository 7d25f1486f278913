package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// TestNodeEngine: the default binary knows only go; asking it for ggml
// fails and says how to build one that has it; auto falls back to go
// unless the registered engine finds a GPU.
func TestNodeEngine(t *testing.T) {
	for _, name := range []string{"go", "auto"} {
		if e, err := nodeEngine(name, ""); e != nil || err != nil {
			t.Fatalf("--engine %s: %v, %v", name, e, err)
		}
	}
	_, err := nodeEngine("ggml", "")
	if !errors.Is(err, ErrNoEngine) || !strings.Contains(err.Error(), "make build-ggml") {
		t.Fatalf("--engine ggml in the default binary: %v", err)
	}

	gpu, started := false, ""
	engines["ggml"] = Engine{Name: "ggml", HasGPU: func(string) bool { return gpu },
		Start: func(dir string) (node.Engine, error) {
			started = dir
			return node.Engine{Name: "ggml-test", Open: func(path string, lo, hi, threads int) (engine.Stage, error) {
				return engine.Open(path, engine.WithRange(lo, hi))
			}}, nil
		}}
	defer delete(engines, "ggml")
	if e, err := nodeEngine("auto", "/libs"); e != nil || err != nil || started != "" {
		t.Fatalf("--engine auto without a GPU: %v, %v (started %q)", e, err, started)
	}
	gpu = true
	if e, err := nodeEngine("auto", "/libs"); err != nil || e == nil || e.Name != "ggml-test" || started != "/libs" {
		t.Fatalf("--engine auto with a GPU: %v, %v (started %q)", e, err, started)
	}
	gpu, started = false, ""
	if e, err := nodeEngine("ggml", ""); err != nil || e == nil || e.Name != "ggml-test" {
		t.Fatalf("--engine ggml: %v, %v", e, err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second ggml engine registered")
		}
	}()
	RegisterEngine(engines["ggml"])
}

// TestNodeEngineFlag: strata node refuses an engine the binary lacks, or
// an unknown one, before it starts anything.
func TestNodeEngineFlag(t *testing.T) {
	path := t.TempDir() + "/m.gguf"
	c := engine.DefaultGenConfig()
	c.Layers = 2
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{"ggml": "make build-ggml", "cuda": "go, ggml or auto"} {
		root := NewRoot()
		root.SetArgs([]string{"node", "--engine", flag, "--model", path, "--data-dir", t.TempDir(), "--api", "none",
			"--listen", "/ip4/127.0.0.1/tcp/0"})
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--engine %s: %v", flag, err)
		}
	}
}
