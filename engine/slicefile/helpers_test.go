package slicefile

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm/chunks"
)

// testChunk is the smallest chunk size, so that tiny models span many
// chunks.
const testChunk = chunks.MinChunkSize

// genModel writes a generated model and builds its manifest.
func genModel(t testing.TB, c engine.GenConfig) (string, *chunks.Manifest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.gguf", c.Arch, c.Seed))
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	m, err := BuildManifest(path, chunks.WithChunkSize(testChunk))
	if err != nil {
		t.Fatal(err)
	}
	return path, m
}

// sixLayers is a llama of six layers, about 5 MiB: 80 chunks of 64 KiB.
func sixLayers() engine.GenConfig {
	return engine.GenConfig{Arch: "llama", Layers: 6, Dim: 128, Heads: 4, KVHeads: 2, FFN: 384, Vocab: 512, Seed: 3, DType: engine.F32}
}
