// Command ggml-check runs a GGUF through the ggml backend on the chosen
// device and reports prefill and decode speed and, unless -compare=false,
// the distance of its logits from the pure-Go engine's on the same input:
// what a GPU host needs to check and measure.
//
//	cd engine/ggml && go run ./cmd/ggml-check -model FILE -device gpu -lib-dir ../../bin/ggml-gpu/cuda/lib/ollama
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/ggml"
)

func main() {
	model := flag.String("model", "", "GGUF file")
	device := flag.String("device", "auto", "auto, cpu or gpu")
	libDir := flag.String("lib-dir", "", "directory of ggml backend libraries (libggml-cuda.so...)")
	threads := flag.Int("threads", 0, "CPU threads (0: GOMAXPROCS)")
	promptLen := flag.Int("prompt", 128, "prompt tokens")
	decode := flag.Int("decode", 32, "tokens to decode")
	compare := flag.Bool("compare", true, "compare the prompt's logits with the pure-Go engine's")
	ref := flag.Bool("ref", false, "also measure both engines' distance from the file's weights dequantized to F32 "+
		"(written to a temporary file as large as the model in F32), and the bound that gives")
	noRepack := flag.Bool("no-repack", false, "keep the weights in ggml's plain layout (no CPU_REPACK)")
	flag.Parse()
	if *noRepack {
		extra = append(extra, ggml.WithoutRepack())
	}
	if err := run(*model, *device, *libDir, *threads, *promptLen, *decode, *compare, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "ggml-check:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// extra are Open's options from flags that run does not take.
var extra []ggml.Option

func run(model, device, libDir string, threads, promptLen, decode int, compare, ref bool) error {
	if model == "" || promptLen <= 0 || decode < 0 {
		return fmt.Errorf("%w: -model FILE, -prompt > 0, -decode >= 0", errUsage)
	}
	dev := map[string]ggml.Device{"auto": ggml.Auto, "cpu": ggml.CPU, "gpu": ggml.GPU}
	d, ok := dev[device]
	if !ok {
		return fmt.Errorf("%w: -device %q (auto, cpu or gpu)", errUsage, device)
	}
	opts := append([]ggml.Option{ggml.WithDevice(d), ggml.WithThreads(threads)}, extra...)
	if libDir != "" {
		opts = append(opts, ggml.WithLibDir(libDir))
	}
	s, err := ggml.Open(model, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	in := s.Info()
	fmt.Printf("%s (%s, %d layers) on %s: %.1f MiB of weights, %d matrices repacked\n", in.Name, in.Arch, in.Layers, s.Device(),
		float64(in.WeightBytes)/(1<<20), s.Repacked())
	fmt.Printf("ggml CPU features: %s\n", features())
	prompt := make([]int32, promptLen)
	for i := range prompt {
		prompt[i] = int32((i*7919 + 1) % in.Vocab)
	}
	ctx := context.Background()
	se, err := s.NewSession(promptLen + decode)
	if err != nil {
		return err
	}
	defer se.Close()
	start := time.Now()
	out, err := s.Forward(ctx, engine.Step{Session: se, Tokens: prompt})
	if err != nil {
		return err
	}
	fmt.Printf("prefill: %d tokens, %.1f tok/s\n", promptLen, float64(promptLen)/time.Since(start).Seconds())
	first := out.Logits
	start = time.Now()
	tok := argmax(out.Logits)
	for i := range decode {
		if out, err = s.Forward(ctx, engine.Step{Session: se, Pos: promptLen + i, Tokens: []int32{tok}}); err != nil {
			return err
		}
		tok = argmax(out.Logits)
	}
	if decode > 0 {
		fmt.Printf("decode: %d tokens, %.1f tok/s\n", decode, float64(decode)/time.Since(start).Seconds())
	}
	if !compare && !ref {
		return nil
	}
	local, err := localLogits(ctx, model, threads, prompt)
	if err != nil {
		return err
	}
	diff, rel := distance(local, first)
	fmt.Printf("logits vs the pure-Go engine: max |Δ| %.3g, relative %.3g, same argmax %v\n",
		diff, rel, argmax(local) == argmax(first))
	if !ref {
		return nil
	}
	dir, err := os.MkdirTemp("", "ggml-check")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	refPath := filepath.Join(dir, "f32.gguf")
	if err := writeDequantized(model, refPath); err != nil {
		return err
	}
	want, err := localLogits(ctx, refPath, threads, prompt)
	if err != nil {
		return err
	}
	_, dRef := distance(want, first)
	_, dGo := distance(want, local)
	// Both engines quantize the activations the same way, each landing
	// about dRef from the F32 result, so they should be within the two
	// errors added (the rule engine/ggml's tests assert).
	bound := math.Max(2*dRef, 1e-3)
	fmt.Printf("vs the dequantized-F32 reference: ggml %.3g, pure-Go %.3g; ggml vs pure-Go %.3g within max(2×%.3g, 1e-3) = %.3g: %v\n",
		dRef, dGo, rel, dRef, bound, rel <= bound)
	return nil
}

// localLogits runs the prompt through the pure-Go engine.
func localLogits(ctx context.Context, path string, threads int, prompt []int32) ([]float32, error) {
	ls, err := engine.Open(path, engine.WithThreads(threads))
	if err != nil {
		return nil, err
	}
	defer ls.Close()
	se, err := ls.NewSession(len(prompt))
	if err != nil {
		return nil, err
	}
	defer se.Close()
	out, err := ls.Forward(ctx, engine.Step{Session: se, Tokens: prompt})
	if err != nil {
		return nil, err
	}
	return out.Logits, nil
}

// distance is max |ref - got| and that over max |ref|.
func distance(ref, got []float32) (diff, rel float64) {
	scale := 0.0
	for i := range ref {
		scale = math.Max(scale, math.Abs(float64(ref[i])))
		diff = math.Max(diff, math.Abs(float64(ref[i]-got[i])))
	}
	return diff, diff / scale
}

// writeDequantized writes the model at path (split or not) to out as one
// file with every tensor unpacked to F32: the same weights, with no
// quantized kernel.
func writeDequantized(path, out string) error {
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	var kvs []engine.KV
	for _, kv := range f.KV {
		switch {
		case kv.Key == "general.file_type":
			kv.Value = uint32(0) // all F32
		case strings.HasPrefix(kv.Key, "split."):
			continue // one file now
		}
		kvs = append(kvs, kv)
	}
	var ts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: engine.F32, Data: func(w io.Writer) error {
			raw := make([]byte, ti.Size)
			if err := f.ReadTensor(ti, raw); err != nil {
				return err
			}
			vals, err := engine.Dequantize(ti.Type, raw, int(ti.Elements()))
			if err != nil {
				return fmt.Errorf("%s: %w", ti.Name, err)
			}
			return binary.Write(w, binary.LittleEndian, vals)
		}})
	}
	fo, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := engine.WriteGGUF(fo, kvs, ts); err != nil {
		fo.Close()
		return err
	}
	return fo.Close()
}

// features is ggml.CPUFeatures as NAME=VALUE, sorted.
func features() string {
	var fs []string
	for k, v := range ggml.CPUFeatures() {
		fs = append(fs, k+"="+v)
	}
	slices.Sort(fs)
	return strings.Join(fs, " ")
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}
