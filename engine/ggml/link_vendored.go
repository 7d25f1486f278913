//go:build !ggmlrelease

package ggml

/*
#cgo LDFLAGS: -lm -lstdc++
#include "decls.h"

// ggml-cpu.h: the CPU backend is compiled into this build, so its own
// functions are called directly.
extern bool ggml_backend_is_cpu(ggml_backend_t backend);
extern void ggml_backend_cpu_set_n_threads(ggml_backend_t backend_cpu, int n_threads);
extern int ggml_cpu_has_avx2(void);
extern int ggml_cpu_has_avx512(void);
extern int ggml_cpu_has_neon(void);
extern int ggml_cpu_has_dotprod(void);
extern int ggml_cpu_has_matmul_int8(void);
*/
import "C"

import (
	_ "github.com/ollama/ollama/ml/backend/ggml/ggml/src" // compiles and links ggml

	"github.com/stratanet/strata/engine"
)

// flashDefault: this ggml's flash_attn_ext walks the keys one at a time,
// no faster on a prefill than the separate products (docs/ggml.md).
const flashDefault = false

// loadBackends has nothing to do here: the CPU backend is built in.
func loadBackends() {}

// noDeviceHint adds nothing to a "no device" error: the CPU is built in.
func noDeviceHint() string { return "" }

// libKey is dir as LoadLibDir remembers it.
func libKey(dir string) string { return dir }

func isCPU(b C.ggml_backend_t) bool { return bool(C.ggml_backend_is_cpu(b)) }

func setThreads(b C.ggml_backend_t, n int) error {
	C.ggml_backend_cpu_set_n_threads(b, C.int(n))
	return nil
}

// repackable reports whether ggml's CPU_REPACK buffer holds a matrix of
// type t and dims in a layout of its own on this CPU (the conditions of
// repack.cpp's ggml_repack_get_optimal_repack_type, which a tensor set
// there must meet: it has no fallback).
func repackable(t engine.DType, dims []uint64) bool {
	if len(dims) != 2 || dims[1]%8 != 0 || dims[0]%8 != 0 {
		return false
	}
	avx2, arm := C.ggml_cpu_has_avx2() != 0, C.ggml_cpu_has_neon() != 0
	switch t {
	case engine.Q4_0, engine.Q4_K:
		return avx2 || arm && (C.ggml_cpu_has_matmul_int8() != 0 || C.ggml_cpu_has_dotprod() != 0)
	case engine.IQ4_NL:
		return avx2 || arm && C.ggml_cpu_has_dotprod() != 0
	case engine.Q2_K:
		return C.ggml_cpu_has_avx512() != 0
	}
	return false
}
