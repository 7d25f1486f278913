// Package engine owns model files and the arithmetic of one pipeline stage:
// the GGUF v3 reader and writer, the random-weight model generator, the
// model fingerprint, the tokenizer, the forward pass of a contiguous layer
// range with a KV cache per session, sampling, and the simulated backend.
//
// It knows nothing of peers or the network: a node hands it token IDs or
// float32 hidden states and gets hidden states or logits back. It reads
// only the tensors of its own layer range (plus the embedding on the first
// stage and the output head on the last), by offset. A model split into
// parts as llama-gguf-split writes them (NAME-00001-of-0000N.gguf) is one
// File (OpenFile on any part, or ReadSplit), each tensor read from the part
// that holds it; general.alignment is honoured in reading and writing.
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
//     work is split across goroutines by output rows (or attention heads,
//     SwiGLU elements, activation blocks to quantise), never along a summed
//     dimension; the pool's goroutines claim chunks of those items at run
//     time, so which goroutine computes an element varies, never its bits;
//   - every sum has a fixed order: for F32, 16 strided lanes then a fixed
//     tree; for the quantised types (Q8_0 included), each block's exact
//     integer sum, scaled, added block by block into one float32; the
//     same in the portable Go kernel and in the assembly one, whatever
//     rows or tokens a kernel computes at once;
//   - products are rounded to float32 before they are added
//     (float32(a*b) stops the compiler from fusing), except in an F16 or
//     BF16 row's dot product, whose adds are fused multiply-adds, one
//     rounding each (fma32, exact on every machine; the kernels'
//     VFMADD231PS);
//   - exp (softmax, SiLU) is our own float32 code, not the math package's,
//     whose assembly differs between CPUs; softmax sums its exponentials
//     in order, and attention's weighted sum of V is one sequential sum
//     per output over the positions.
//
// # Architectures
//
// Each architecture is one Arch (arch.go; arch_llama.go, arch_qwen.go,
// arch_phi3.go), registered under its general.architecture name: a Read
// hook for its own metadata, the global and per-layer tensors it reads
// (TensorSpec: dims, optional, fused), and a Block that computes one layer
// against Ops (RMSNorm, Linear(s), AddBias, Rope, Attention, SwiGLU, GELU,
// Scale, MoE, Add).
// Local implements Ops with this package's kernels over the whole batch
// of rows (ops.go), keeping the rules above; engine/ggml implements them
// as graph nodes. To add an architecture, add one arch_NAME.go whose init
// calls Register, and nothing else; an op neither engine has is added to
// Ops and to both engines. Ops declared for issue 33's families but not
// yet implemented (attention sinks; MoE on ggml) fail the step with
// ErrUnsupportedArch. See
// docs/architectures.md.
//
// # API
//
// Open(path, WithRange(lo, hi), WithThreads(n)) loads a *Local stage;
// NewSimStage(spec, device, WithRange(lo, hi)) makes a *SimStage. Both are
// a Stage: NewSession(maxTokens) reserves a KV cache, Forward runs one
// Step (tokens on the first stage, n × Hidden float32 states on the
// others; a prefill of n positions and a decode of one take the same path),
// ForwardBatch advances several sessions at once, and the last stage
// returns the logits of each step's last position. Session.Truncate rolls
// a session back; Close frees it. Info reports the range, WeightBytes and
// KVBytesPerToken (for admission by memory) and the model Fingerprint.
// Sample draws a token, the draw for position p a pure function of (seed,
// p). LoadTokenizer reads a file's tokenizer without its weights; Pipeline
// chains in-process stages. Errors wrap the sentinels in errors.go.
//
// # Tokenizers and chat templates
//
// Tokenizer follows the file's tokenizer.ggml.* keys as llama.cpp does:
// SentencePiece ("llama": score-ordered merges, byte fallback, optional
// space prefix) or byte-level BPE ("gpt2") with the pre-tokenizer named by
// tokenizer.ggml.pre (llama-bpe, qwen2 with NFC first, default/gpt2,
// smollm, deepseek-llm, deepseek-v3, gpt-4o; an unknown name warns and
// uses gpt2's). Generation ends at EOS,
// the eot/eom ids and the turn-ending specials. RenderChat renders the
// file's own tokenizer.chat_template with gonja as Hugging Face's
// apply_chat_template does (trim_blocks, lstrip_blocks, Python-style
// tojson, strftime_now, raise_exception as ErrChatRejected); EncodeChat,
// which the API and the commands use, tokenizes its output. A file with
// no template gets the built-in ChatML or [INST] format. HFTokenizerKVs
// turns a tokenizer.json into that metadata, for test models that carry
// real vocabularies; the tests compare IDs and prompts with Hugging Face's
// own code run in Node (testdata/hf-oracle).
//
// # Kernels
//
// Matrix products use assembly on amd64 (kernels_amd64.s): AVX-512 (8 rows
// per call) or AVX (4 rows) for F32, each following the portable kernel's
// order, with tests that both give the same bits. Q8_0 weights stay
// quantised and meet activations quantised to Q8_0 per call, as ggml does:
// a decode reads ~3.8× fewer bytes than F32. They are held interleaved
// (q8il.go): 16 rows per group, each 4-byte chunk of a block as 16 rows'
// bytes (w+128) in one 64-byte line, so that AVX-512 VNNI (VPDPBUSD
// against 4 activation bytes broadcast, -128·Σx added back) computes 16
// rows × up to 8 tokens per call (q8il_amd64.s), and a decode streams
// each group's bytes once; AVX2 does 16 rows × 1 token on the same
// layout. Both form each block's exact int32 sum, then VCVTDQ2PS, the
// scale product float32(wd·xd) and one VMULPS and VADDPS per block, as
// the portable dotQ8 does (TestQ8KernelsMatchPortable; useVNNI switches
// the AVX2 kernel back on; TestQ8BatchThreadInvariance checks a session's
// logits alone, batched and at 1–3 threads). Activations are quantised
// by AVX-512F where the CPU has it (q8quant_amd64.s, quantizeQ8's bits,
// TestQuantizeQ8SIMD). F16 and BF16 weights stay
// half width in memory and are widened (exactly; VCVTPH2PS, or a shift
// for bfloat16, 16 values at a time) eight rows at a time into the F32
// kernel, so they give an F32 file's bits; with 4 or more input rows
// they go 4 rows × 4 input rows a call (gemm_amd64.s), widened as loaded.
// On AVX-512, F16 matrices are held 8 rows × 16 values interleaved
// (hil.go), so that a decode (dot8F16IL) reads one stream of bytes.
//
// The other quantised types (quant.go: Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4, in llama.cpp's block layouts, so a real Q4_K_M
// or Q5_K_M file with its row-length fallbacks loads) stay packed in
// memory. Each product quantises its activations once, to Q8_0 (Q4_1 and
// Q5_1 also take each block's d·Σq rounded to f16, as ggml's Q8_1 does) or
// to Q8_K for the 256-element types. A block's dot product is an exact
// integer sum, then one or two float32 operations, and blocks add in order
// into one float32. Unpacking matches ggml's to_float bit for bit
// (testdata/quant holds vectors ggml wrote). quantize.go holds our own
// simple quantizers, which model gen uses to write such files.
//
// On amd64 with AVX2 every packed type has a row kernel (quant_amd64.s)
// that computes one row's dot product with one activation row in a single
// call: it unpacks the scales and mins, forms the integer sums (VPMADDUBSW,
// with VPSIGNB for the signed grids and a VPSHUFB lookup for IQ4's), and
// then does each block's float part with the portable kernel's scalar
// operations in its order (VMULSS, VSUBSS, VADDSS, halves widened through
// the same table; never FMA), so it gives the portable kernel's bits.
// TestPackedKernelsMatchPortable and TestPackedKernelsRandomBlocks check
// that on ggml's blocks, on our own and on random blocks of 1 to 11 blocks
// per row. A product of many input rows (a prefill) is tiled: 16 weight
// rows against 32 input rows at a time, and Q4_K and Q6_K rows meet two
// input rows per call (each block unpacked once for both); each output is
// still one row's dot product with one input row, summed as above.
//
// Where the CPU has AVX-512BW, Q4_K and Q6_K (most of a Q4_K_M file's
// bytes; one- and two-row) and Q5_K (one-row) use 512-bit twins of those
// kernels: a zmm holds 64 values of a block in its activations' order (a
// broadcast 32-byte load and a per-half shift for Q4_K's nibbles, Q5_K's
// and Q6_K's high bits likewise) and VPERMW spreads the block's scales
// over the pair sums. The integer sums are the same, and the float part
// does the same float32 operations in the same order (the two halves of a
// Q4_K/Q5_K block widened together by VCVTPH2PS, exact like the table,
// and its two products in one VMULPS), so the bits are too; the tests run
// on both paths (useAVX512 switches the AVX2 one back on), and
// TestPackedKernelsExtremes adds the largest sums and non-finite halves.
// MXFP4's kernel there (with VBMI and VNNI; decode, and a prefill's tiles
// an input row at a time) takes four rows a call,
// two blocks of each per zmm (VPERMB spreads a block pair's nibbles, the
// grid biased by 12 for VPDPBUSD and 12·Σx taken off), and keeps one row
// per float lane, each lane the portable operations in order (the scale
// by VSCALEFPS, the exact power of two's product rounded once); it
// prefetches the next four rows as one stream (BenchmarkMXFP4MatVec). Its
// AVX2 twin (dotMXFP4Rows4) does the same a block at a time, for CPUs
// without those.
// The other packed types use AVX2 on such a CPU. BenchmarkPackedKernelPaths
// and BenchmarkDecodeKernelPaths compare the two paths.
//
// Where the CPU has AVX-512 VNNI, Q4_K, Q5_K and Q6_K (Q6_K with GFNI
// too) are instead rearranged at load into a row-interleaved layout
// (kil.go): 16 rows a group, four consecutive packed bytes of each row in
// one 64-byte column, the scales, mins and halves of a group's super-block
// after its quants. A kernel call (kil_amd64.s, generated by
// engine/internal/kilgen with q8il_amd64.s) unpacks each column once and
// meets 1 or 4 tokens with VPDPBUSD against four activation bytes
// broadcast: per sub-block an exact sum for 16 rows, times the scales
// (VPMULLD), Q4_K/Q5_K's mins term by VPDPWSSD against the activations'
// sums of 32, Q6_K's −32 through its sums of 16; then each lane does its
// output's float operations of combineK (or Q6_K's) in order. So a
// prefill or a batch is a real matrix product with dotRowQuant's bits
// (TestKILMatchesRowKernels, TestForwardSIMDEqualsPortable,
// TestBatchInvariance). The embedding, read a row at a time, and a head
// tied to it keep the file's layout.
//
// Attention runs per (row, KV head): the query heads sharing a KV head go
// through its cache together, 64 positions at a time, each score a
// dotStridedF32 and each output a sequential sum over the positions
// (attnAV64, eight lanes of eight outputs); softmax's max, exponentials
// and scaling are AVX-512 kernels (attn_amd64.s) with softmaxPortable's
// bits.
//
// # Simulated backend
//
// A SimStage has the Stage interface but no weights: it waits as long as
// package layers' cost model says a declared GPU would take, and returns
// deterministic pseudo-hidden-states so that pipelines chain and tokens are
// reproducible. Everything it serves is labelled simulated.
package engine
