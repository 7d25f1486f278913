package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/stratanet/strata/engine"
)

// smallModel writes a stories15M-shaped Q8_0 file (a 32,000-token vocab,
// as the benchmark's token ids need more than 1,003).
func smallModel(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "small.gguf")
	c := engine.GenConfig{Arch: "llama", Layers: 2, Dim: 288, Heads: 6, KVHeads: 2, FFN: 768, Vocab: 32000, Seed: 1, DType: engine.Q8_0}
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMeasure runs each of Strata's modes on a small file.
func TestMeasure(t *testing.T) {
	path := smallModel(t)
	for _, mode := range []string{modeDecode, modePrefill, modeBatch16} {
		r, err := measure(path, 2, mode, 4, 4, 32)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		want := map[string]int{modeDecode: 4, modePrefill: 32, modeBatch16: 64}[mode]
		if r.Tokens != want || !(r.TokS > 0) || r.WeightBytes <= 0 {
			t.Errorf("%s: %+v, want %d tokens, a rate and the weight bytes", mode, r, want)
		}
	}
}

// TestLlamaCppSide runs bench.mjs's three modes on the same small file
// through node-llama-cpp's prebuilt binaries, where make bench-llamacpp
// has installed them.
func TestLlamaCppSide(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: make bench-llamacpp's llama.cpp side cannot run here")
	}
	dir := filepath.Join("..", "..", "testdata", "llamacpp-bench")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@node-llama-cpp", "linux-x64")); err != nil {
		t.Skip("engine/testdata/llamacpp-bench/node_modules is absent: make bench-llamacpp installs it (npm ci)")
	}
	path := smallModel(t)
	for _, args := range [][]string{{"decode", "4", "4"}, {"prefill", "32"}, {"batch16", "2", "4"}} {
		r, err := runJSON(node, append([]string{filepath.Join(dir, "bench.mjs"), path, "2"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if r.Engine != "llama.cpp" || r.Mode != args[0] || r.CPUVariant == "" {
			t.Errorf("%v: %+v", args, r)
		}
	}
}

// TestWithLayers checks the fewer-layers fallback of a shape: the layer
// count changes, nothing else, and the file name says so.
func TestWithLayers(t *testing.T) {
	full := shapes["qwen3-30b-a3b"][0]
	f, err := withLayers(full, 12)
	if err != nil {
		t.Fatal(err)
	}
	if f.name() != "qwen3-30b-a3b-12of48L-q4_k_m.gguf" {
		t.Errorf("name %q", f.name())
	}
	for i, a := range f.gen {
		want := full.gen[i]
		if i > 0 && f.gen[i-1] == "--layers" {
			want = "12"
		}
		if a != want {
			t.Errorf("flag %d: %q, want %q", i, a, want)
		}
	}
	if full.gen[slices.Index(full.gen, "--layers")+1] != "48" {
		t.Error("withLayers changed the shape's own flags")
	}
	if g, err := withLayers(full, 48); err != nil || g.name() != full.name() {
		t.Errorf("all 48 layers: %q, %v", g.name(), err)
	}
	if _, err := withLayers(full, 49); err == nil {
		t.Error("49 of 48 layers: no error")
	}
}

// TestTokenBytes checks the bytes a token reads of an F32 qwen3moe file
// against its shape: all of it but (experts−used) experts' three F32
// matrices in each layer; a dense file is not MoE.
func TestTokenBytes(t *testing.T) {
	const layers, dim, experts, used, effn = 2, 64, 8, 2, 32
	path := filepath.Join(t.TempDir(), "moe.gguf")
	c := engine.GenConfig{Arch: "qwen3moe", Layers: layers, Dim: dim, Heads: 4, KVHeads: 2, FFN: 96, Vocab: 512, Seed: 1, DType: engine.F32,
		Experts: experts, ExpertsUsed: used, ExpertFFN: effn}
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for _, tn := range f.Tensors {
		all += tn.Size
	}
	fh.Close()
	got, moe, err := tokenBytes(path)
	if want := all - layers*(experts-used)*3*dim*effn*4; err != nil || !moe || got != want {
		t.Errorf("tokenBytes = %d, %v, %v; want %d, true, nil", got, moe, err, want)
	}
	if _, moe, err := tokenBytes(smallModel(t)); err != nil || moe {
		t.Errorf("dense file: moe %v, %v", moe, err)
	}
}

// TestMemAvailable checks /proc/meminfo's reading against sysinfo(2)'s
// total: more than nothing, no more than all.
func TestMemAvailable(t *testing.T) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		t.Skip("no sysinfo:", err)
	}
	total := int64(si.Totalram) * int64(si.Unit)
	if a := memAvailable(); a <= 0 || a > total {
		t.Errorf("MemAvailable %d bytes, total %d", a, total)
	}
}
