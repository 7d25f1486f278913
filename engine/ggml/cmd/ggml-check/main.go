// Command ggml-check runs a GGUF through the ggml backend on the chosen
// device and reports prefill and decode speed and, unless -compare=false,
// the distance of its logits from the pure-Go engine's on the same input:
// what a GPU host needs to check and measure.
//
//	cd engine/ggml && go run ./cmd/ggml-check -model FILE -device gpu -lib-dir ../../bin/ggml-gpu/cuda/lib/ollama
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
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
	flag.Parse()
	if err := run(*model, *device, *libDir, *threads, *promptLen, *decode, *compare); err != nil {
		fmt.Fprintln(os.Stderr, "ggml-check:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(model, device, libDir string, threads, promptLen, decode int, compare bool) error {
	if model == "" || promptLen <= 0 || decode < 0 {
		return fmt.Errorf("%w: -model FILE, -prompt > 0, -decode >= 0", errUsage)
	}
	dev := map[string]ggml.Device{"auto": ggml.Auto, "cpu": ggml.CPU, "gpu": ggml.GPU}
	d, ok := dev[device]
	if !ok {
		return fmt.Errorf("%w: -device %q (auto, cpu or gpu)", errUsage, device)
	}
	opts := []ggml.Option{ggml.WithDevice(d), ggml.WithThreads(threads)}
	if libDir != "" {
		opts = append(opts, ggml.WithLibDir(libDir))
	}
	s, err := ggml.Open(model, opts...)
	if err != nil {
		return err
	}
	defer s.Close()
	in := s.Info()
	fmt.Printf("%s (%s, %d layers) on %s: %.1f MiB of weights\n", in.Name, in.Arch, in.Layers, s.Device(),
		float64(in.WeightBytes)/(1<<20))
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
	if !compare {
		return nil
	}
	ls, err := engine.Open(model, engine.WithThreads(threads))
	if err != nil {
		return err
	}
	defer ls.Close()
	lse, err := ls.NewSession(promptLen)
	if err != nil {
		return err
	}
	defer lse.Close()
	ref, err := ls.Forward(ctx, engine.Step{Session: lse, Tokens: prompt})
	if err != nil {
		return err
	}
	scale, diff := 0.0, 0.0
	for i := range ref.Logits {
		scale = math.Max(scale, math.Abs(float64(ref.Logits[i])))
		diff = math.Max(diff, math.Abs(float64(ref.Logits[i]-first[i])))
	}
	fmt.Printf("logits vs the pure-Go engine: max |Δ| %.3g, relative %.3g, same argmax %v\n",
		diff, diff/scale, argmax(ref.Logits) == argmax(first))
	return nil
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
