package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModelGenSplit: model gen --split-max-tensors writes llama-gguf-split's
// parts, inspect lists them, and generate through any part prints what the
// single file prints.
func TestModelGenSplit(t *testing.T) {
	dir := t.TempDir()
	args := []string{"model", "gen", "--dtype", "q4_k_m", "--dim", "256", "--ffn", "512", "--heads", "4", "--layers", "3", "--alignment", "64"}
	single := filepath.Join(dir, "one.gguf")
	if _, err := run(t, append(args, "--out", single)...); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, append(args, "--out", filepath.Join(dir, "m.gguf"), "--split-max-tensors", "8")...); err != nil {
		t.Fatal(err)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "m-*-of-00004.gguf"))
	if len(parts) != 4 {
		t.Fatalf("parts %v, want 4 (30 tensors, 8 a part)", parts)
	}
	out, err := run(t, "model", "inspect", parts[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"split into 4 parts", "m-00004-of-00004.gguf, 6 tensors", "alignment 64", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	gen := func(model string, extra ...string) string {
		t.Helper()
		out, err := run(t, append([]string{"generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "12"}, extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := gen(single)
	for _, p := range []string{parts[0], parts[3]} {
		if got := gen(p, "--stages", "0:1,1:3"); got != want || strings.TrimSpace(want) == "" {
			t.Errorf("%s: %q, want %q", filepath.Base(p), got, want)
		}
	}
	os.Remove(parts[1])
	if _, err := run(t, "generate", "--model", parts[0], "--prompt", "x"); err == nil || !strings.Contains(err.Error(), "m-00002-of-00004.gguf") {
		t.Errorf("a missing part: %v", err)
	}
	if _, err := run(t, append(args, "--out", single, "--alignment", "48")...); err == nil {
		t.Error("--alignment 48 accepted")
	}
}
