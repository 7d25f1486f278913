package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
)

func writeParts(t testing.TB, kvs []KV, ts []WriteTensor) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteGGUF(&b, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func genBytes(t testing.TB, c GenConfig) []byte {
	t.Helper()
	kvs, ts, err := genParts(c)
	if err != nil {
		t.Fatal(err)
	}
	return writeParts(t, kvs, ts)
}

func TestGGUFRoundTrip(t *testing.T) {
	kvs := []KV{
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"b", true},
		{"s", "héllo"}, {"u64", uint64(1) << 40}, {"i64", int64(-1) << 40}, {"f64", math.Pi},
		{"as", []string{"a", "", "ccc"}}, {"af", []float32{1, -2}}, {"ai", []int32{3, -4}},
		{"au8", []uint8{1, 2}}, {"ab", []bool{true, false}}, {"af64", []float64{0.25}},
	}
	vals := []float32{0.5, -1.25, 3, 1e-3, -7, 100, 0, 2.5}
	row := make([]float32, 64)
	for i := range row {
		row[i] = vals[i%len(vals)] * float32(i+1) / 16
	}
	var ts []WriteTensor
	for _, dt := range []DType{F32, F16, BF16, Q8_0} {
		dt := dt
		ts = append(ts, WriteTensor{Name: "t." + dt.String(), Dims: []uint64{32, 2}, Type: dt,
			Data: func(w io.Writer) error { _, err := w.Write(encodeRow(nil, row, dt)); return err }})
	}
	data := writeParts(t, kvs, ts)
	f, err := ReadFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || !reflect.DeepEqual(f.KV, kvs) {
		t.Fatalf("metadata round trip:\n got %v\nwant %v", f.KV, kvs)
	}
	l := &loader{f: f}
	for _, dt := range []DType{F32, F16, BF16, Q8_0} {
		m, err := l.matrix("t."+dt.String(), 2, 32, false)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, 64)
		m.row(0, got[:32])
		m.row(1, got[32:])
		for i, v := range got {
			want := row[i]
			switch dt {
			case F16:
				want = f16ToF32(f32ToF16(want))
			case BF16:
				want = bf16ToF32(f32ToBF16(want))
			}
			tol := 0.0
			if dt == Q8_0 { // half a quantisation step of the block
				amax := 0.0
				for _, x := range row[i/32*32 : i/32*32+32] {
					amax = math.Max(amax, math.Abs(float64(x)))
				}
				tol = amax / 127 * 0.51
			}
			if math.Abs(float64(v-want)) > tol {
				t.Errorf("%s[%d] = %v, want %v", dt, i, v, want)
			}
		}
		if ti, _ := f.Tensor("t." + dt.String()); ti.Offset%32 != 0 {
			t.Errorf("%s offset %d not aligned", dt, ti.Offset)
		}
	}
	// The generator's own output reads back into the same config.
	c := testShapes["qwen2"]
	f2, err := ReadFile(bytes.NewReader(genBytes(t, c)), int64(len(genBytes(t, c))))
	if err != nil {
		t.Fatal(err)
	}
	hp, err := ReadHParams(f2)
	if err != nil {
		t.Fatal(err)
	}
	if hp.Layers != c.Layers || hp.Dim != c.Dim || hp.Heads != c.Heads || hp.KVHeads != c.KVHeads || hp.FFN != c.FFN ||
		hp.Vocab != c.Vocab || hp.RopeBase != 1e6 || hp.NormEps != 1e-6 || !hp.NeoxRope || !hp.QKVBias {
		t.Errorf("hparams %+v from %+v", hp, c)
	}
}

