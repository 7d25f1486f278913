package refcheck

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

// The ggml declarations used, as in ggml.h and ggml-cpu.h of the ggml
// that the pinned ollama module vendors.
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
enum { G_F32 = 0, G_I32 = 26 };
extern struct ggml_context * ggml_init(struct ggml_init_params params);
extern void ggml_free(struct ggml_context * ctx);
extern struct ggml_tensor * ggml_get_tensor(struct ggml_context * ctx, const char * name);
extern struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
extern struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1);
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
extern struct ggml_tensor * ggml_scale_bias(struct ggml_context * ctx, struct ggml_tensor * a, float s, float b);
extern struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale, float max_bias);
extern struct ggml_tensor * ggml_gelu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_tanh(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
extern void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
extern int ggml_graph_compute_with_ctx(struct ggml_context * ctx, struct ggml_cgraph * cgraph, int n_threads);

static struct ggml_tensor * GW(struct ggml_context * m, const char * fmt, int l) {
	char name[128];
	snprintf(name, sizeof name, fmt, l);
	return ggml_get_tensor(m, name);
}

// gemma3_gelu is gelu(gate)·up. table: ggml's ggml_gelu, which on the CPU
// rounds its input to F16 and looks the result up in an F16 table (as
// llama.cpp's and ollama's gemma3 do); otherwise the tanh formula in F32.
static struct ggml_tensor * gemma3_gelu(struct ggml_context * c, struct ggml_tensor * g, struct ggml_tensor * up, int table) {
	if (table) return ggml_mul(c, ggml_gelu(c, g), up);
	struct ggml_tensor * g3 = ggml_mul(c, ggml_mul(c, g, g), g);
	struct ggml_tensor * in = ggml_scale(c, ggml_add(c, g, ggml_scale(c, g3, 0.044715f)), 0.79788456080286535588f);
	struct ggml_tensor * half = ggml_scale_bias(c, ggml_tanh(c, in), 0.5f, 0.5f); // (1 + tanh)/2
	return ggml_mul(c, ggml_mul(c, g, half), up);
}

// ref_gemma3 runs a Gemma 3 text model (loaded in m) the way llama.cpp's
// gemma3 graph does over n tokens at positions 0..n-1 and writes the last
// position's logits to out: the embedding scaled by √n_embd; per layer
// RMSNorm, Q/K/V, per-head Q/K RMSNorm, NEOX RoPE (base 10000 on the
// local layers, every layer but each sixth, and base on the global ones),
// Q scaled by 1/√head_dim, attention (local layers see a key at distance
// d from the query while d < keep), post-attention norm and residual,
// RMSNorm, gelu(gate)·up, down, post-FFN norm and residual; the final norm
// and the tied head, then the final soft cap when softcap > 0.
static int ref_gemma3(struct ggml_context * m, const int32_t * tokens, int n, int n_layer, int n_embd, int n_head, int n_kv, int hd,
		float eps, float base, float softcap, int keep, int table, float * out, int n_vocab) {
	struct ggml_init_params ip = { 512u << 20, NULL, false };
	struct ggml_context * c = ggml_init(ip);
	struct ggml_tensor * tok = ggml_new_tensor_1d(c, G_I32, n);
	struct ggml_tensor * pos = ggml_new_tensor_1d(c, G_I32, n);
	struct ggml_tensor * causal = ggml_new_tensor_2d(c, G_F32, n, n); // [key, query]
	struct ggml_tensor * local = ggml_new_tensor_2d(c, G_F32, n, n);
	for (int i = 0; i < n; i++) {
		((int32_t *)ggml_get_data(tok))[i] = tokens[i];
		((int32_t *)ggml_get_data(pos))[i] = i;
		for (int j = 0; j < n; j++) {
			((float *)ggml_get_data(causal))[i * n + j] = j > i ? -INFINITY : 0.0f;
			((float *)ggml_get_data(local))[i * n + j] = (j > i || i - j >= keep) ? -INFINITY : 0.0f;
		}
	}
	struct ggml_tensor * x = ggml_get_rows(c, ggml_get_tensor(m, "token_embd.weight"), tok);
	x = ggml_scale(c, x, sqrtf((float)n_embd));
	for (int l = 0; l < n_layer; l++) {
		int swa = (l + 1) % 6 != 0;
		float b = swa ? 10000.0f : base;
		struct ggml_tensor * cur = ggml_mul(c, ggml_rms_norm(c, x, eps), GW(m, "blk.%d.attn_norm.weight", l));
		struct ggml_tensor * q = ggml_reshape_3d(c, ggml_mul_mat(c, GW(m, "blk.%d.attn_q.weight", l), cur), hd, n_head, n);
		struct ggml_tensor * k = ggml_reshape_3d(c, ggml_mul_mat(c, GW(m, "blk.%d.attn_k.weight", l), cur), hd, n_kv, n);
		struct ggml_tensor * v = ggml_reshape_3d(c, ggml_mul_mat(c, GW(m, "blk.%d.attn_v.weight", l), cur), hd, n_kv, n);
		q = ggml_mul(c, ggml_rms_norm(c, q, eps), GW(m, "blk.%d.attn_q_norm.weight", l));
		k = ggml_mul(c, ggml_rms_norm(c, k, eps), GW(m, "blk.%d.attn_k_norm.weight", l));
		q = ggml_rope_ext(c, q, pos, NULL, hd, 2, 0, b, 1, 0, 1, 32, 1);
		k = ggml_rope_ext(c, k, pos, NULL, hd, 2, 0, b, 1, 0, 1, 32, 1);
		q = ggml_scale(c, q, 1.0f / sqrtf((float)hd));
		struct ggml_tensor * qp = ggml_cont(c, ggml_permute(c, q, 0, 2, 1, 3));
		struct ggml_tensor * kp = ggml_cont(c, ggml_permute(c, k, 0, 2, 1, 3));
		struct ggml_tensor * kq = ggml_soft_max_ext(c, ggml_mul_mat(c, kp, qp), swa ? local : causal, 1.0f, 0.0f);
		struct ggml_tensor * vp = ggml_cont(c, ggml_permute(c, v, 1, 2, 0, 3));
		cur = ggml_cont_2d(c, ggml_permute(c, ggml_mul_mat(c, vp, kq), 0, 2, 1, 3), hd * n_head, n);
		cur = ggml_mul_mat(c, GW(m, "blk.%d.attn_output.weight", l), cur);
		cur = ggml_mul(c, ggml_rms_norm(c, cur, eps), GW(m, "blk.%d.post_attention_norm.weight", l));
		x = ggml_add(c, cur, x);
		cur = ggml_mul(c, ggml_rms_norm(c, x, eps), GW(m, "blk.%d.ffn_norm.weight", l));
		cur = gemma3_gelu(c, ggml_mul_mat(c, GW(m, "blk.%d.ffn_gate.weight", l), cur), ggml_mul_mat(c, GW(m, "blk.%d.ffn_up.weight", l), cur), table);
		cur = ggml_mul_mat(c, GW(m, "blk.%d.ffn_down.weight", l), cur);
		cur = ggml_mul(c, ggml_rms_norm(c, cur, eps), GW(m, "blk.%d.post_ffw_norm.weight", l));
		x = ggml_add(c, cur, x);
	}
	x = ggml_mul(c, ggml_rms_norm(c, x, eps), ggml_get_tensor(m, "output_norm.weight"));
	struct ggml_tensor * logits = ggml_mul_mat(c, ggml_get_tensor(m, "token_embd.weight"), x);
	if (softcap > 0) logits = ggml_scale(c, ggml_tanh(c, ggml_scale(c, logits, 1.0f / softcap)), softcap);
	struct ggml_cgraph * gf = ggml_new_graph(c);
	ggml_build_forward_expand(gf, logits);
	int rc = ggml_graph_compute_with_ctx(c, gf, 1);
	if (rc == 0) memcpy(out, ggml_get_data_f32(logits) + (size_t)(n - 1) * n_vocab, sizeof(float) * n_vocab);
	ggml_free(c);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/stratanet/strata/engine"
)

// gemma3Opts are the choices on which llama.cpp's gemma3 graph and
// ollama's may differ.
type gemma3Opts struct {
	// keep is how many keys a local layer's query sees, itself included:
	// llama.cpp keeps sliding_window keys (masks distance >= window).
	keep int
	// exactGELU computes GELU by its tanh formula in F32 instead of ggml's
	// F16 table.
	exactGELU bool
}

// ggmlGemma3Logits is the last position's logits of tokens at positions
// 0..n-1 of the Gemma 3 file at path (one engine.GenerateGemma3 wrote with
// c), computed by our raw ggml graph after llama.cpp's.
func ggmlGemma3Logits(path string, c engine.Gemma3Config, tokens []int32, o gemma3Opts) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("ggml: gemma3: no tokens")
	}
	g, err := openGGML(path, engine.GenConfig{})
	if err != nil {
		return nil, err
	}
	defer g.close()
	kv := c.KVHeads
	if kv == 0 {
		kv = c.Heads
	}
	base := c.RopeBase
	if base == 0 {
		base = 1e6
	}
	eps := c.NormEps
	if eps == 0 {
		eps = 1e-6
	}
	hd := c.HeadDim
	if hd == 0 {
		hd = 256
	}
	table := 1
	if o.exactGELU {
		table = 0
	}
	out := make([]float32, c.Vocab)
	rc := C.ref_gemma3(g.m, (*C.int32_t)(unsafe.Pointer(&tokens[0])), C.int(len(tokens)), C.int(c.Layers), C.int(c.Dim), C.int(c.Heads),
		C.int(kv), C.int(hd), C.float(eps), C.float(base), C.float(c.Softcap), C.int(o.keep), C.int(table),
		(*C.float)(unsafe.Pointer(&out[0])), C.int(c.Vocab))
	if rc != 0 {
		return nil, fmt.Errorf("ggml: gemma3: code %d", rc)
	}
	return out, nil
}
