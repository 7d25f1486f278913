package refcheck

/*
#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

// As in ggml.h of the ggml that the pinned ollama module vendors.
struct ggml_type_traits {
	const char * type_name;
	int64_t blck_size;
	int64_t blck_size_interleave;
	size_t type_size;
	bool is_quantized;
	void (*to_float)(const void * x, float * y, int64_t k);
	void (*from_float_ref)(const float * x, void * y, int64_t k);
};
extern const struct ggml_type_traits * ggml_get_type_traits(int type);
extern size_t ggml_quantize_chunk(int type, const float * src, void * dst, int64_t start, int64_t nrows, int64_t n_per_row, const float * imatrix);

static void to_float(int type, const void * x, float * y, int64_t k) {
	ggml_get_type_traits(type)->to_float(x, y, k);
}

// As in ggml-cpu.h.
struct ggml_type_traits_cpu {
	void (*from_float)(const float * x, void * y, int64_t k);
	void (*vec_dot)(int n, float * s, size_t bs, const void * x, size_t bx, const void * y, size_t by, int nrc);
	int vec_dot_type;
	int64_t nrows;
};
extern const struct ggml_type_traits_cpu * ggml_get_type_traits_cpu(int type);
extern void ggml_cpu_init(void);

// vec_dot is ggml-cpu's dot product of one row x of type with the
// activations y, quantised first to the type's vec_dot_type into ybuf
// (as a matrix product does).
static float vec_dot(int type, int n, const void * x, const float * y, void * ybuf) {
	ggml_cpu_init();
	const struct ggml_type_traits_cpu * t = ggml_get_type_traits_cpu(type);
	ggml_get_type_traits_cpu(t->vec_dot_type)->from_float(y, ybuf, n);
	float s;
	t->vec_dot(n, &s, 0, x, 0, ybuf, 0, 1);
	return s;
}
*/
import "C"

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"unsafe"

	"github.com/stratanet/strata/engine"
)

// ggmlQuantize quantises rows×cols values with ggml's own quantizer (the
// one llama-quantize uses, without an importance matrix).
func ggmlQuantize(t engine.DType, x []float32, rows, cols int) []byte {
	tr := C.ggml_get_type_traits(C.int(t))
	size := int(tr.type_size) * cols / int(tr.blck_size) * rows
	out := make([]byte, size)
	n := C.ggml_quantize_chunk(C.int(t), (*C.float)(unsafe.Pointer(&x[0])), unsafe.Pointer(&out[0]), 0, C.int64_t(rows), C.int64_t(cols), nil)
	if int(n) != size {
		panic(fmt.Sprintf("ggml_quantize_chunk(%s) wrote %d bytes, want %d", t, n, size))
	}
	return out
}

// ggmlDequantize is ggml's to_float for type t.
func ggmlDequantize(t engine.DType, raw []byte, n int) []float32 {
	out := make([]float32, n)
	C.to_float(C.int(t), unsafe.Pointer(&raw[0]), (*C.float)(unsafe.Pointer(&out[0])), C.int64_t(n))
	return out
}

// ggmlVecDot is ggml-cpu's dot product of the packed row w (cols values
// of type t) with x, x quantised as ggml's matrix product quantises it.
func ggmlVecDot(t engine.DType, w []byte, x []float32) float32 {
	buf := make([]byte, 2*len(x)+64) // room for any vec_dot_type (Q8_0: 34 bytes per 32)
	return float32(C.vec_dot(C.int(t), C.int(len(x)), unsafe.Pointer(&w[0]), (*C.float)(unsafe.Pointer(&x[0])), unsafe.Pointer(&buf[0])))
}

// quantizeModel rewrites the F32 model at src twice: every 2-D weight
// quantised by ggml to the type pick chooses for it (or left F32), and the
// same quantised weights dequantised back to F32 by ggml, the tight
// reference for a quantised forward pass. Keys in extra are added to both.
func quantizeModel(src, quantPath, dequantPath string, pick func(name string, cols int) engine.DType, extra ...engine.KV) error {
	f, fh, err := engine.OpenFile(src)
	if err != nil {
		return err
	}
	defer fh.Close()
	var qts, dts []engine.WriteTensor
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		raw := make([]byte, ti.Size)
		if err := f.ReadTensor(ti, raw); err != nil {
			return err
		}
		n := int(ti.Elements())
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		typ := engine.F32
		// Matrices and 3-D expert tensors; llama-quantize leaves the
		// MoE router (ffn_gate_inp) F32.
		if len(ti.Dims) >= 2 && !strings.Contains(ti.Name, "ffn_gate_inp") {
			typ = pick(ti.Name, int(ti.Dims[0]))
		}
		q, deq := raw, vals
		if typ != engine.F32 {
			q = ggmlQuantize(typ, vals, n/int(ti.Dims[0]), int(ti.Dims[0]))
			deq = ggmlDequantize(typ, q, n)
		}
		qts = append(qts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: typ, Data: writeBytes(q)})
		dts = append(dts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: engine.F32, Data: writeBytes(f32Bytes(deq))})
	}
	kvs := append(append([]engine.KV(nil), f.KV...), extra...)
	if err := writeFile(quantPath, kvs, qts); err != nil {
		return err
	}
	return writeFile(dequantPath, kvs, dts)
}

func writeBytes(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.Copy(w, bytes.NewReader(b)); return err }
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func writeFile(path string, kvs []engine.KV, ts []engine.WriteTensor) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := engine.WriteGGUF(out, kvs, ts); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