func TestHalfConversions(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := f16ToF32(uint16(h))
		if f != f {
			continue
		}
		if back := f32ToF16(f); back != uint16(h) {
			t.Fatalf("f16 %#04x -> %v -> %#04x", h, f, back)
		}
		if b := uint16(h); bf16ToF32(b) == bf16ToF32(b) && f32ToBF16(bf16ToF32(b)) != b {
			t.Fatalf("bf16 %#04x round trip", h)
		}
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {65504, 0x7bff}, {65520, 0x7c00}, {1.0009765625 + 1.0/4096, 0x3c01}, {5.960464477539063e-08, 1}, {2e-8, 0}} {
		if got := f32ToF16(c.f); got != c.h {
			t.Errorf("f32ToF16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

// recReader records every ReadAt.
type recReader struct {
	r     io.ReaderAt
	mu    sync.Mutex
	reads [][2]int64
}

func (r *recReader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.reads = append(r.reads, [2]int64{off, int64(len(p))})
	r.mu.Unlock()
	return r.r.ReadAt(p, off)
}

// TestRangeReadsOnlyItsTensors: a stage reads the header, 32-byte
// fingerprint samples, and exactly its own tensors, each once.
func TestRangeReadsOnlyItsTensors(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 6, Dim: 64, Heads: 4, FFN: 128, Vocab: 1000, Seed: 3}
	data := genBytes(t, c)
	f, err := ReadFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 2}, {2, 4}, {4, 6}, {0, 6}, {3, 4}} {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			rr := &recReader{r: bytes.NewReader(data)}
			s, err := OpenReaderAt(rr, int64(len(data)), WithRange(r[0], r[1]), WithThreads(1))
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			want := map[string]bool{}
			if r[0] == 0 {
				want["token_embd.weight"] = true
			}
			for l := r[0]; l < r[1]; l++ {
				for _, ti := range f.Tensors {
					if strings.HasPrefix(ti.Name, fmt.Sprintf("blk.%d.", l)) {
						want[ti.Name] = true
					}
				}
			}
			if r[1] == c.Layers {
				want["output_norm.weight"], want["output.weight"] = true, true
			}
			byOffset := map[int64]*TensorInfo{}
			for i := range f.Tensors {
				byOffset[f.Tensors[i].Offset] = &f.Tensors[i]
			}
			var header, samples, tensorBytes, wantBytes int64
			got := map[string]int{}
			for _, rd := range rr.reads {
				off, n := rd[0], rd[1]
				switch ti := byOffset[off]; {
				case off < f.DataOffset:
					header += n
				case ti != nil && n == ti.Size && want[ti.Name]:
					got[ti.Name]++
					tensorBytes += n
				case ti != nil && n <= 32:
					samples += n
				default:
					t.Errorf("unexpected read of %d bytes at %d", n, off)
				}
			}
			for name := range want {
				ti, _ := f.Tensor(name)
				wantBytes += ti.Size
				if got[name] != 1 {
					t.Errorf("tensor %s read %d times", name, got[name])
				}
			}
			if len(got) != len(want) {
				t.Errorf("read tensors %v, want %v", keys(got), want)
			}
			if header > f.DataOffset+64<<10 || samples > 32*int64(len(f.Tensors)) || tensorBytes != wantBytes {
				t.Errorf("bytes read: header %d (header is %d), samples %d, tensors %d (want %d)", header, f.DataOffset, samples, tensorBytes, wantBytes)
			}
			t.Logf("range %v: read %d of %d bytes (tensors %d)", r, header+samples+tensorBytes, len(data), tensorBytes)
		})
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCorruptFiles: every malformed file is a clean error of the right
// kind, never a panic.
func TestCorruptFiles(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 2, Dim: 32, Heads: 2, FFN: 64, Vocab: 300, Seed: 5}
	good := genBytes(t, c)
	open := func(b []byte) error {
		s, err := OpenReaderAt(bytes.NewReader(b), int64(len(b)), WithThreads(1))
		if err == nil {
			s.Close()
		}
		return err
	}
	if err := open(good); err != nil {
		t.Fatal(err)
	}
	f, _ := ReadFile(bytes.NewReader(good), int64(len(good)))
	// Truncation anywhere: in the header, the tensor table, the data.
	for _, n := range []int{0, 3, 4, 7, 8, 15, 23, 24, 30, 100, 1000, int(f.DataOffset) - 1, int(f.DataOffset), int(f.DataOffset) + 100, len(good) - 1} {
		if err := open(good[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d: %v", n, err)
		}
	}
	bad := append([]byte(nil), good...)
	copy(bad, "GGUX")
	if err := open(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "magic") {
		t.Errorf("wrong magic: %v", err)
	}
	modify := func(fn func(kvs []KV, ts []WriteTensor) ([]KV, []WriteTensor)) []byte {
		kvs, ts, err := genParts(c)
		if err != nil {
			t.Fatal(err)
		}
		kvs, ts = fn(kvs, ts)
		return writeParts(t, kvs, ts)
	}
	dropTensor := func(name string) func([]KV, []WriteTensor) ([]KV, []WriteTensor) {
		return func(kvs []KV, ts []WriteTensor) ([]KV, []WriteTensor) {
			var out []WriteTensor
			for _, x := range ts {
				if x.Name != name {
					out = append(out, x)
				}
			}
			return kvs, out
		}
	}
	if err := open(modify(dropTensor("blk.1.ffn_up.weight"))); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "blk.1.ffn_up.weight") {
		t.Errorf("missing tensor: %v", err)
	}
	editTensor := func(name string, fn func(*WriteTensor)) func([]KV, []WriteTensor) ([]KV, []WriteTensor) {
		return func(kvs []KV, ts []WriteTensor) ([]KV, []WriteTensor) {
			for i := range ts {
				if ts[i].Name == name {
					fn(&ts[i])
				}
			}
			return kvs, ts
		}
	}
	wrongShape := modify(editTensor("blk.0.attn_k.weight", func(w *WriteTensor) {
		w.Dims = []uint64{32, 16}
		w.Data = func(w io.Writer) error { _, err := w.Write(make([]byte, 32*16*4)); return err }
	}))
	if err := open(wrongShape); !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), "blk.0.attn_k.weight") {
		t.Errorf("wrong shape: %v", err)
	}
	q4 := modify(editTensor("blk.1.attn_q.weight", func(w *WriteTensor) {
		w.Type = Q8_1 // a type the engine does not compute with
		w.Data = func(w io.Writer) error { _, err := w.Write(make([]byte, 32*36)); return err }
	}))
	if err := open(q4); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "q8_1") || !strings.Contains(err.Error(), "blk.1.attn_q.weight") {
		t.Errorf("unsupported type: %v", err)
	}
	// A type ggml does not have: the file reads, the load is refused.
	fq, _ := ReadFile(bytes.NewReader(q4), int64(len(q4)))
	patchType(t, q4, fq, "blk.1.attn_q.weight", 999)
	if err := open(q4); !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "type(999)") {
		t.Errorf("unknown type: %v", err)
	}
	arch := modify(func(kvs []KV, ts []WriteTensor) ([]KV, []WriteTensor) {
		kvs[0].Value = "gptneox"
		return kvs, ts
	})
	if err := open(arch); !errors.Is(err, ErrUnsupportedArch) || !strings.Contains(err.Error(), "gptneox") {
		t.Errorf("unsupported arch: %v", err)
	}
	noKey := modify(func(kvs []KV, ts []WriteTensor) ([]KV, []WriteTensor) {
		var out []KV
		for _, kv := range kvs {
			if kv.Key != "llama.embedding_length" {
				out = append(out, kv)
			}
		}
		return out, ts
	})
	if err := open(noKey); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "llama.embedding_length") {
		t.Errorf("missing key: %v", err)
	}
	// Every single-byte flip in the header is an error or a valid model.
	for i := 0; i < int(f.DataOffset); i += 7 {
		b := append([]byte(nil), good...)
		b[i] ^= 0xa5
		_ = open(b)
	}
}

