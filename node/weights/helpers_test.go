package weights

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/slicefile"
	"github.com/stratanet/strata/swarm/chunks"
)

var (
	modelOnce sync.Once
	modelPath string
)

// testModel is a generated 8-layer model, the one package node's tests
// fetch (engine.DefaultGenConfig, seed 11), made once per test binary.
func testModel(t testing.TB) string {
	t.Helper()
	modelOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strata-weights-test")
		if err != nil {
			t.Fatal(err)
		}
		c := engine.DefaultGenConfig()
		c.Layers, c.Seed = 8, 11
		p := filepath.Join(dir, "tiny.gguf")
		if err := engine.GenerateFile(p, c); err != nil {
			t.Fatal(err)
		}
		modelPath = p
	})
	if modelPath == "" {
		t.Fatal("no test model")
	}
	return modelPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if modelPath != "" {
		os.RemoveAll(filepath.Dir(modelPath))
	}
	os.Exit(code)
}

// testManifest is the manifest of the test model at the test chunk size.
func testManifest(t testing.TB) *chunks.Manifest {
	m, err := slicefile.BuildManifest(testModel(t), chunks.WithChunkSize(chunks.MinChunkSize))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func testLogger(t testing.TB) *zap.Logger {
	if testing.Verbose() {
		return zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	}
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// waitFor polls cond until it holds, failing the test past limit.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(limit)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			if !cond() {
				t.Fatalf("%s: not within %v", what, limit)
			}
		}
	}
}
