package refcheck

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

// The llama.h declarations used, as in the llama.cpp that ollama v0.17.4
// vendors (its llama/llama.cpp/src package compiles and links it; the
// header is not on cgo's include path). The static assertions pin the
// layouts to sizes and offsets measured with that header.
struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_model_params {
	void ** devices;
	const void * tensor_buft_overrides;
	int32_t n_gpu_layers;
	int32_t split_mode;
	int32_t main_gpu;
	const float * tensor_split;
	void * progress_callback;
	void * progress_callback_user_data;
	const void * kv_overrides;
	bool vocab_only, use_mmap, use_mlock, check_tensors, use_extra_bufts, no_host, no_alloc;
};
struct llama_context_params {
	uint32_t n_ctx, n_batch, n_ubatch, n_seq_max;
	int32_t n_threads, n_threads_batch;
	int32_t rope_scaling_type, pooling_type, attention_type, flash_attn_type;
	float rope_freq_base, rope_freq_scale, yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
	uint32_t yarn_orig_ctx;
	float defrag_thold;
	void * cb_eval;
	void * cb_eval_user_data;
	int32_t type_k, type_v;
	void * abort_callback;
	void * abort_callback_data;
	bool embeddings, offload_kqv, no_perf, op_offload, swa_full, kv_unified;
};
typedef struct llama_batch {
	int32_t n_tokens;
	int32_t * token;
	float * embd;
	int32_t * pos;
	int32_t * n_seq_id;
	int32_t ** seq_id;
	int8_t * logits;
} llama_batch;
_Static_assert(sizeof(struct llama_model_params) == 72 && offsetof(struct llama_model_params, tensor_split) == 32 &&
	offsetof(struct llama_model_params, kv_overrides) == 56 && offsetof(struct llama_model_params, no_alloc) == 70, "llama_model_params layout");
_Static_assert(sizeof(struct llama_context_params) == 120 && offsetof(struct llama_context_params, flash_attn_type) == 36 &&
	offsetof(struct llama_context_params, cb_eval) == 72 && offsetof(struct llama_context_params, type_k) == 88 &&
	offsetof(struct llama_context_params, abort_callback) == 96 && offsetof(struct llama_context_params, kv_unified) == 117, "llama_context_params layout");
_Static_assert(sizeof(llama_batch) == 56, "llama_batch layout");

typedef void (*log_fn)(int level, const char * text, void * user_data);
extern void llama_log_set(log_fn fn, void * user_data);
extern void llama_backend_init(void);
extern struct llama_model_params llama_model_default_params(void);
extern struct llama_context_params llama_context_default_params(void);
extern struct llama_model * llama_model_load_from_file(const char * path, struct llama_model_params params);
extern void llama_model_free(struct llama_model * model);
extern struct llama_context * llama_init_from_model(struct llama_model * model, struct llama_context_params params);
extern void llama_free(struct llama_context * ctx);
extern llama_batch llama_batch_get_one(int32_t * tokens, int32_t n_tokens);
extern int32_t llama_decode(struct llama_context * ctx, llama_batch batch);
extern float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
extern const struct llama_vocab * llama_model_get_vocab(const struct llama_model * model);
extern int32_t llama_vocab_n_tokens(const struct llama_vocab * vocab);

// quiet passes on errors only (GGML_LOG_LEVEL_ERROR = 4; CONT = 5
// continues any level and is dropped): a generated file draws warnings
// about its small context and its toy vocabulary on every load.
static void quiet(int level, const char * text, void * user_data) {
	(void)user_data;
	if (level == 4) fputs(text, stderr);
}

static void lc_init(void) {
	llama_log_set(quiet, NULL);
	llama_backend_init();
}

// lc_logits loads path with llama.cpp, runs n tokens at positions 0..n-1
// on the CPU with an F32 KV cache, one thread and no flash attention, and
// copies the last position's n_vocab logits to out. It returns 0,
// llama_decode's non-zero code, or LC_LOAD, LC_CONTEXT or LC_VOCAB.
enum { LC_LOAD = -1001, LC_CONTEXT = -1002, LC_VOCAB = -1003 };

static int lc_logits(const char * path, int32_t * tokens, int32_t n, float * out, int32_t n_vocab) {
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model * m = llama_model_load_from_file(path, mp);
	if (!m) return LC_LOAD;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = n < 256 ? 256 : n;
	cp.n_batch = cp.n_ubatch = cp.n_ctx;
	cp.n_seq_max = 1;
	cp.n_threads = cp.n_threads_batch = 1;
	cp.flash_attn_type = 0; // LLAMA_FLASH_ATTN_TYPE_DISABLED
	cp.type_k = cp.type_v = 0; // GGML_TYPE_F32
	cp.swa_full = true;
	struct llama_context * c = llama_init_from_model(m, cp);
	if (!c) { llama_model_free(m); return LC_CONTEXT; }
	int rc = 0;
	if (llama_vocab_n_tokens(llama_model_get_vocab(m)) != n_vocab) {
		rc = LC_VOCAB;
	} else {
		rc = llama_decode(c, llama_batch_get_one(tokens, n));
		if (rc == 0) {
			const float * l = llama_get_logits_ith(c, -1);
			for (int32_t i = 0; i < n_vocab; i++) out[i] = l[i];
		}
	}
	llama_free(c);
	llama_model_free(m);
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	_ "github.com/ollama/ollama/llama/llama.cpp/src" // compiles and links llama.cpp
)

// errLlamaCpp wraps a failure inside llama.cpp.
var errLlamaCpp = errors.New("llama.cpp")

var llamaInit sync.Once

// llamacppLogits is the last position's logits of tokens at positions
// 0..n-1, computed by llama.cpp itself (the copy ollama v0.17.4 vendors,
// with its own model loader and graphs) on the CPU, with an F32 KV cache.
// vocab is the file's vocabulary size.
func llamacppLogits(path string, tokens []int32, vocab int) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("%w: no tokens", errLlamaCpp)
	}
	llamaInit.Do(func() { C.lc_init() })
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	out := make([]float32, vocab)
	toks := append([]int32(nil), tokens...)
	rc := C.lc_logits(cpath, (*C.int32_t)(unsafe.Pointer(&toks[0])), C.int32_t(len(toks)), (*C.float)(unsafe.Pointer(&out[0])), C.int32_t(vocab))
	switch {
	case rc == C.LC_LOAD:
		return nil, fmt.Errorf("%w: cannot load %s", errLlamaCpp, path)
	case rc == C.LC_CONTEXT:
		return nil, fmt.Errorf("%w: %s: cannot create a context", errLlamaCpp, path)
	case rc == C.LC_VOCAB:
		return nil, fmt.Errorf("%w: %s: vocabulary is not %d tokens", errLlamaCpp, path, vocab)
	case rc != 0:
		return nil, fmt.Errorf("%w: %s: llama_decode returned %d", errLlamaCpp, path, rc)
	}
	return out, nil
}