// patchType rewrites the type field of one tensor's table entry in place.
func patchType(t *testing.T, b []byte, f *File, name string, typ uint32) {
	t.Helper()
	i := bytes.Index(b, []byte(name))
	if i < 0 {
		t.Fatal("name not found")
	}
	ti, _ := f.Tensor(name)
	p := i + len(name) + 4 + 8*len(ti.Dims)
	b[p], b[p+1], b[p+2], b[p+3] = byte(typ), byte(typ>>8), byte(typ>>16), byte(typ>>24)
}

func TestFingerprint(t *testing.T) {
	c := testShapes["llama-gqa"]
	fp := func(c GenConfig) string {
		b := genBytes(t, c)
		f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := f.Fingerprint()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := fp(c)
	if a != fp(c) {
		t.Fatal("fingerprint not deterministic")
	}
	c2 := c
	c2.Seed++
	c3 := c
	c3.DType = F16
	if a == fp(c2) || a == fp(c3) {
		t.Fatal("different models share a fingerprint")
	}
	// Weights alone differ (same header): the data samples tell them apart.
	kvs, ts, _ := genParts(c)
	b1 := writeParts(t, kvs, ts)
	for i := range ts {
		if ts[i].Name == "blk.1.attn_v.weight" {
			orig := ts[i].Data
			ts[i].Data = func(w io.Writer) error {
				var buf bytes.Buffer
				orig(&buf)
				buf.Bytes()[0] ^= 1
				_, err := w.Write(buf.Bytes())
				return err
			}
		}
	}
	b2 := writeParts(t, kvs, ts)
	f1, _ := ReadFile(bytes.NewReader(b1), int64(len(b1)))
	f2, _ := ReadFile(bytes.NewReader(b2), int64(len(b2)))
	x, _ := f1.Fingerprint()
	y, _ := f2.Fingerprint()
	if x == y {
		t.Fatal("weight change not seen by the fingerprint")
	}
}

func TestModelSpec(t *testing.T) {
	for _, dt := range []DType{F32, Q8_0} {
		c := GenConfig{Arch: "llama", Layers: 3, Dim: 64, Heads: 4, KVHeads: 2, FFN: 128, Vocab: 300, Seed: 1, DType: dt}
		spec, err := ReadModelSpec(genModel(t, c))
		if err != nil {
			t.Fatal(err)
		}
		want := map[DType]float64{F32: 4, Q8_0: 34.0 / 32}[dt]
		// Norms stay F32, so the measured figure sits a little above.
		if spec.Layers != 3 || spec.Hidden != 64 || spec.KVHeads != 2 || spec.BytesPerParam < want || spec.BytesPerParam > want*1.1 {
			t.Errorf("%s: spec %+v", dt, spec.HyperParams)
		}
	}
}
