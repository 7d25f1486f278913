package refcheck

/*
#cgo LDFLAGS: -lm -lstdc++
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <math.h>

// The few ggml declarations used, as in ggml.h, gguf.h and ggml-cpu.h of
// the ggml that the pinned ollama module vendors (its Go package compiles
// and links ggml; the headers are not on cgo's include path).
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct gguf_context;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
struct gguf_init_params { bool no_alloc; struct ggml_context ** ctx; };
enum { T_F32 = 0, T_I32 = 26 };
extern struct gguf_context * gguf_init_from_file(const char * fname, struct gguf_init_params params);
extern void gguf_free(struct gguf_context * ctx);
extern struct ggml_context * ggml_init(struct ggml_init_params params);
extern void ggml_free(struct ggml_context * ctx);
extern struct ggml_tensor * ggml_get_tensor(struct ggml_context * ctx, const char * name);
extern struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
extern void * ggml_get_data(const struct ggml_tensor * tensor);
extern float * ggml_get_data_f32(const struct ggml_tensor * tensor);
extern struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_rms_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
extern struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
extern struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int axis0, int axis1, int axis2, int axis3);
extern struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_cont_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_rope_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c,
	int n_dims, int mode, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor, float attn_factor, float beta_fast, float beta_slow);
extern struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
extern struct ggml_tensor * ggml_diag_mask_inf(struct ggml_context * ctx, struct ggml_tensor * a, int n_past);
extern struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale, float max_bias);
extern struct ggml_tensor * ggml_silu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_swiglu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_view_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
	size_t nb1, size_t nb2, size_t offset);
extern struct ggml_tensor * ggml_view_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
extern struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_mul_mat_id(struct ggml_context * ctx, struct ggml_tensor * as, struct ggml_tensor * b, struct ggml_tensor * ids);
extern struct ggml_tensor * ggml_soft_max(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_argsort_top_k(struct ggml_context * ctx, struct ggml_tensor * a, int k);
extern struct ggml_tensor * ggml_sum_rows(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_clamp(struct ggml_context * ctx, struct ggml_tensor * a, float min, float max);
extern struct ggml_tensor * ggml_div(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_swiglu_split(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern int64_t gguf_find_key(const struct gguf_context * ctx, const char * key);
extern float gguf_get_val_f32(const struct gguf_context * ctx, int64_t key_id);
extern uint32_t gguf_get_val_u32(const struct gguf_context * ctx, int64_t key_id);
extern const char * gguf_get_val_str(const struct gguf_context * ctx, int64_t key_id);
extern struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
extern void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
extern int ggml_graph_compute_with_ctx(struct ggml_context * ctx, struct ggml_cgraph * cgraph, int n_threads);

static struct ggml_tensor * W(struct ggml_context * m, const char * fmt, int l) {
	char name[128];
	snprintf(name, sizeof name, fmt, l);
	return ggml_get_tensor(m, name);
}

// ref_moe is llama.cpp's build_moe_ffn as qwen3moe and llama (Mixtral)
// call it: softmax router, the top k by ggml_argsort_top_k, their
// probabilities normalised to sum 1 (sum_rows, clamp, div), up and gate
// through ggml_mul_mat_id, swiglu, down, each expert's output weighed and
// the k added in rank order. cur is [n_embd, n].
static struct ggml_tensor * ref_moe(struct ggml_context * c, struct ggml_context * m, int l, struct ggml_tensor * cur,
		int n_embd, int n, int n_expert, int k) {
	struct ggml_tensor * logits = ggml_mul_mat(c, W(m, "blk.%d.ffn_gate_inp.weight", l), cur); // [n_expert, n]
	struct ggml_tensor * probs = ggml_soft_max(c, logits);
	struct ggml_tensor * sel = ggml_argsort_top_k(c, probs, k); // [k, n]
	struct ggml_tensor * w = ggml_get_rows(c, ggml_reshape_3d(c, probs, 1, n_expert, n), sel); // [1, k, n]
	w = ggml_reshape_2d(c, w, k, n);
	struct ggml_tensor * sum = ggml_clamp(c, ggml_sum_rows(c, w), 6.103515625e-5f, INFINITY);
	w = ggml_reshape_3d(c, ggml_div(c, w, sum), 1, k, n);
	cur = ggml_reshape_3d(c, cur, n_embd, 1, n);
	struct ggml_tensor * up = ggml_mul_mat_id(c, W(m, "blk.%d.ffn_up_exps.weight", l), cur, sel);     // [ff, k, n]
	struct ggml_tensor * gate = ggml_mul_mat_id(c, W(m, "blk.%d.ffn_gate_exps.weight", l), cur, sel); // [ff, k, n]
	struct ggml_tensor * ex = ggml_mul_mat_id(c, W(m, "blk.%d.ffn_down_exps.weight", l), ggml_swiglu_split(c, gate, up), sel); // [n_embd, k, n]
	ex = ggml_mul(c, ex, w);
	size_t row = sizeof(float) * (size_t)n_embd;
	struct ggml_tensor * out = ggml_view_2d(c, ex, n_embd, n, row * k, 0);
	for (int i = 1; i < k; i++) out = ggml_add(c, out, ggml_view_2d(c, ex, n_embd, n, row * k, row * i));
	if (k == 1) out = ggml_cont(c, out);
	return out;
}

// ref_forward runs a llama-family model (loaded in m) the way llama.cpp's
// llama and qwen2 graphs do (RoPE mode 0 for llama, NEOX for qwen2; Q/K/V
// biases on qwen2) over n tokens at positions 0..n-1 and writes the last
// position's logits to out. It returns 0 on success.
// With n_expert > 0 (qwen3moe, Mixtral) the FFN is ref_moe's.
// phi3 follows llama.cpp's phi3 graph instead: Q, K and V are views of one
// attn_qkv product, RoPE takes rope_factors_short and attn_factor, Q is
// scaled before Q·K, and ffn_up's product goes through ggml_swiglu.
static int ref_forward(struct ggml_context * m, const int32_t * tokens, int n, int neox, int bias, int qknorm, int phi3, int n_layer,
		int n_head, int n_kv, int hd, float eps, float base, const float * rp, int n_embd, int n_expert, int n_expert_used, float * out, int n_vocab, int n_threads) {
	// rp: ref_rope_params' freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig.
	float freq_scale = rp[0], ext_factor = rp[1], attn_factor = rp[2], beta_fast = rp[3], beta_slow = rp[4];
	int n_ctx_orig = (int)rp[5];
	struct ggml_init_params ip = { 512u << 20, NULL, false };
	struct ggml_context * c = ggml_init(ip);
	struct ggml_tensor * tok = ggml_new_tensor_1d(c, T_I32, n);
	struct ggml_tensor * pos = ggml_new_tensor_1d(c, T_I32, n);
	for (int i = 0; i < n; i++) { ((int32_t *)ggml_get_data(tok))[i] = tokens[i]; ((int32_t *)ggml_get_data(pos))[i] = i; }
	struct ggml_tensor * x = ggml_get_rows(c, ggml_get_tensor(m, "token_embd.weight"), tok);
	int mode = neox ? 2 : 0;
	struct ggml_tensor * factors = ggml_get_tensor(m, phi3 ? "rope_factors_short.weight" : "rope_freqs.weight"); // NULL without
	float kq_scale = 1.0f / sqrtf((float)hd);
	for (int l = 0; l < n_layer; l++) {
		struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, x, eps), W(m, "blk.%d.attn_norm.weight", l));
		struct ggml_tensor *q, *k, *v;
		if (phi3) {
			struct ggml_tensor * qkv = ggml_mul_mat(c, W(m, "blk.%d.attn_qkv.weight", l), cur);
			size_t row = sizeof(float) * (size_t)(hd * (n_head + 2 * n_kv)), f = sizeof(float);
			q = ggml_view_3d(c, qkv, hd, n_head, n, f * hd, row, 0);
			k = ggml_view_3d(c, qkv, hd, n_kv, n, f * hd, row, f * hd * n_head);
			v = ggml_view_3d(c, qkv, hd, n_kv, n, f * hd, row, f * hd * (n_head + n_kv));
		} else {
			q = ggml_mul_mat(c, W(m, "blk.%d.attn_q.weight", l), cur);
			k = ggml_mul_mat(c, W(m, "blk.%d.attn_k.weight", l), cur);
			v = ggml_mul_mat(c, W(m, "blk.%d.attn_v.weight", l), cur);
			if (bias) {
				q = ggml_add(c, q, W(m, "blk.%d.attn_q.bias", l));
				k = ggml_add(c, k, W(m, "blk.%d.attn_k.bias", l));
				v = ggml_add(c, v, W(m, "blk.%d.attn_v.bias", l));
			}
			q = ggml_reshape_3d(c, q, hd, n_head, n);
			k = ggml_reshape_3d(c, k, hd, n_kv, n);
			v = ggml_reshape_3d(c, v, hd, n_kv, n);
		}
		if (qknorm) { // qwen3: RMSNorm over each head before RoPE
			q = ggml_mul(c, ggml_rms_norm(c, q, eps), W(m, "blk.%d.attn_q_norm.weight", l));
			k = ggml_mul(c, ggml_rms_norm(c, k, eps), W(m, "blk.%d.attn_k_norm.weight", l));
		}
		q = ggml_rope_ext(c, q, pos, factors, hd, mode, n_ctx_orig, base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow);
		k = ggml_rope_ext(c, k, pos, factors, hd, mode, n_ctx_orig, base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow);
		float s = kq_scale;
		if (phi3) { q = ggml_scale(c, q, kq_scale); s = 1.0f; }
		struct ggml_tensor * qp = ggml_cont(c, ggml_permute(c, q, 0, 2, 1, 3)); // [hd, n, n_head]
		struct ggml_tensor * kp = ggml_cont(c, ggml_permute(c, k, 0, 2, 1, 3)); // [hd, n, n_kv]
		struct ggml_tensor * kq = ggml_mul_mat(c, kp, qp);                      // [n(kv), n(q), n_head]
		kq = ggml_diag_mask_inf(c, ggml_scale(c, kq, s), 0);
		kq = ggml_soft_max_ext(c, kq, NULL, 1.0f, 0.0f);
		struct ggml_tensor * vp = ggml_cont(c, ggml_permute(c, v, 1, 2, 0, 3)); // [n(kv), hd, n_kv]
		struct ggml_tensor * kqv = ggml_mul_mat(c, vp, kq);                     // [hd, n, n_head]
		cur = ggml_cont_2d(c, ggml_permute(c, kqv, 0, 2, 1, 3), hd * n_head, n);
		x = ggml_add(c, ggml_mul_mat(c, W(m, "blk.%d.attn_output.weight", l), cur), x);
		cur = ggml_mul(c, ggml_rms_norm(c, x, eps), W(m, "blk.%d.ffn_norm.weight", l));
		if (n_expert > 0) {
			x = ggml_add(c, ref_moe(c, m, l, cur, n_embd, n, n_expert, n_expert_used), x);
			continue;
		}
		struct ggml_tensor * act;
		if (phi3) { // gate rows then up rows: silu(first half) · second half
			act = ggml_swiglu(c, ggml_mul_mat(c, W(m, "blk.%d.ffn_up.weight", l), cur));
		} else {
			struct ggml_tensor * gate = ggml_silu(c, ggml_mul_mat(c, W(m, "blk.%d.ffn_gate.weight", l), cur));
			act = ggml_mul(c, gate, ggml_mul_mat(c, W(m, "blk.%d.ffn_up.weight", l), cur));
		}
		x = ggml_add(c, ggml_mul_mat(c, W(m, "blk.%d.ffn_down.weight", l), act), x);
	}
	struct ggml_tensor * head = ggml_get_tensor(m, "output.weight");
	if (!head) head = ggml_get_tensor(m, "token_embd.weight");
	x = ggml_mul(c, ggml_rms_norm(c, x, eps), ggml_get_tensor(m, "output_norm.weight"));
	struct ggml_tensor * logits = ggml_mul_mat(c, head, x); // [n_vocab, n]
	struct ggml_cgraph * gf = ggml_new_graph(c);
	ggml_build_forward_expand(gf, logits);
	int rc = ggml_graph_compute_with_ctx(c, gf, n_threads);
	if (rc == 0) memcpy(out, ggml_get_data_f32(logits) + (size_t)(n - 1) * n_vocab, sizeof(float) * n_vocab);
	ggml_free(c);
	return rc;
}

// ref_load reads a model file's tensors into *m; ref_free frees them.
static struct gguf_context * ref_load(const char * path, struct ggml_context ** m) {
	struct gguf_init_params gp = { false, m };
	return gguf_init_from_file(path, gp);
}

static float key_f32(struct gguf_context * g, const char * arch, const char * key, float def) {
	char k[256];
	snprintf(k, sizeof k, "%s.%s", arch, key);
	int64_t id = gguf_find_key(g, k);
	return id < 0 ? def : gguf_get_val_f32(g, id);
}

// ref_rope_params fills rp (see ref_forward) from the file's keys as
// llama.cpp does: llama_model::load_hparams (a missing type is "linear",
// freq_scale 1/factor, n_ctx_orig_yarn the original context or
// context_length, YaRN's parameters their defaults) and llama_context's
// cparams (ext_factor 1 for yarn, the attention factor's mscale and its
// cancellation of ggml's own, times rope.scaling.attn_factor).
static void ref_rope_params(struct gguf_context * g, const char * arch, float * rp) {
	char k[256];
	snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
	int64_t id = gguf_find_key(g, k);
	const char * type = id < 0 ? "linear" : gguf_get_val_str(g, id);
	float factor = key_f32(g, arch, "rope.scaling.factor", 0.0f);
	float freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
	int none = strcmp(type, "none") == 0, yarn = strcmp(type, "yarn") == 0;
	if (none) freq_scale = 1.0f;
	snprintf(k, sizeof k, "%s.context_length", arch);
	uint32_t n_ctx_orig = gguf_get_val_u32(g, gguf_find_key(g, k));
	snprintf(k, sizeof k, "%s.rope.scaling.original_context_length", arch);
	if ((id = gguf_find_key(g, k)) >= 0) n_ctx_orig = gguf_get_val_u32(g, id);
	// llama.cpp reads the rope.scaling.yarn_* keys for grok, deepseek2 and
	// mistral3 only, none of which this graph builds: their defaults.
	float ext_factor = -1.0f, attn_factor = 1.0f, log_mul = 0.0f;
	if (ext_factor < 0.0f) ext_factor = yarn ? 1.0f : 0.0f;
	if (ext_factor != 0) {
		float f = 1.0f / freq_scale;
		#define MSCALE(s, m) ((s) <= 1.0f ? 1.0f : (0.1f * (m) * logf(s) + 1.0f))
		attn_factor = log_mul != 0.0f ? MSCALE(f, 1.0f) / MSCALE(f, log_mul) : MSCALE(f, 1.0f);
		attn_factor *= 1.0f / (1.0f + 0.1f * logf(f));
	}
	attn_factor *= key_f32(g, arch, "rope.scaling.attn_factor", 1.0f);
	rp[0] = freq_scale; rp[1] = ext_factor; rp[2] = attn_factor;
	rp[3] = 32.0f;
	rp[4] = 1.0f;
	rp[5] = (float)n_ctx_orig;
}

static void ref_free(struct gguf_context * g, struct ggml_context * m) {
	ggml_free(m);
	gguf_free(g);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src" // compiles and links ggml

	"github.com/stratanet/strata/engine"
)

// ggmlModel is a model file loaded by ggml.
type ggmlModel struct {
	g *C.struct_gguf_context
	m *C.struct_ggml_context
	c engine.GenConfig
}

func openGGML(path string, c engine.GenConfig) (*ggmlModel, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var m *C.struct_ggml_context
	g := C.ref_load(cpath, &m)
	if g == nil {
		return nil, fmt.Errorf("ggml: cannot load %s", path)
	}
	return &ggmlModel{g: g, m: m, c: c}, nil
}

func (g *ggmlModel) close() { C.ref_free(g.g, g.m) }

// logits is the last position's logits of tokens at positions 0..n-1.
func (g *ggmlModel) logits(tokens []int32, threads int) ([]float32, error) {
	c := g.c
	out := make([]float32, c.Vocab)
	neox, bias, qknorm, phi3 := 0, 0, 0, 0
	switch c.Arch {
	case "qwen2":
		neox, bias = 1, 1
	case "qwen3", "qwen3moe":
		neox, qknorm = 1, 1
	case "phi3":
		neox, phi3 = 1, 1
	}
	arch := C.CString(c.Arch)
	defer C.free(unsafe.Pointer(arch))
	var rp [6]C.float
	C.ref_rope_params(g.g, arch, &rp[0])
	hd := c.HeadDim
	if hd == 0 {
		hd = c.Dim / c.Heads
	}
	rc := C.ref_forward(g.m, (*C.int32_t)(unsafe.Pointer(&tokens[0])), C.int(len(tokens)), C.int(neox), C.int(bias), C.int(qknorm), C.int(phi3),
		C.int(c.Layers), C.int(c.Heads), C.int(c.KVHeads), C.int(hd), C.float(c.NormEps), C.float(c.RopeBase), &rp[0],
		C.int(c.Dim), C.int(c.Experts), C.int(c.ExpertsUsed), (*C.float)(unsafe.Pointer(&out[0])), C.int(c.Vocab), C.int(threads))
	if rc != 0 {
		return nil, fmt.Errorf("ggml: code %d", rc)
	}
	return out, nil
}

// ggmlLogits is the last position's logits of the generated model c at
// path, computed by ggml.
func ggmlLogits(path string, c engine.GenConfig, tokens []int32) ([]float32, error) {
	g, err := openGGML(path, c)
	if err != nil {
		return nil, err
	}
	defer g.close()
	return g.logits(tokens, 1)
}
