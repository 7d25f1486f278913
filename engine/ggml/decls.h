// The ggml declarations the stage's cgo files use, one copy included by
// each (stage.go, session.go, graph.go, ops.go).
#ifndef STRATA_GGML_DECLS_H
#define STRATA_GGML_DECLS_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// The ggml declarations used, as in ggml.h of the ggml that the pinned
// ollama module vendors (its Go package compiles and links ggml; the
// headers are not on cgo's include path). Each one is also as in ggml.h
// of llama.cpp's release that a -tags ggmlrelease build links (see
// link_release.go); ggml-cpu.h's functions, which that build does not
// link, are declared in link_vendored.go.
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
enum { T_F32 = 0, T_F16 = 1, T_I32 = 26, T_I64 = 27 };
extern struct ggml_context * ggml_init(struct ggml_init_params params);
extern void ggml_free(struct ggml_context * ctx);
extern size_t ggml_tensor_overhead(void);
extern size_t ggml_graph_overhead_custom(size_t size, bool grads);
extern size_t ggml_nbytes(const struct ggml_tensor * tensor);
extern struct ggml_tensor * ggml_new_tensor(struct ggml_context * ctx, int type, int n_dims, const int64_t * ne);
extern struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
extern struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_new_tensor_3d(struct ggml_context * ctx, int type, int64_t ne0, int64_t ne1, int64_t ne2);
extern struct ggml_tensor * ggml_get_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_rms_norm(struct ggml_context * ctx, struct ggml_tensor * a, float eps);
extern struct ggml_tensor * ggml_mul(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_add(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_reshape_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2);
extern struct ggml_tensor * ggml_permute(struct ggml_context * ctx, struct ggml_tensor * a, int axis0, int axis1, int axis2, int axis3);
extern struct ggml_tensor * ggml_cont(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_cont_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_view_1d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, size_t offset);
extern struct ggml_tensor * ggml_view_3d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2,
	size_t nb1, size_t nb2, size_t offset);
extern struct ggml_tensor * ggml_cpy(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_rope_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c,
	int n_dims, int mode, int n_ctx_orig, float freq_base, float freq_scale, float ext_factor, float attn_factor, float beta_fast, float beta_slow);
extern struct ggml_tensor * ggml_scale(struct ggml_context * ctx, struct ggml_tensor * a, float s);
extern struct ggml_tensor * ggml_diag_mask_inf(struct ggml_context * ctx, struct ggml_tensor * a, int n_past);
extern struct ggml_tensor * ggml_soft_max_ext(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * mask, float scale, float max_bias);
extern struct ggml_tensor * ggml_silu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_gelu(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_tanh(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_cgraph * ggml_new_graph_custom(struct ggml_context * ctx, size_t size, bool grads);
extern void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
extern void ggml_set_input(struct ggml_tensor * tensor);
extern void ggml_set_output(struct ggml_tensor * tensor);

// ggml-backend.h and ggml-alloc.h: weights, caches and graphs
// live in a backend's buffers, so that the same code runs on any device.
typedef struct ggml_backend * ggml_backend_t;
typedef struct ggml_backend_buffer * ggml_backend_buffer_t;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_gallocr * ggml_gallocr_t;
extern void ggml_backend_load_all_from_path(const char * dir_path);
extern const char * ggml_backend_name(ggml_backend_t backend);
extern void ggml_backend_free(ggml_backend_t backend);
extern ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t backend);
extern ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, ggml_backend_t backend);
extern void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
extern void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
extern void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
extern int ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);
extern ggml_gallocr_t ggml_gallocr_new(ggml_backend_buffer_type_t buft);
extern void ggml_gallocr_free(ggml_gallocr_t galloc);
extern bool ggml_gallocr_alloc_graph(ggml_gallocr_t galloc, struct ggml_cgraph * graph);

typedef struct ggml_backend_device * ggml_backend_dev_t;
typedef struct ggml_backend_reg * ggml_backend_reg_t;
extern ggml_backend_dev_t ggml_backend_get_device(ggml_backend_t backend);
extern ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params);
extern const char * ggml_backend_dev_name(ggml_backend_dev_t device);
extern ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
extern void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
extern const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
extern ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors_from_buft(struct ggml_context * ctx, ggml_backend_buffer_type_t buft);
extern void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value);
extern struct ggml_tensor * ggml_set_rows(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * c);
extern struct ggml_tensor * ggml_reshape_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1);
extern struct ggml_tensor * ggml_concat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, int dim);
extern struct ggml_tensor * ggml_view_2d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
extern struct ggml_tensor * ggml_soft_max(struct ggml_context * ctx, struct ggml_tensor * a);
extern void ggml_soft_max_add_sinks(struct ggml_tensor * a, struct ggml_tensor * sinks);
extern struct ggml_tensor * ggml_flash_attn_ext(struct ggml_context * ctx, struct ggml_tensor * q, struct ggml_tensor * k, struct ggml_tensor * v, struct ggml_tensor * mask, float scale, float max_bias, float logit_softcap);
extern void ggml_flash_attn_ext_add_sinks(struct ggml_tensor * a, struct ggml_tensor * sinks);
extern struct ggml_tensor * ggml_argsort_top_k(struct ggml_context * ctx, struct ggml_tensor * a, int k);
extern struct ggml_tensor * ggml_sum_rows(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_clamp(struct ggml_context * ctx, struct ggml_tensor * a, float min, float max);
extern struct ggml_tensor * ggml_div(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_mul_mat_id(struct ggml_context * ctx, struct ggml_tensor * as, struct ggml_tensor * b, struct ggml_tensor * ids);
extern struct ggml_tensor * ggml_add_id(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, struct ggml_tensor * ids);
extern struct ggml_tensor * ggml_swiglu_split(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_tensor * ggml_swiglu_oai(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, float alpha, float limit);
extern struct ggml_tensor * ggml_sigmoid(struct ggml_context * ctx, struct ggml_tensor * a);
extern struct ggml_tensor * ggml_fill(struct ggml_context * ctx, struct ggml_tensor * a, float c);
extern struct ggml_tensor * ggml_repeat_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);
extern struct ggml_tensor * ggml_reshape_4d(struct ggml_context * ctx, struct ggml_tensor * a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3);

// cpu_repack_buft is the CPU device's CPU_REPACK buffer type: ggml lists
// it among the device's extra buffer types where ggml-cpu was compiled
// with GGML_USE_CPU_REPACK (make build-ggml does); NULL otherwise.
static ggml_backend_buffer_type_t cpu_repack_buft(ggml_backend_t backend) {
	ggml_backend_dev_t dev = ggml_backend_get_device(backend);
	if (dev == NULL) return NULL;
	typedef ggml_backend_buffer_type_t * (*extra_fn)(ggml_backend_dev_t);
	extra_fn fn = (extra_fn) ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
	if (fn == NULL) return NULL;
	for (ggml_backend_buffer_type_t * b = fn(dev); b != NULL && *b != NULL; b++) {
		const char * name = ggml_backend_buft_name(*b);
		if (name != NULL && strcmp(name, "CPU_REPACK") == 0) return *b;
	}
	return NULL;
}

static struct ggml_context * new_ctx(size_t size, bool no_alloc) {
	struct ggml_init_params p = { size, NULL, no_alloc };
	return ggml_init(p);
}

#endif
