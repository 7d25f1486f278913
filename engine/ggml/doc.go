// Package ggml is a second engine backend: an engine.Stage that runs a
// layer range of a GGUF of any architecture package engine defines (llama
// with or without rope_freqs or experts, qwen2, qwen3, qwen3moe, phi3,
// gpt-oss, and the others it registers) through ggml (as vendored by the pinned ollama module and
// compiled with cgo). It builds each layer from the architecture's
// engine.Arch block, implementing engine.Ops as graph nodes, so that an
// architecture is written once for both engines. Weights, KV caches and
// each step's graph live in a ggml backend's buffers, so the same code runs on
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
// A step is one ggml graph over the stage's whole layer range: hidden
// states cross to the host only at its input and output, and the KV cache
// stays in the backend's memory. ForwardBatch puts several sessions' steps
// in one graph (each weight read once for all rows; each session attends
// over its own cache). Positions are graph inputs (rotary positions,
// cache rows written with set_rows, causal masks over a cache length
// rounded up to 256), so a decode graph is built once per shape and reused
// step after step. Attention is one flash_attn_ext over the cache where
// the ggml linked computes it in tiles (the release build's CPU; see
// WithFlashAttention), else K·Q, a masked softmax and V·P. On the CPU,
// matrices of the types ggml repacks (Q4_0, Q4_K, IQ4_NL) go to its
// CPU_REPACK buffer where ggml was built with GGML_USE_CPU_REPACK, as
// llama.cpp does; make build-ggml builds ggml that way, and for the
// host's instruction sets (see CPUFeatures).
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
