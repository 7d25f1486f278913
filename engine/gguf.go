package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"math"
	"os"
)

const (
	ggufMagic        = 0x46554747 // "GGUF" read as a little-endian uint32
	ggufDefaultAlign = 32
	maxDims          = 4 // GGML_MAX_DIMS
	maxStringLen     = 1 << 28
)

// ValueType is the type of a GGUF metadata value.
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8 ValueType = iota
	TypeInt8
	TypeUint16
	TypeInt16
	TypeUint32
	TypeInt32
	TypeFloat32
	TypeBool
	TypeString
	TypeArray
	TypeUint64
	TypeInt64
	TypeFloat64
)

var valueSize = [...]int64{1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8} // minimum encoded size

// KV is one metadata entry. Value holds uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64 or float64, or a slice of one
// of those for an array.
type KV struct {
	Key   string
	Value any
}

// TensorInfo is one entry of a GGUF tensor table.
type TensorInfo struct {
	Name string
	// Dims are ggml's ne: Dims[0] is the contiguous (innermost) dimension,
	// so a weight matrix of r rows and c columns is Dims = [c, r].
	Dims   []uint64
	Type   DType
	Offset int64 // absolute offset of the data in its part's file
	Size   int64 // bytes of data; 0 when the type's layout is unknown
	// Part is the index in File.Parts of the file holding the data: 0 in
	// a single file, the part's split.no in a split model.
	Part int
}

// Elements is the number of elements.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// File is a parsed GGUF header: metadata and tensor table. It reads tensor
// data only when asked, by offset. A split model (see ReadSplit) is one
// File over several parts: the metadata of the first, the tensors of all.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  int64 // of the first part
	DataOffset int64 // start of the first part's tensor data section
	Size       int64 // bytes of all parts together
	Parts      []Part

	readers  []io.ReaderAt // one per part
	kv       map[string]int
	tensors  map[string]int
	headerFP [sha256.Size]byte
}

// Part is one file of a model. A single GGUF file is one part; a model
// split by llama-gguf-split (name-00001-of-0000N.gguf) has N, each with
// its own header, tensor table and data, the metadata in the first.
type Part struct {
	Path       string // empty when read from an io.ReaderAt
	Size       int64
	Alignment  int64
	DataOffset int64
	Tensors    int // tensors whose data this part holds
}

// OpenFile opens path and parses its GGUF header. The caller closes the
// returned *os.File once done reading tensors. When path is one part of a
// split model (PREFIX-00002-of-00005.gguf), the File is the whole model:
// OpenFile finds and parses the other parts, which it reopens for each
// read, so the returned *os.File is still all there is to close.
func OpenFile(path string) (*File, *os.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, err
	}
	f, err := ReadFile(fh, st.Size())
	if err == nil {
		var no, count int
		if no, count, _, err = splitKeys(f); err == nil {
			if count > 1 {
				f, err = openSplit(path, fh, f, no, count)
			} else {
				f.Parts[0].Path = path
			}
		}
	}
	if err != nil {
		fh.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, fh, nil
}

// hdrReader reads the header sequentially, hashing what it consumes and
// checking every length against what is left of the file, so that no
// declared size can make it allocate more than the file holds.
type hdrReader struct {
	br   io.Reader
	h    hash.Hash
	pos  int64
	size int64
	buf  [8]byte
	what string // what is being read, for errors
}

// aheadReader reads r sequentially in reads that double from 4 KiB to
// 64 KiB, so that parsing a header reads at most about twice the header,
// not a fixed 64 KiB of tensor data past a small one (as with the many
// parts of a split model).
type aheadReader struct {
	r         io.ReaderAt
	off, size int64
	buf       []byte
	pos       int
	next      int
}

func (a *aheadReader) Read(p []byte) (int, error) {
	if a.pos == len(a.buf) {
		n := int(min(int64(a.next), a.size-a.off))
		if n <= 0 {
			return 0, io.EOF
		}
		a.next = min(2*a.next, 64<<10)
		if cap(a.buf) < n {
			a.buf = make([]byte, n)
		}
		a.buf = a.buf[:n]
		if _, err := a.r.ReadAt(a.buf, a.off); err != nil && !(err == io.EOF && a.off+int64(n) == a.size) {
			a.buf = a.buf[:0]
			a.pos = 0
			return 0, err
		}
		a.off += int64(n)
		a.pos = 0
	}
	n := copy(p, a.buf[a.pos:])
	a.pos += n
	return n, nil
}

