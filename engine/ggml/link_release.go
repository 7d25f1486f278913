//go:build ggmlrelease

package ggml

// The -tags ggmlrelease build links llama.cpp's own prebuilt ggml (the
// shared libraries of a llama.cpp release, e.g. npm's
// @node-llama-cpp/linux-x64) instead of compiling the ollama module's
// copy: libggml-base (tensors, graphs, buffers) and libggml (the backend
// registry). The CPU backend is not linked: as llama.cpp does, it is
// loaded at run time from the libraries' own directory, the variant for
// this CPU (libggml-cpu-zen4.so, -haswell.so...) chosen by ggml's score,
// and its own functions come through the registry's proc addresses. The
// linker flags (-L, an rpath, the libraries' names) come from CGO_LDFLAGS:
// make build-ggml-release sets them.

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include "decls.h"

// ggml-backend.h: enum ggml_backend_dev_type, whose values device.go
// names DEVT_*; the release adds a fifth (META) after the four both have.
extern int ggml_backend_dev_type(ggml_backend_dev_t device);

// release_dir writes the directory libggml-base.so was loaded from (the
// one the rpath chose) into buf, PATH_MAX bytes; -1 if it cannot.
static int release_dir(char * buf) {
	void * h = dlopen("libggml-base.so", RTLD_LAZY | RTLD_NOLOAD);
	if (h == NULL) return -1;
	int rc = dlinfo(h, RTLD_DI_ORIGIN, buf);
	dlclose(h);
	return rc;
}

static bool backend_is_cpu(ggml_backend_t b) {
	ggml_backend_dev_t dev = ggml_backend_get_device(b);
	return dev != NULL && ggml_backend_dev_type(dev) == 0;
}

// set_threads sets a CPU backend's thread count through its registry, as
// llama.cpp does for a backend it loaded; false if it has no such call.
static bool set_threads(ggml_backend_t b, int n) {
	ggml_backend_dev_t dev = ggml_backend_get_device(b);
	if (dev == NULL) return false;
	typedef void (*set_fn)(ggml_backend_t, int);
	set_fn fn = (set_fn) ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_set_n_threads");
	if (fn == NULL) return false;
	fn(b, n);
	return true;
}
*/
import "C"

import (
	"fmt"
	"path/filepath"
	"sync"
	"unsafe"

	"github.com/stratanet/strata/engine"
)

// flashDefault: on the CPU, the release's flash_attn_ext computes a
// prefill in tiles (and a long decode split over the keys), as llama.cpp
// runs it.
const flashDefault = true

// releaseDir is the directory of the ggml release this binary links (and
// whose CPU backend it loads), "" if it cannot be found.
func releaseDir() string {
	buf := (*C.char)(C.malloc(C.PATH_MAX))
	defer C.free(unsafe.Pointer(buf))
	if C.release_dir(buf) != 0 {
		return ""
	}
	return filepath.Clean(C.GoString(buf))
}

var loadOnce sync.Once

// loadBackends registers the release's backends (its best CPU variant;
// any GPU library beside it) once per process, before any device is
// looked up.
func loadBackends() {
	loadOnce.Do(func() {
		dir := releaseDir()
		if dir == "" {
			return // pick then finds no device, and Open says so
		}
		libDirs.Store(libKey(dir), struct{}{})
		cdir := C.CString(dir)
		defer C.free(unsafe.Pointer(cdir))
		C.ggml_backend_load_all_from_path(cdir)
	})
}

// noDeviceHint says where the CPU backend was looked for, for a "no
// device" error: without it the release's directory lacked a CPU variant
// that loads here (or could not be found).
func noDeviceHint() string {
	dir := releaseDir()
	if dir == "" {
		return " (the directory of the linked libggml-base.so is unknown, so no backend was loaded)"
	}
	return fmt.Sprintf(" (backends loaded from %s)", dir)
}

// libKey is dir as LoadLibDir remembers it: its absolute path without
// symbolic links, so that a LoadLibDir of the release's own directory,
// however spelt, does not register its backends a second time.
func libKey(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return dir
}

func isCPU(b C.ggml_backend_t) bool { return bool(C.backend_is_cpu(b)) }

func setThreads(b C.ggml_backend_t, n int) error {
	if !C.set_threads(b, C.int(n)) {
		return fmt.Errorf("%w: the CPU backend cannot set its thread count", ErrGGML)
	}
	return nil
}

// cpuHas is the loaded CPU variant's features as ggml_cpu_has_* report
// them (ggml_backend_get_features lists those same calls).
var cpuHas = sync.OnceValue(func() map[string]bool {
	has := map[string]bool{}
	for k, v := range CPUFeatures() {
		has[k] = v == "1"
	}
	return has
})

// repackable reports whether ggml's CPU_REPACK buffer holds a matrix of
// type t and dims in a layout of its own on this CPU: the conditions of
// the release's repack.cpp (ggml_repack_get_optimal_repack_type), which
// a tensor set there must meet (it has no fallback). Beside the ollama
// copy's it repacks MXFP4 (AVX2, or NEON with dot products) and, on ARM,
// Q5_K, Q6_K and Q8_0.
func repackable(t engine.DType, dims []uint64) bool {
	if len(dims) != 2 || dims[1]%8 != 0 || dims[0]%8 != 0 {
		return false
	}
	has := cpuHas()
	avx2, arm := has["AVX2"], has["NEON"]
	armAny := arm && (has["MATMUL_INT8"] || has["DOTPROD"])
	switch t {
	case engine.Q4_0, engine.Q4_K:
		return avx2 || armAny
	case engine.IQ4_NL, engine.MXFP4:
		return avx2 || arm && has["DOTPROD"]
	case engine.Q5_K, engine.Q6_K, engine.Q8_0:
		return armAny
	case engine.Q2_K:
		return has["AVX512"]
	}
	return false
}
