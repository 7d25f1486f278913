// Command ggml-bench is the ggml engine's side of make bench-llamacpp
// (engine/internal/llamabench drive -ggml BIN): one measurement of one
// GGUF file on ggml's CPU device, timed as the pure-Go and llama.cpp sides
// are (engine/internal/benchrun), printed as one line of JSON.
//
//	ggml-bench measure -model FILE -threads 2 -mode decode|prefill|batch16 [-steps N] [-prompt N] [-tokens N]
//	           [-device cpu|gpu|auto] [-lib-dir DIR]
//	ggml-bench membw [-mib N] [-runs N]
//
// membw prints the host's memory bandwidth as one copy of a buffer
// measures it (testnet/gpu-check.sh's yardstick on the CPU device).
//
// Build it as make build-ggml builds bin/strata-ggml (for this CPU, with
// ggml's repacked weight layouts), or the figures are a baseline x86-64
// build's: its JSON names the kernels ggml has (cpu_variant).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stratanet/strata/engine/ggml"
	"github.com/stratanet/strata/engine/internal/benchrun"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "features" {
		features()
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "membw" {
		membw(os.Args[2:])
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "measure" {
		fmt.Fprintln(os.Stderr, "usage: ggml-bench measure [flags] | ggml-bench membw [flags] | ggml-bench features")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("measure", flag.ExitOnError)
	model := fs.String("model", "", "GGUF file")
	threads := fs.Int("threads", 1, "ggml CPU threads")
	mode := fs.String("mode", benchrun.Decode, "decode, prefill or batch16")
	steps := fs.Int("steps", 64, "decode: tokens timed; batch16: decode steps timed")
	prompt := fs.Int("prompt", 16, "decode and batch16: prompt tokens per session")
	n := fs.Int("tokens", 512, "prefill: prompt tokens")
	noRepack := fs.Bool("no-repack", false, "keep the weights in ggml's plain layout")
	flash := fs.String("flash", "", "on or off: attention as ggml's flash_attn_ext or as separate products (default: the build's, ggml.WithFlashAttention)")
	device := fs.String("device", "cpu", "cpu, gpu or auto (a GPU where one is, else the CPU)")
	libDir := fs.String("lib-dir", "", "directory of ggml backend libraries (libggml-cuda.so...), loaded first")
	fs.Parse(os.Args[2:])
	d, ok := map[string]ggml.Device{"auto": ggml.Auto, "cpu": ggml.CPU, "gpu": ggml.GPU}[*device]
	if !ok {
		fmt.Fprintf(os.Stderr, "ggml-bench: -device %q: cpu, gpu or auto\n", *device)
		os.Exit(2)
	}
	opts := []ggml.Option{ggml.WithDevice(d), ggml.WithThreads(*threads)}
	if *noRepack {
		opts = append(opts, ggml.WithoutRepack())
	}
	switch *flash {
	case "on", "off":
		opts = append(opts, ggml.WithFlashAttention(*flash == "on"))
	case "":
	default:
		fmt.Fprintf(os.Stderr, "ggml-bench: -flash %q: on or off\n", *flash)
		os.Exit(2)
	}
	ggml.LoadLibDir(*libDir)
	r, err := measure(*model, *mode, *steps, *prompt, *n, opts)
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(r)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ggml-bench:", err)
		os.Exit(1)
	}
}

func measure(path string, mode string, steps, prompt, n int, opts []ggml.Option) (benchrun.Result, error) {
	s, err := ggml.Open(path, opts...)
	if err != nil {
		return benchrun.Result{}, err
	}
	defer s.Close()
	r, err := benchrun.Run(s, path, mode, steps, prompt, n)
	r.CPUVariant = variant(s.Repacked())
	fa := s.FlashAttention()
	r.FlashAttention = &fa
	return r, err
}

// membw measures the host's memory bandwidth: the best of runs copies of
// a mib-MiB buffer into another, counting the bytes read and written.
func membw(args []string) {
	fs := flag.NewFlagSet("membw", flag.ExitOnError)
	mib := fs.Int("mib", 1024, "buffer size in MiB (well beyond the caches)")
	runs := fs.Int("runs", 5, "copies; the fastest counts")
	fs.Parse(args)
	if *mib <= 0 || *runs <= 0 {
		fmt.Fprintln(os.Stderr, "ggml-bench: membw: -mib and -runs must be positive")
		os.Exit(2)
	}
	src, dst := make([]byte, *mib<<20), make([]byte, *mib<<20)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // fault the pages in before timing
	best := time.Duration(math.MaxInt64)
	for range *runs {
		start := time.Now()
		copy(dst, src)
		best = min(best, time.Since(start))
	}
	gbs := 2 * float64(len(src)) / best.Seconds() / 1e9
	fmt.Printf("{\"bytes\": %d, \"seconds\": %.6f, \"gb_s\": %.2f}\n", 2*len(src), best.Seconds(), gbs)
}

// features prints the kernels ggml's CPU backend was built with, and
// warns of the instruction sets this CPU has (by /proc/cpuinfo) that the
// build leaves unused.
func features() {
	fs := ggml.CPUFeatures()
	var all []string
	for k, v := range fs {
		all = append(all, k+"="+v)
	}
	slices.Sort(all)
	fmt.Printf("ggml CPU kernels: %s\n", strings.Join(all, " "))
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return
	}
	var flags []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	for _, f := range [][2]string{{"avx2", "AVX2"}, {"avx512f", "AVX512"}, {"avx512_vnni", "AVX512_VNNI"}, {"avx_vnni", "AVX_VNNI"}} {
		if slices.Contains(flags, f[0]) && fs[f[1]] != "1" {
			fmt.Fprintf(os.Stderr, "ggml-bench: this CPU has %s but this ggml build has no %s kernels (a vendored build: see GGML_CFLAGS in the Makefile; a release build: the CPU variant ggml loaded lacks them)\n", f[0], f[1])
		}
	}
	if fs["REPACK"] != "1" {
		fmt.Fprintln(os.Stderr, "ggml-bench: this ggml build has no repacked weight layouts (GGML_USE_CPU_REPACK)")
	}
}

// variant names the kernels this build of ggml has: its SIMD features
// and whether weights were repacked.
func variant(repacked int) string {
	var fs []string
	for k, v := range ggml.CPUFeatures() {
		if v == "1" && k != "REPACK" {
			fs = append(fs, strings.ToLower(k))
		}
	}
	slices.Sort(fs)
	if repacked > 0 {
		fs = append(fs, fmt.Sprintf("repacked(%d)", repacked))
	}
	return strings.Join(fs, ",")
}
