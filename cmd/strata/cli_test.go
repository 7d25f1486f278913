package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// run executes the CLI in-process and returns stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestGenerateSplitMatchesSingleProcess(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--layers", "4", "--seed", "3"); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--seed", "9", "--temperature", "0.9"}} {
		args := append([]string{"generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "24"}, extra...)
		one, err := run(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		split, err := run(t, append(args, "--stages", "0:1,1:3,3:4")...)
		if err != nil {
			t.Fatal(err)
		}
		if one != split || strings.TrimSpace(one) == "" {
			t.Fatalf("split output %q differs from single-process %q", split, one)
		}
	}
	out, err := run(t, "debug", "logits", "--model", model, "--tokens", "1,2,3")
	if err != nil {
		t.Fatal(err)
	}
	var logits []float32
	if err := json.Unmarshal([]byte(out), &logits); err != nil || len(logits) != 512 {
		t.Fatalf("debug logits: %v, %d values", err, len(logits))
	}
	if _, err := run(t, "debug", "logits", "--model", model, "--tokens", "1,x"); err == nil {
		t.Fatal("a bad token list was accepted")
	}
}

func TestPlanCommandErrors(t *testing.T) {
	if _, err := run(t, "plan"); err == nil {
		t.Fatal("plan without a scenario succeeded")
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if _, err := run(t, "plan", "--scenario", bad); err == nil {
		t.Fatal("a missing file succeeded")
	}
	out, err := run(t, "plan", "--scenario", "../../testdata/scenarios/deep-pipeline.yaml", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"policy": "strata"`) {
		t.Fatalf("json output lacks our policy: %.200s", out)
	}
}

func TestDebugTokenize(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--arch", "qwen2"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "debug", "tokenize", "--model", model, "--text", "<|im_start|>hello world")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	if err := json.Unmarshal([]byte(out), &ids); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	// <|im_start|> is one special token (the generated vocabulary's second
	// to last, 510 of 512), then the words' pieces; no BOS/EOS.
	if len(ids) < 3 || ids[0] != 510 || slices.Contains(ids[1:], 509) || slices.Contains(ids[1:], 511) {
		t.Errorf("ids %v, want <|im_start|> (510) then word pieces only", ids)
	}
	if _, err := run(t, "debug", "tokenize", "--text", "x"); err == nil {
		t.Error("no --model: want an error")
	}
}
