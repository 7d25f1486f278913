package testnet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// strataBin is the node binary the scenario tests run: STRATA_BIN, or one
// built once for this test binary.
var strataBin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		strataBin = os.Getenv("STRATA_BIN")
		if strataBin == "" {
			dir, err := os.MkdirTemp("", "strata-testnet-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(dir)
			strataBin = filepath.Join(dir, "strata")
			_, file, _, _ := runtime.Caller(0)
			root := filepath.Dir(filepath.Dir(file))
			cmd := exec.Command("go", "build", "-o", strataBin, "./cmd/strata")
			cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "building strata:", err)
				return 1
			}
		}
		return m.Run()
	}())
}

// TestChurn3 runs the short churn scenario on loopback: three real nodes,
// a kill -9 of the sole holder of a range and its rejoin under load. Every
// request must succeed (requests that met the gap succeed through the
// client's retries) with the single-process engine's tokens, and every
// event must recover.
func TestChurn3(t *testing.T) { churn3(t, "../testdata/testnet/churn-3.yaml") }

// TestChurn3MoE is TestChurn3 on a qwen3moe model (churn-3-moe.yaml).
func TestChurn3MoE(t *testing.T) { churn3(t, "../testdata/testnet/churn-3-moe.yaml") }

func churn3(t *testing.T, path string) {
	if testing.Short() {
		t.Skip("starts real nodes for about 35 s")
	}
	sc, err := LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel) // Run kills its nodes when it returns, also on a failure
	rep, err := Run(ctx, sc, WithBinary(strataBin), WithRunDir(t.TempDir()), WithProgress(testWriter{t}))
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if rep.OK == 0 || rep.Requests < 10 {
		t.Errorf("only %d requests, %d ok: the load did not run", rep.Requests, rep.OK)
	}
	if rep.Failed != 0 {
		t.Errorf("%d failed requests: %v", rep.Failed, rep.Errors)
	}
	if rep.Mismatched != 0 {
		t.Errorf("%d answers differ from the single-process run", rep.Mismatched)
	}
	if len(rep.Events) != 2 {
		t.Fatalf("%d events carried out, want 2", len(rep.Events))
	}
	for _, e := range rep.Events {
		if !e.Recovered {
			t.Errorf("%s %s at %.1fs did not recover (map %.1fs, request %.1fs, error %q)", e.Action, e.Node, e.AtS, e.MapS, e.RequestS, e.Err)
		}
	}
	if len(rep.Crashed) > 0 {
		t.Errorf("nodes exited on their own: %v", rep.Crashed)
	}
	if !rep.Pass {
		t.Errorf("the scenario's expectations failed: %v", rep.Violations)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b[:len(b)-min(1, len(b))]))
	return len(b), nil
}
