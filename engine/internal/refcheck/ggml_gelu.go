package refcheck

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

// The ggml declarations used, as in ggml.h and ggml-cpu.h of the ggml
// that the pinned ollama module vendors.
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; };
extern struct ggml_context * ggml_init(struct ggml_init_params params);
extern void ggml_free(struct ggml_context * ctx);
extern struct ggml_tensor * ggml_new_tensor_1d(struct ggml_context * ctx, int type, int64_t ne0);
extern float * ggml_get_data_f32(const struct ggml_tensor * tensor);
extern struct ggml_tensor * ggml_geglu_split(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
extern struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
extern void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);
extern int ggml_graph_compute_with_ctx(struct ggml_context * ctx, struct ggml_cgraph * cgraph, int n_threads);

// geglu computes ggml_geglu_split(x, 1): the op llama.cpp's gemma FFN
// runs (build_ffn's LLM_FFN_GELU with a parallel gate).
static int geglu(const float * x, float * y, int n) {
	struct ggml_init_params ip = { (size_t)n * 16 + (1 << 20), NULL, false };
	struct ggml_context * c = ggml_init(ip);
	if (!c) return -1;
	struct ggml_tensor * a = ggml_new_tensor_1d(c, 0, n), * b = ggml_new_tensor_1d(c, 0, n);
	memcpy(ggml_get_data_f32(a), x, (size_t)n * sizeof(float));
	for (int i = 0; i < n; i++) ggml_get_data_f32(b)[i] = 1.0f;
	struct ggml_tensor * out = ggml_geglu_split(c, a, b);
	struct ggml_cgraph * gf = ggml_new_graph(c);
	ggml_build_forward_expand(gf, out);
	int rc = ggml_graph_compute_with_ctx(c, gf, 1);
	if (rc == 0) memcpy(y, ggml_get_data_f32(out), (size_t)n * sizeof(float));
	ggml_free(c);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// ggmlGEGLU is ggml's CPU geglu of x (gate 1), as the linked ggml computes it.
func ggmlGEGLU(x []float32) ([]float32, error) {
	y := make([]float32, len(x))
	if len(x) == 0 {
		return y, nil
	}
	if rc := C.geglu((*C.float)(unsafe.Pointer(&x[0])), (*C.float)(unsafe.Pointer(&y[0])), C.int(len(x))); rc != 0 {
		return nil, fmt.Errorf("ggml geglu: graph compute status %d", rc)
	}
	return y, nil
}

// ggmlGELUTable reports whether the linked ggml's CPU GELU goes through
// its F16 table (GGML_GELU_FP16, which the vendored
// ggml/src/ggml-cpu/vec.h defines unconditionally at its line 17) rather
// than the tanh formula: every table output (gate 1) is an F16 value,
// while the formula's float32 results almost never are.
func ggmlGELUTable() (bool, error) {
	var x []float32
	for i := range 2001 {
		x = append(x, float32(i-1000)/200+0.000123) // −5 … 5, off the F16 grid
	}
	y, err := ggmlGEGLU(x)
	if err != nil {
		return false, err
	}
	onGrid := 0
	for _, v := range y {
		if isF16(v) {
			onGrid++
		}
	}
	return onGrid > len(y)/2, nil
}

// isF16 reports whether v is exactly an F16 value: 10 mantissa bits, or,
// below F16's smallest normal (2⁻¹⁴), a multiple of 2⁻²⁴.
func isF16(v float32) bool {
	a := math.Abs(float64(v))
	if a == 0 {
		return true
	}
	if a < 1.0/16384 {
		m := a * (1 << 24)
		return m == math.Trunc(m)
	}
	return math.Float32bits(v)&0x1fff == 0 && a <= 65504
}