func (r *hdrReader) corrupt(format string, a ...any) error {
	return fmt.Errorf("%w: %s at offset %d: %s", ErrCorrupt, r.what, r.pos, fmt.Sprintf(format, a...))
}

func (r *hdrReader) read(p []byte) error {
	if int64(len(p)) > r.size-r.pos {
		return r.corrupt("truncated (need %d bytes, %d left)", len(p), r.size-r.pos)
	}
	if _, err := io.ReadFull(r.br, p); err != nil {
		return r.corrupt("read: %v", err)
	}
	r.h.Write(p)
	r.pos += int64(len(p))
	return nil
}

func (r *hdrReader) u8() (uint8, error) {
	err := r.read(r.buf[:1])
	return r.buf[0], err
}
func (r *hdrReader) u16() (uint16, error) {
	err := r.read(r.buf[:2])
	return binary.LittleEndian.Uint16(r.buf[:]), err
}
func (r *hdrReader) u32() (uint32, error) {
	err := r.read(r.buf[:4])
	return binary.LittleEndian.Uint32(r.buf[:]), err
}
func (r *hdrReader) u64() (uint64, error) {
	err := r.read(r.buf[:8])
	return binary.LittleEndian.Uint64(r.buf[:]), err
}

func (r *hdrReader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	if n > maxStringLen || int64(n) > r.size-r.pos {
		return "", r.corrupt("string length %d exceeds the file", n)
	}
	b := make([]byte, n)
	if err := r.read(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// count reads an element count and checks that n elements of at least min
// bytes each fit in the rest of the file.
func (r *hdrReader) count(min int64) (int, error) {
	n, err := r.u64()
	if err != nil {
		return 0, err
	}
	if n > uint64(r.size) || int64(n) > (r.size-r.pos)/min {
		return 0, r.corrupt("count %d exceeds the file", n)
	}
	return int(n), nil
}

func (r *hdrReader) scalar(t ValueType) (any, error) {
	switch t {
	case TypeUint8:
		return r.u8()
	case TypeInt8:
		v, err := r.u8()
		return int8(v), err
	case TypeUint16:
		return r.u16()
	case TypeInt16:
		v, err := r.u16()
		return int16(v), err
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		v, err := r.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := r.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := r.u8()
		if err == nil && v > 1 {
			return nil, r.corrupt("bool value %d", v)
		}
		return v == 1, err
	case TypeString:
		return r.str()
	case TypeUint64:
		return r.u64()
	case TypeInt64:
		v, err := r.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := r.u64()
		return math.Float64frombits(v), err
	}
	return nil, r.corrupt("unknown value type %d", t)
}

func (r *hdrReader) value(t ValueType) (any, error) {
	if t != TypeArray {
		return r.scalar(t)
	}
	et, err := r.u32()
	if err != nil {
		return nil, err
	}
	e := ValueType(et)
	if e == TypeArray {
		return nil, r.corrupt("nested arrays are not supported")
	}
	if e > TypeFloat64 {
		return nil, r.corrupt("unknown array element type %d", et)
	}
	n, err := r.count(valueSize[e])
	if err != nil {
		return nil, err
	}
	switch e {
	case TypeString:
		return readArray(r, n, func() (string, error) { return r.str() })
	case TypeFloat32:
		return readArray(r, n, func() (float32, error) { v, err := r.u32(); return math.Float32frombits(v), err })
	case TypeInt32:
		return readArray(r, n, func() (int32, error) { v, err := r.u32(); return int32(v), err })
	case TypeUint32:
		return readArray(r, n, func() (uint32, error) { return r.u32() })
	case TypeUint8:
		return readArray(r, n, func() (uint8, error) { return r.u8() })
	case TypeInt8:
		return readArray(r, n, func() (int8, error) { v, err := r.u8(); return int8(v), err })
	case TypeUint16:
		return readArray(r, n, func() (uint16, error) { return r.u16() })
	case TypeInt16:
		return readArray(r, n, func() (int16, error) { v, err := r.u16(); return int16(v), err })
	case TypeUint64:
		return readArray(r, n, func() (uint64, error) { return r.u64() })
	case TypeInt64:
		return readArray(r, n, func() (int64, error) { v, err := r.u64(); return int64(v), err })
	case TypeFloat64:
		return readArray(r, n, func() (float64, error) { v, err := r.u64(); return math.Float64frombits(v), err })
	default: // TypeBool
		return readArray(r, n, func() (bool, error) {
			v, err := r.scalar(TypeBool)
			b, _ := v.(bool)
			return b, err
		})
	}
}

func readArray[T any](r *hdrReader, n int, next func() (T, error)) ([]T, error) {
	out := make([]T, n)
	for i := range out {
		v, err := next()
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// ReadFile parses the GGUF header (versions 2 and 3) of the size bytes
// behind r. It reads no tensor data. Every malformation is an ErrCorrupt
// naming the key or tensor, never a panic.
func ReadFile(r io.ReaderAt, size int64) (*File, error) {
	hr := &hdrReader{br: &aheadReader{r: r, size: size, next: 4 << 10}, h: sha256.New(), size: size, what: "magic"}
	magic, err := hr.u32()
	if err != nil {
		return nil, err
	}
	if magic != ggufMagic {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], magic)
		return nil, fmt.Errorf("%w: not a GGUF file (its magic is %q, not \"GGUF\")", ErrCorrupt, b[:])
	}
	hr.what = "version"
	f := &File{readers: []io.ReaderAt{r}, Size: size, kv: map[string]int{}, tensors: map[string]int{}, Alignment: ggufDefaultAlign}
	if f.Version, err = hr.u32(); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: GGUF version %d (want 3)", ErrCorrupt, f.Version)
	}
	hr.what = "tensor count"
	nt, err := hr.count(4 + 8 + 4 + 4 + 8 + 8 + 1) // smallest tensor info, name of length 1
	if err != nil {
		return nil, err
	}
	hr.what = "metadata count"
	nkv, err := hr.count(8 + 1 + 4 + 1)
	if err != nil {
		return nil, err
	}
	f.KV = make([]KV, 0, nkv)
	for i := 0; i < nkv; i++ {
		hr.what = fmt.Sprintf("metadata key %d", i)
		key, err := hr.str()
		if err != nil {
			return nil, err
		}
		hr.what = fmt.Sprintf("metadata %q", key)
		if _, dup := f.kv[key]; dup {
			return nil, hr.corrupt("duplicate key")
		}
		t, err := hr.u32()
		if err != nil {
			return nil, err
		}
		v, err := hr.value(ValueType(t))
		if err != nil {
			return nil, err
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, KV{key, v})
	}
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, fmt.Errorf("%w: metadata %q: %v is not a power of two", ErrCorrupt, "general.alignment", v)
		}
		f.Alignment = int64(a)
	}
	f.Tensors = make([]TensorInfo, 0, nt)
	relOffsets := make([]uint64, 0, nt)
	for i := 0; i < nt; i++ {
		hr.what = fmt.Sprintf("tensor %d", i)
		name, err := hr.str()
		if err != nil {
			return nil, err
		}
		hr.what = fmt.Sprintf("tensor %q", name)
		if _, dup := f.tensors[name]; dup || name == "" {
			return nil, hr.corrupt("duplicate or empty name")
		}
		nd, err := hr.u32()
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			return nil, hr.corrupt("%d dimensions", nd)
		}
		ti := TensorInfo{Name: name, Dims: make([]uint64, nd)}
		n := uint64(1)
		for d := range ti.Dims {
			if ti.Dims[d], err = hr.u64(); err != nil {
				return nil, err
			}
			if ti.Dims[d] == 0 || ti.Dims[d] > 1<<40 || n > (1<<50)/ti.Dims[d] {
				return nil, hr.corrupt("dimensions %v overflow", ti.Dims[:d+1])
			}
			n *= ti.Dims[d]
		}
		t, err := hr.u32()
		if err != nil {
			return nil, err
		}
		ti.Type = DType(t)
		off, err := hr.u64()
		if err != nil {
			return nil, err
		}
		if off%uint64(f.Alignment) != 0 || off > uint64(size) {
			return nil, hr.corrupt("data offset %d is misaligned or past the end", off)
		}
		if _, known := dtypes[ti.Type]; known {
			b, ok := rowBytes(ti.Type, ti.Dims[0])
			if !ok {
				return nil, hr.corrupt("row of %d elements is not whole %s blocks", ti.Dims[0], ti.Type)
			}
			ti.Size = int64(b * (n / ti.Dims[0]))
		}
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
		relOffsets = append(relOffsets, off)
	}
	f.DataOffset = (hr.pos + f.Alignment - 1) / f.Alignment * f.Alignment
	for i := range f.Tensors {
		t := &f.Tensors[i]
		t.Offset = f.DataOffset + int64(relOffsets[i])
		if t.Offset > size || t.Size > size-t.Offset {
			return nil, fmt.Errorf("%w: tensor %q: data [%d, +%d) past the end of the file (%d bytes)", ErrCorrupt, t.Name, t.Offset, t.Size, size)
		}
	}
	copy(f.headerFP[:], hr.h.Sum(nil))
	f.Parts = []Part{{Size: size, Alignment: f.Alignment, DataOffset: f.DataOffset, Tensors: len(f.Tensors)}}
	return f, nil
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (any, bool) {
	i, ok := f.kv[key]
	if !ok {
		return nil, false
	}
	return f.KV[i].Value, true
}

