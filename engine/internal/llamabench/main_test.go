package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
	// A decode after a longer prompt (the ctx metric's shape): the KV
	// cache the session made holds prompt + steps + 8 positions of F32
	// (engine.Local's cache is []float32).
	r, err := measure(path, 1, modeDecode, 4, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.KVType != "f32" || r.KVContext != 64+4+8 || r.Tokens != 4 {
		t.Errorf("decode after 64: %+v, want an f32 cache of 76 positions and 4 tokens", r)
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
		// The decode says its KV cache: node-llama-cpp's default F16, at
		// least prompt + steps positions, flash attention as resolved.
		if args[0] == "decode" && (r.KVType != "f16" || r.KVContext < 8 || r.FlashAttention == nil) {
			t.Errorf("decode's KV cache: %+v", r)
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
// matrices in each layer and all but one row of the token embeddings
// (the file has its own output matrix); a dense file is not MoE.
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
	if want := all - layers*(experts-used)*3*dim*effn*4 - (512-1)*dim*4; err != nil || !moe || got != want {
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

// TestParseMetrics checks -metrics: the default set leaves ctx out, named
// metrics are kept in order, and an unknown or empty name is an error.
func TestParseMetrics(t *testing.T) {
	got, err := parseMetrics("")
	if err != nil || !slices.Equal(got, []string{"decode", "prefill", "batch16"}) {
		t.Errorf("default: %v, %v", got, err)
	}
	got, err = parseMetrics("decode, ctx")
	if err != nil || !slices.Equal(got, []string{"decode", "ctx"}) {
		t.Errorf("decode, ctx: %v, %v", got, err)
	}
	for _, bad := range []string{"ctx2", "decode,", "Decode", "decode,,ctx"} {
		if _, err := parseMetrics(bad); !errors.Is(err, ErrFlag) {
			t.Errorf("%q: %v, want ErrFlag", bad, err)
		}
	}
}

// TestParsePositions checks -ctx-positions: positive whole numbers only.
func TestParsePositions(t *testing.T) {
	got, err := parsePositions("2048, 8192")
	if err != nil || !slices.Equal(got, []int{2048, 8192}) {
		t.Errorf("2048, 8192: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-16", "2k", "2048,", "20 48", "1e3"} {
		if _, err := parsePositions(bad); !errors.Is(err, ErrFlag) {
			t.Errorf("%q: %v, want ErrFlag", bad, err)
		}
	}
}

// TestCtxRows checks which rows each -metrics and -threads selection runs:
// the ctx rows are decodes after a prompt of each position, at 1 and 2
// threads, only when ctx is named.
func TestCtxRows(t *testing.T) {
	ms := metrics(64, 32, 512, 32, []int{2048, 8192})
	tiny := shapes["tiny"][0]
	rows := func(only, threads string, f benchFile) []metric {
		o, err := parseMetrics(only)
		if err != nil {
			t.Fatal(err)
		}
		var out []metric
		for _, m := range ms {
			if selected(m, f, o, threads) {
				out = append(out, m)
			}
		}
		return out
	}
	for _, m := range rows("", "", tiny) {
		if m.key == metricCtx || m.prompt > 16 {
			t.Errorf("default set has a long-context row: %+v", m)
		}
	}
	if n := len(rows("", "", tiny)); n != 5 {
		t.Errorf("default set on the tiny shape: %d rows, want 5", n)
	}
	got := rows("ctx", "", tiny)
	var want []string
	for _, th := range []int{1, 2} {
		for _, p := range []int{2048, 8192} {
			want = append(want, fmt.Sprintf("decode t=%d (32 tok after %d)", th, p))
		}
	}
	var labels []string
	for _, m := range got {
		labels = append(labels, m.label)
		if m.mode != modeDecode || m.steps != 32 || !strings.HasSuffix(m.label, fmt.Sprintf("after %d)", m.prompt)) {
			t.Errorf("ctx row %+v: want a decode of 32 steps after its position", m)
		}
	}
	if !slices.Equal(labels, want) {
		t.Errorf("ctx rows %q, want %q", labels, want)
	}
	one := rows("ctx", "1", tiny)
	if len(one) != 2 || one[0].threads != 1 || one[0].prompt != 2048 || one[1].prompt != 8192 {
		t.Errorf("-threads 1: %+v", one)
	}
	// A decode-only (mixture-of-experts) file keeps the ctx rows, which
	// are decodes, and drops prefill.
	moe := shapes["qwen3-30b-a3b"][0]
	if n := len(rows("ctx,prefill", "", moe)); n != 4 {
		t.Errorf("ctx,prefill on a decode-only file: %d rows, want the 4 ctx rows", n)
	}
}

// TestTableLine checks a table line: medians of each side's runs, the
// ratio to llama.cpp's median, and each run with its load.
func TestTableLine(t *testing.T) {
	r := row{file: "tiny-q4_k_m.gguf", metric: "decode t=1 (32 tok after 8192)",
		rates:  [][]float64{{10, 30, 20}, {5, 15, 10}},
		loads:  [][]float64{{0.1, 0.2, 0.3}, {0.4, 0.5, 0.6}},
		others: 0.6}
	got := tableLine(r, []string{"Strata", "llama.cpp"})
	want := "| tiny-q4_k_m.gguf | decode t=1 (32 tok after 8192) | 20.00 | 10.00 | 2.00 | " +
		"Strata: 10.0@0.10 30.0@0.20 20.0@0.30; llama.cpp: 5.0@0.40 15.0@0.50 10.0@0.60 | 0.60 |"
	if got != want {
		t.Errorf("table line\n got %s\nwant %s", got, want)
	}
}

// TestKVDesc checks the KV cache note of each side's decode.
func TestKVDesc(t *testing.T) {
	on := true
	for _, c := range []struct {
		r    Result
		want string
	}{
		{Result{KVType: "f32", KVContext: 8232}, "f32, 8232 positions"},
		{Result{KVType: "f16", KVContext: 8288, FlashAttention: &on}, "f16, 8288 positions, flash attention on"},
		{Result{Mode: modePrefill}, ""},
	} {
		if got := kvDesc(c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}
