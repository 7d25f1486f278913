// Package refcheck is an independent check of the engine's arithmetic:
// generated llama (MHA and GQA) and qwen2 models are run by llama.cpp (as
// vendored, with ggml, by the ollama Go module, built with cgo) and by the
// engine, and the last position's logits must agree within 1e-4 relative;
// mixtures of experts (qwen3moe, Mixtral-style llama) too, through
// llama.cpp's build_moe_ffn graph (moe_test.go).
// ggml's own gguf reader also parses the files the engine writes, split
// parts and general.alignment included (TestSplitPartsReadByGGML).
//
// It is a nested module so that the main module never depends on ollama.
// Run it with `cd engine/internal/refcheck && go test ./...` (make test
// does). The first build compiles llama.cpp, which takes a while.
package refcheck
