package engine

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// WriteTensor is one tensor to write: its data is produced by Data, which
// must write exactly the bytes that Dims and Type call for (so that large
// models stream to disk without being held in memory).
type WriteTensor struct {
	Name string
	Dims []uint64 // ggml order: Dims[0] is contiguous
	Type DType
	Data func(w io.Writer) error
}

// WriteGGUF writes a GGUF v3 file, aligned as kvs' general.alignment (a
// uint32 power of two) says, else to GGUF's default 32 bytes.
func WriteGGUF(w io.Writer, kvs []KV, tensors []WriteTensor) error {
	alignment := uint64(ggufDefaultAlign)
	for _, kv := range kvs {
		if kv.Key != "general.alignment" {
			continue
		}
		a, ok := kv.Value.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return fmt.Errorf("%w: metadata %q: %v (%T) is not a uint32 power of two", ErrShape, kv.Key, kv.Value, kv.Value)
		}
		alignment = uint64(a)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	le := binary.LittleEndian
	var b8 [8]byte
	u32 := func(v uint32) { le.PutUint32(b8[:], v); cw.Write(b8[:4]) }
	u64 := func(v uint64) { le.PutUint64(b8[:], v); cw.Write(b8[:8]) }
	str := func(s string) { u64(uint64(len(s))); io.WriteString(cw, s) }

	u32(ggufMagic)
	u32(3)
	u64(uint64(len(tensors)))
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.Key)
		if err := writeValue(cw, kv.Value); err != nil {
			return fmt.Errorf("engine: metadata %q: %w", kv.Key, err)
		}
	}
	sizes := make([]uint64, len(tensors))
	off := uint64(0)
	for i, t := range tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		if len(t.Dims) == 0 || len(t.Dims) > maxDims {
			return fmt.Errorf("%w: tensor %q: %d dimensions", ErrShape, t.Name, len(t.Dims))
		}
		rb, ok := rowBytes(t.Type, t.Dims[0])
		if !ok {
			return fmt.Errorf("%w: tensor %q: %d columns of %s", ErrShape, t.Name, t.Dims[0], t.Type)
		}
		sizes[i] = rb * (n / t.Dims[0])
		str(t.Name)
		u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			u64(d)
		}
		u32(uint32(t.Type))
		u64(off)
		off += align(sizes[i], alignment)
	}
	zero := make([]byte, alignment)
	pad := func() { cw.Write(zero[:align(uint64(cw.n), alignment)-uint64(cw.n)]) }
	pad()
	for i, t := range tensors {
		start := cw.n
		if err := t.Data(cw); err != nil {
			return fmt.Errorf("engine: tensor %q: %w", t.Name, err)
		}
		if uint64(cw.n-start) != sizes[i] {
			return fmt.Errorf("%w: tensor %q: wrote %d bytes, want %d", ErrShape, t.Name, cw.n-start, sizes[i])
		}
		pad()
	}
	if cw.err != nil {
		return cw.err
	}
	return bw.Flush()
}

func align(n, a uint64) uint64 { return (n + a - 1) / a * a }

// WriteSplitGGUF writes kvs and tensors as llama-gguf-split does with
// --split-max-tensors maxTensors: parts of at most maxTensors tensors, in
// order, each a GGUF file with its own tensor table and data; the first
// holds all of kvs, every part split.no, split.count and
// split.tensors.count. create opens part i of n (see SplitPath for the
// names); WriteSplitGGUF closes each part it wrote.
func WriteSplitGGUF(create func(i, n int) (io.WriteCloser, error), kvs []KV, tensors []WriteTensor, maxTensors int) error {
	if maxTensors <= 0 {
		return fmt.Errorf("%w: split into parts of %d tensors", ErrShape, maxTensors)
	}
	for _, kv := range kvs {
		if kv.Key == keySplitNo || kv.Key == keySplitCount || kv.Key == keySplitTensors {
			return fmt.Errorf("%w: metadata %q: the model is already split", ErrShape, kv.Key)
		}
	}
	n := max(1, (len(tensors)+maxTensors-1)/maxTensors)
	if n > math.MaxUint16 {
		return fmt.Errorf("%w: %d parts (split.count is a uint16)", ErrShape, n)
	}
	for i := 0; i < n; i++ {
		var meta []KV
		if i == 0 {
			meta = append(meta, kvs...)
		}
		meta = append(meta, KV{keySplitNo, uint16(i)}, KV{keySplitCount, uint16(n)}, KV{keySplitTensors, int32(len(tensors))})
		w, err := create(i, n)
		if err != nil {
			return err
		}
		err = WriteGGUF(w, meta, tensors[min(i*maxTensors, len(tensors)):min((i+1)*maxTensors, len(tensors))])
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("engine: split part %d of %d: %w", i+1, n, err)
		}
	}
	return nil
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

func writeValue(w io.Writer, v any) error {
	le := binary.LittleEndian
	put := func(t ValueType, data any) error {
		if err := binary.Write(w, le, uint32(t)); err != nil {
			return err
		}
		return binary.Write(w, le, data)
	}
	putArr := func(et ValueType, n int, data any) error {
		binary.Write(w, le, uint32(TypeArray))
		binary.Write(w, le, uint32(et))
		binary.Write(w, le, uint64(n))
		return binary.Write(w, le, data)
	}
	switch x := v.(type) {
	case uint8:
		return put(TypeUint8, x)
	case int8:
		return put(TypeInt8, x)
	case uint16:
		return put(TypeUint16, x)
	case int16:
		return put(TypeInt16, x)
	case uint32:
		return put(TypeUint32, x)
	case int32:
		return put(TypeInt32, x)
	case float32:
		return put(TypeFloat32, math.Float32bits(x))
	case bool:
		return put(TypeBool, x)
	case uint64:
		return put(TypeUint64, x)
	case int64:
		return put(TypeInt64, x)
	case float64:
		return put(TypeFloat64, x)
	case string:
		binary.Write(w, le, uint32(TypeString))
		binary.Write(w, le, uint64(len(x)))
		_, err := io.WriteString(w, x)
		return err
	case []string:
		binary.Write(w, le, uint32(TypeArray))
		binary.Write(w, le, uint32(TypeString))
		binary.Write(w, le, uint64(len(x)))
		for _, s := range x {
			binary.Write(w, le, uint64(len(s)))
			if _, err := io.WriteString(w, s); err != nil {
				return err
			}
		}
		return nil
	case []float32:
		return putArr(TypeFloat32, len(x), x)
	case []int32:
		return putArr(TypeInt32, len(x), x)
	case []uint32:
		return putArr(TypeUint32, len(x), x)
	case []uint8:
		return putArr(TypeUint8, len(x), x)
	case []int8:
		return putArr(TypeInt8, len(x), x)
	case []uint16:
		return putArr(TypeUint16, len(x), x)
	case []int16:
		return putArr(TypeInt16, len(x), x)
	case []uint64:
		return putArr(TypeUint64, len(x), x)
	case []int64:
		return putArr(TypeInt64, len(x), x)
	case []float64:
		return putArr(TypeFloat64, len(x), x)
	case []bool:
		return putArr(TypeBool, len(x), x)
	}
	return fmt.Errorf("unsupported metadata type %T", v)
}
