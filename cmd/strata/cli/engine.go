package cli

import (
	"errors"
	"fmt"
	"sync"

	"github.com/stratanet/strata/node"
)

// ErrNoEngine: --engine names an engine this binary was built without.
var ErrNoEngine = errors.New("engine not in this binary")

// Engine is an engine a binary can compute with besides the pure-Go one,
// registered by the binary's main package (RegisterEngine) before Main.
type Engine struct {
	// Name is what --engine chooses, e.g. "ggml".
	Name string
	// Start readies the engine for a node: libDir is --ggml-lib-dir.
	// The node.Engine it returns is named with its device (e.g.
	// "ggml-CUDA0"), which the node announces.
	Start func(libDir string) (node.Engine, error)
	// HasGPU reports whether the engine finds a GPU device (with the
	// backend libraries in libDir): --engine auto takes it then.
	HasGPU func(libDir string) bool
}

var (
	enginesMu sync.Mutex
	engines   = map[string]Engine{}
)

// RegisterEngine makes e available to --engine. It panics on a second
// engine of one name, or on "go" and "auto", which the CLI owns.
func RegisterEngine(e Engine) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if _, dup := engines[e.Name]; dup || e.Name == "go" || e.Name == "auto" || e.Start == nil || e.HasGPU == nil {
		panic(fmt.Sprintf("cli: engine %q registered twice, reserved or incomplete", e.Name))
	}
	engines[e.Name] = e
}

// nodeEngine resolves --engine: nil for the pure-Go engine. "auto"
// takes the ggml engine only where this binary has it and it finds a
// GPU: on a CPU the pure-Go engine is the reference and as fast.
func nodeEngine(name, libDir string) (*node.Engine, error) {
	enginesMu.Lock()
	e, ok := engines["ggml"]
	if name != "auto" {
		e, ok = engines[name]
	}
	enginesMu.Unlock()
	switch {
	case name == "go":
		return nil, nil
	case name == "auto" && (!ok || !e.HasGPU(libDir)):
		return nil, nil
	case !ok:
		return nil, fmt.Errorf("--engine %s: %w: build a binary with it with `make build-ggml` (bin/strata-ggml)", name, ErrNoEngine)
	}
	ne, err := e.Start(libDir)
	if err != nil {
		return nil, fmt.Errorf("--engine %s: %w", name, err)
	}
	return &ne, nil
}
