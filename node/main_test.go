package node

import (
	"os"
	"testing"
)

func mkTemp() (string, error) { return os.MkdirTemp("", "strata-node-test-") }

func TestMain(m *testing.M) {
	code := m.Run()
	if modelDir != "" {
		os.RemoveAll(modelDir)
	}
	os.Exit(code)
}
