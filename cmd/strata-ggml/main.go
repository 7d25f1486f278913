// Command strata-ggml is the strata command line with the ggml engine:
// `strata node --engine ggml|auto` computes the node's layers through
// ggml, on a GPU where ggml finds one (CUDA, Vulkan or ROCm libraries
// from --ggml-lib-dir, as make build-cuda writes them; Metal built in on
// macOS), else on ggml's CPU device. Build it with make build-ggml
// (bin/strata-ggml); it needs cgo and a C toolchain, which the default,
// pure-Go strata does not. It is its own module, so that the main module
// never depends on ollama and engine/ggml never imports the CLI or node.
package main

import (
	"github.com/stratanet/strata/cmd/strata/cli"
	"github.com/stratanet/strata/engine/ggml"
	"github.com/stratanet/strata/node"
)

func main() {
	cli.RegisterEngine(cli.Engine{Name: "ggml", Start: start, HasGPU: hasGPU})
	cli.Main()
}

// start readies ggml for a node: the backend libraries in libDir, loaded
// once, and the device a stage will compute on (a GPU where there is one).
func start(libDir string) (node.Engine, error) {
	ggml.LoadLibDir(libDir)
	d, err := ggml.Probe(ggml.Auto)
	if err != nil {
		return node.Engine{}, err
	}
	return node.Engine{Name: d.Engine(), Open: ggml.Opener(ggml.Auto), Memory: d.Memory, Ranges: true}, nil
}

func hasGPU(libDir string) bool {
	ggml.LoadLibDir(libDir)
	_, err := ggml.Probe(ggml.GPU)
	return err == nil
}
