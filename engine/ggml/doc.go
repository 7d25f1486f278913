// Package ggml is a second engine backend: an engine.Stage that runs a
// layer range of a llama, qwen2 or qwen3 GGUF through ggml (as vendored by
// the pinned ollama module and compiled with cgo). Weights, KV caches and each
// step's graph live in a ggml backend's buffers, so the same code runs on
// any device ggml has; this build registers the CPU device, and GPU
// devices come from backend libraries loaded with WithLibDir (untested: no
// GPU here).
//
// It owns the ggml backend, contexts and buffers of its weights and of its
// sessions' KV caches, and nothing else: the GGUF parsing, hyper-parameters and errors are
// package engine's, and it must not change engine's arithmetic. Unlike
// engine.Local it is not bit-reproducible across thread counts, batch
// sizes or builds (ggml's own kernels decide the summation order); it
// agrees with engine.Local within ggml's rounding on F32/F16 and, on
// quantized weights, within twice the distance ggml's own kernels keep
// from the same weights dequantized to F32 (see the tests).
//
// A stage reads only its own tensors, by offset, from the file.
//
// It is a nested module so that the main module and its default build
// stay pure Go, needing no C toolchain and no dependency on ollama. Build
// and test it with `make test-ggml` (or `cd engine/ggml && go test ./...`);
// the first build compiles ggml, which takes a while.
//
// A node computes with it through node.WithEngine: Opener opens its
// stages, Probe names the device they compute on (and a GPU's memory),
// and LoadLibDir loads GPU backend libraries once per process. cmd/strata
// is the strata CLI with it registered (`strata node --engine
// ggml|auto`; make build-ggml writes bin/strata-ggml).
package ggml
