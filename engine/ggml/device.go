package ggml

/*
#include <stddef.h>
#include <stdlib.h>

// ggml-backend.h: the devices ggml registered (the CPU, built in; GPUs
// from backend libraries loaded from a directory, or Metal built in).
typedef struct ggml_backend_device * ggml_backend_dev_t;
enum { DEVT_CPU = 0, DEVT_GPU = 1, DEVT_IGPU = 2 };
extern ggml_backend_dev_t ggml_backend_dev_by_type(int type);
extern const char * ggml_backend_dev_name(ggml_backend_dev_t device);
extern const char * ggml_backend_dev_description(ggml_backend_dev_t device);
extern void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t * free, size_t * total);
extern void ggml_backend_load_all_from_path(const char * dir_path);

// ggml_backend_get_features: the CPU backend's compiled-in features
// (AVX2=1, AVX512=1, REPACK=1...), through its registry.
typedef struct ggml_backend_reg * ggml_backend_reg_t;
struct feature { const char * name; const char * value; };
extern ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);
extern void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
static struct feature * cpu_features(void) {
	ggml_backend_dev_t dev = ggml_backend_dev_by_type(DEVT_CPU);
	if (dev == NULL) return NULL;
	typedef struct feature * (*features_fn)(ggml_backend_reg_t);
	ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
	features_fn fn = (features_fn) ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
	return fn == NULL ? NULL : fn(reg);
}
static struct feature * feature_at(struct feature * f, int i) { return &f[i]; }
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/stratanet/strata/engine"
)

// DeviceInfo is the device a stage computes on.
type DeviceInfo struct {
	// Name is ggml's name of the device: "CPU", "CUDA0", "Metal"...
	Name string
	// Description is the backend's description of the device: the GPU's
	// model ("NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"),
	// or the CPU's.
	Description string
	// Memory is the device's own memory in bytes; 0 for the CPU, whose
	// memory is the host's.
	Memory int64
}

// maxLabel is the longest engine label a heartbeat carries
// (swarm.MaxEngineLen).
const maxLabel = 32

// Engine is the label engine.Info.Engine gives a stage on this device:
// "ggml-CPU", or for a GPU its name and as much of its model as fits
// the heartbeat's 32 bytes, whole words and without a parenthesised
// detail ("ggml-Vulkan0 llvmpipe", "ggml-CUDA0 NVIDIA H100 80GB HBM3"),
// so that status and the dashboard say which device computes.
func (d DeviceInfo) Engine() string {
	label := "ggml-" + d.Name
	if d.Name == "CPU" || d.Description == "" {
		return label
	}
	desc := d.Description
	if i := strings.Index(desc, " ("); i >= 0 {
		desc = desc[:i]
	}
	words := strings.Fields(desc)
	for len(words) > 0 && len(label)+1+len(strings.Join(words, " ")) > maxLabel {
		words = words[:len(words)-1]
	}
	if len(words) > 0 {
		label += " " + strings.Join(words, " ")
	}
	return label
}

// deviceInfo describes dev, with its memory unless it is the CPU.
func deviceInfo(dev C.ggml_backend_dev_t) DeviceInfo {
	info := DeviceInfo{Name: C.GoString(C.ggml_backend_dev_name(dev))}
	if desc := C.ggml_backend_dev_description(dev); desc != nil {
		info.Description = C.GoString(desc)
	}
	if info.Name != "CPU" {
		var free, total C.size_t
		C.ggml_backend_dev_memory(dev, &free, &total)
		info.Memory = int64(total)
	}
	return info
}

var libDirs sync.Map // dir → struct{}: loaded

// LoadLibDir loads ggml's backend libraries (libggml-cuda.so and the
// like) from dir, once per process however often it is called: ggml
// registers a library's devices again on every load. Stages opened after
// it find its devices without WithLibDir.
func LoadLibDir(dir string) {
	loadBackends()
	if dir == "" {
		return
	}
	if _, done := libDirs.LoadOrStore(libKey(dir), struct{}{}); done {
		return
	}
	cdir := C.CString(dir)
	defer C.free(unsafe.Pointer(cdir))
	C.ggml_backend_load_all_from_path(cdir)
}

// CPUFeatures lists what ggml's CPU backend was compiled with, as ggml
// reports it: the SIMD kernels (SSE3, AVX, AVX2, AVX512, AVX512_VNNI...)
// and REPACK, the repacked weight layouts. ollama's cgo build compiles one
// baseline x86-64 variant unless CGO_CFLAGS say otherwise (make build-ggml
// builds for the host); this is how to check what a binary has.
func CPUFeatures() map[string]string {
	loadBackends()
	out := map[string]string{}
	f := C.cpu_features()
	if f == nil {
		return out
	}
	for i := C.int(0); ; i++ {
		e := C.feature_at(f, i)
		if e.name == nil {
			return out
		}
		out[C.GoString(e.name)] = C.GoString(e.value)
	}
}

// Probe reports the device a stage opened WithDevice(d) would compute on
// (load GPU libraries with LoadLibDir first).
func Probe(d Device) (DeviceInfo, error) {
	dev := pick(d)
	if dev == nil {
		return DeviceInfo{}, fmt.Errorf("%w: no %s device%s", ErrGGML, d, noDeviceHint())
	}
	return deviceInfo(dev), nil
}

// pick is the device WithDevice(d) computes on, nil if there is none:
// GPU takes a discrete GPU, else an integrated one (ggml-vulkan types an
// APU's or a laptop's GPU IGPU); Auto takes that, else the CPU.
func pick(d Device) C.ggml_backend_dev_t {
	loadBackends()
	gpu := func() C.ggml_backend_dev_t {
		if dev := C.ggml_backend_dev_by_type(C.DEVT_GPU); dev != nil {
			return dev
		}
		return C.ggml_backend_dev_by_type(C.DEVT_IGPU)
	}
	switch d {
	case Auto:
		if dev := gpu(); dev != nil {
			return dev
		}
		return C.ggml_backend_dev_by_type(C.DEVT_CPU)
	case CPU:
		return C.ggml_backend_dev_by_type(C.DEVT_CPU)
	case GPU:
		return gpu()
	}
	return nil
}

// Opener opens stages on device d, as node.Engine's Open wants them: one
// layer range of a GGUF file at a time, with threads CPU threads (0:
// GOMAXPROCS).
func Opener(d Device) func(path string, lo, hi, threads int) (engine.Stage, error) {
	return func(path string, lo, hi, threads int) (engine.Stage, error) {
		s, err := Open(path, WithRange(lo, hi), WithThreads(threads), WithDevice(d))
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}
