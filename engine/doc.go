// Package engine owns model files and the arithmetic of one pipeline stage:
// the GGUF v3 reader and writer, the random-weight model generator, the
// model fingerprint, the tokenizer, the forward pass of a contiguous layer
// range with a KV cache per session, sampling, and the simulated backend.
//
// It knows nothing of peers or the network: a node hands it token IDs or
// float32 hidden states and gets hidden states or logits back. It reads
// only the tensors of its own layer range (plus the embedding on the first
// stage and the output head on the last), by offset.
//
// # Determinism
//
// Running layers [0,a), [a,b) and [b,L) on three Stages and passing the
// float32 hidden states between them gives the same logits, bit for bit, as
// running [0,L) on one, at any thread count, batched or not, and a prefill
// of n tokens gives the same bits as n single-token steps. The rules that
// make this hold:
//
//   - every output element is computed by one goroutine with one kernel;
//     work is split across goroutines by output rows (or attention heads),
//     never along a summed dimension;
//   - every sum has a fixed order: 16 strided lanes (8 for Q8_0 blocks)
//     then a fixed tree, the same in the portable Go kernel and in the
//     assembly one;
//   - no fused multiply-add: products are rounded to float32 before they
//     are added (float32(a*b) stops the compiler from fusing);
//   - exp (softmax, SiLU) is our own float32 code, not the math package's,
//     whose assembly differs between CPUs.
//
// # Simulated backend
//
// A SimStage has the Stage interface but no weights: it waits as long as
// package layers' cost model says a declared GPU would take, and returns
// deterministic pseudo-hidden-states so that pipelines chain and tokens are
// reproducible. Everything it serves is labelled simulated.
package engine