// Tensor returns the tensor table entry of name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// String returns a string key.
func (f *File) String(key string) (string, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", fmt.Errorf("%w: missing key %q", ErrCorrupt, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: key %q is %T, want string", ErrCorrupt, key, v)
	}
	return s, nil
}

// Uint returns an integer key of any integer type, checked to be >= 0.
func (f *File) Uint(key string) (uint64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: missing key %q", ErrCorrupt, key)
	}
	var n int64
	switch x := v.(type) {
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("%w: key %q = %d is too large", ErrCorrupt, key, x)
		}
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	default:
		return 0, fmt.Errorf("%w: key %q is %T, want an integer", ErrCorrupt, key, v)
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: key %q = %d is negative", ErrCorrupt, key, n)
	}
	return uint64(n), nil
}

// Float returns a float key (float32 or float64).
func (f *File) Float(key string) (float64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("%w: missing key %q", ErrCorrupt, key)
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("%w: key %q is %T, want a float", ErrCorrupt, key, v)
}

// readAt reads len(p) bytes of t's data from off on, from the part that
// holds them.
func (f *File) readAt(t *TensorInfo, p []byte, off int64) error {
	if t.Part < 0 || t.Part >= len(f.readers) {
		return fmt.Errorf("%w: tensor %q in part %d of %d", ErrSplitPart, t.Name, t.Part+1, len(f.readers))
	}
	_, err := f.readers[t.Part].ReadAt(p, t.Offset+off)
	return err
}

// ReadTensor reads t's data (t.Size bytes, into p[:t.Size]) by offset from
// the part of the model that holds it, for backends that place tensors
// themselves.
func (f *File) ReadTensor(t *TensorInfo, p []byte) error {
	if int64(len(p)) < t.Size {
		return fmt.Errorf("%w: tensor %q: %d bytes, buffer of %d", ErrShape, t.Name, t.Size, len(p))
	}
	if err := f.readAt(t, p[:t.Size], 0); err != nil {
		return fmt.Errorf("%w: tensor %q: reading %d bytes at %d of part %d: %v", ErrCorrupt, t.Name, t.Size, t.Offset, t.Part+1, err)
	}
	return nil
}

// readTensorBytes reads a tensor's data by offset.
func (f *File) readTensorBytes(t *TensorInfo) ([]byte, error) {
	b := allocWeights(int(t.Size))
	if err := f.readAt(t, b, 0); err != nil {
		return nil, fmt.Errorf("%w: tensor %q: reading %d bytes at %d: %v", ErrCorrupt, t.Name, t.Size, t.Offset, err)
	}
	return b, nil
}
