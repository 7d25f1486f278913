// Package refcheck is an independent check of the engine's arithmetic:
// generated llama (MHA and GQA) and qwen2 models are run by llama.cpp (as
// vendored, with ggml, by the ollama Go module, built with cgo) and by the
// engine, and the last position's logits must agree within 1e-4 relative;
// mixtures of experts (qwen3moe, Mixtral-style llama) too, through
// llama.cpp's build_moe_ffn graph (moe_test.go).
// ggml's own gguf reader also parses the files the engine writes, split
// parts and general.alignment included (TestSplitPartsReadByGGML).
//
// A second oracle is ollama's own implementation of each architecture
// (its model package, run in-process on ggml's CPU device by
// ollamaLogits): the engine matches it on llama, qwen2 and qwen3, and
// ollama's gemma3 is checked against a raw ggml gemma3 graph after
// llama.cpp's. A third is llama.cpp itself, the copy ollama vendors, run
// through its C API (llamacppLogits); it settles where the other two
// disagree. docs/refcheck.md has the details and the disagreements.
//
// It is a nested module so that the main module never depends on ollama.
// Run it with `cd engine/internal/refcheck && go test ./...` (make test
// does). The first build compiles llama.cpp, which takes a while.
package refcheck
