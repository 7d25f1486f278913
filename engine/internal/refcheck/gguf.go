package refcheck

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

// The gguf.h declarations used, as in the ggml that ollama vendors.
struct ggml_context;
struct ggml_tensor;
struct gguf_context;
struct gguf_init_params { bool no_alloc; struct ggml_context ** ctx; };
extern struct gguf_context * gguf_init_from_file(const char * fname, struct gguf_init_params params);
extern void gguf_free(struct gguf_context * ctx);
extern void ggml_free(struct ggml_context * ctx);
extern size_t gguf_get_alignment(const struct gguf_context * ctx);
extern size_t gguf_get_data_offset(const struct gguf_context * ctx);
extern int64_t gguf_find_key(const struct gguf_context * ctx, const char * key);
extern int gguf_get_kv_type(const struct gguf_context * ctx, int64_t key_id);
extern uint16_t gguf_get_val_u16(const struct gguf_context * ctx, int64_t key_id);
extern int32_t gguf_get_val_i32(const struct gguf_context * ctx, int64_t key_id);
extern uint32_t gguf_get_val_u32(const struct gguf_context * ctx, int64_t key_id);
extern int64_t gguf_get_n_tensors(const struct gguf_context * ctx);
extern size_t gguf_get_tensor_offset(const struct gguf_context * ctx, int64_t tensor_id);
extern const char * gguf_get_tensor_name(const struct gguf_context * ctx, int64_t tensor_id);
extern size_t gguf_get_tensor_size(const struct gguf_context * ctx, int64_t tensor_id);
extern struct ggml_tensor * ggml_get_tensor(struct ggml_context * ctx, const char * name);
extern void * ggml_get_data(const struct ggml_tensor * tensor);
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// ggufKV is one integer metadata value as ggml's gguf reader sees it: its
// GGUF type and value (only the uint16, int32 and uint32 types are read).
type ggufKV struct {
	Type  int
	Value int64
}

// ggufTensor is one tensor as ggml's gguf reader places it.
type ggufTensor struct {
	Name   string
	Offset int64 // absolute, in the file
	Data   []byte
}

// ggufFile is what ggml's gguf_init_from_file reads from one file.
type ggufFile struct {
	Alignment, DataOffset int64
	KV                    map[string]ggufKV
	Tensors               []ggufTensor
}

// readGGUF parses path with ggml's own gguf reader, loading the tensors'
// data, and returns the given keys (absent ones left out) and the tensors.
func readGGUF(path string, keys ...string) (*ggufFile, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var m *C.struct_ggml_context
	g := C.gguf_init_from_file(cpath, C.struct_gguf_init_params{no_alloc: false, ctx: &m})
	if g == nil {
		return nil, fmt.Errorf("ggml: gguf_init_from_file cannot read %s", path)
	}
	defer func() {
		C.ggml_free(m)
		C.gguf_free(g)
	}()
	out := &ggufFile{Alignment: int64(C.gguf_get_alignment(g)), DataOffset: int64(C.gguf_get_data_offset(g)), KV: map[string]ggufKV{}}
	for _, k := range keys {
		ck := C.CString(k)
		id := C.gguf_find_key(g, ck)
		C.free(unsafe.Pointer(ck))
		if id < 0 {
			continue
		}
		kv := ggufKV{Type: int(C.gguf_get_kv_type(g, id))}
		switch kv.Type {
		case 2: // GGUF_TYPE_UINT16
			kv.Value = int64(C.gguf_get_val_u16(g, id))
		case 4: // GGUF_TYPE_UINT32
			kv.Value = int64(C.gguf_get_val_u32(g, id))
		case 5: // GGUF_TYPE_INT32
			kv.Value = int64(C.gguf_get_val_i32(g, id))
		}
		out.KV[k] = kv
	}
	for i := C.int64_t(0); i < C.gguf_get_n_tensors(g); i++ {
		name := C.gguf_get_tensor_name(g, i)
		t := C.ggml_get_tensor(m, name)
		if t == nil {
			return nil, fmt.Errorf("ggml: %s: tensor %s not loaded", path, C.GoString(name))
		}
		size := C.gguf_get_tensor_size(g, i)
		out.Tensors = append(out.Tensors, ggufTensor{Name: C.GoString(name),
			Offset: out.DataOffset + int64(C.gguf_get_tensor_offset(g, i)),
			Data:   C.GoBytes(C.ggml_get_data(t), C.int(size))})
	}
	return out, nil
}
