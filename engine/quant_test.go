package engine

import (
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// quantVector is one committed vector: blocks that ggml's quantizer wrote
// and the values ggml's to_float unpacked from them
// (engine/internal/refcheck writes them: STRATA_WRITE_QUANT_VECTORS=1).
type quantVector struct {
	typ  DType
	raw  []byte
	want []float32
}

func loadQuantVectors(t *testing.T) []quantVector {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "quant", "*.bin"))
	if err != nil || len(files) < 10 {
		t.Fatalf("quant vectors: %v (%d files)", err, len(files))
	}
	var out []quantVector
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		typ, n := DType(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
		size, ok := rowBytes(typ, uint64(n))
		if !ok || len(b) != 8+int(size)+4*n {
			t.Fatalf("%s: malformed vector file", f)
		}
		v := quantVector{typ: typ, raw: b[8 : 8+size]}
		for i := 0; i < n; i++ {
			v.want = append(v.want, math.Float32frombits(binary.LittleEndian.Uint32(b[8+int(size)+4*i:])))
		}
		out = append(out, v)
	}
	return out
}

// TestDequantizeVectors: unpacking is bit-exact against ggml on blocks
// ggml quantised, for every packed type.
func TestDequantizeVectors(t *testing.T) {
	for _, v := range loadQuantVectors(t) {
		got, err := Dequantize(v.typ, v.raw, len(v.want))
		if err != nil {
			t.Fatalf("%s: %v", v.typ, err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(v.want[i]) {
				t.Fatalf("%s: value %d is %g, ggml %g", v.typ, i, got[i], v.want[i])
			}
		}
	}
}

// TestPackedDot: each type's integer-sum dot product equals, up to float32
// rounding, the float64 dot of the unpacked weights with the unpacked
// quantised activations.
func TestPackedDot(t *testing.T) {
	for _, v := range loadQuantVectors(t) {
		f := quantFormats[v.typ]
		if f == nil {
			continue // Q8_0 has its own kernel and tests
		}
		cols := 512
		rows := len(v.want) / cols
		x := make([]float32, cols)
		s := uint64(v.typ)
		for i := range x {
			s = s*6364136223846793005 + 1442695040888963407
			x[i] = float32(int64(s>>40)-1<<23) / (1 << 22)
		}
		a := newAct(x, 1, cols)
		w := &matrix{rows: rows, cols: cols, raw: v.raw, qf: f}
		a.prepare(w)
		xs := make([]float64, cols)
		if f.k {
			for i := range xs {
				xs[i] = float64(a.kq[i]) * float64(a.kd[i/256])
			}
		} else {
			for i := range xs {
				xs[i] = float64(a.q[i]) * float64(a.d[i/32])
			}
		}
		out := make([]float32, rows)
		matmulPacked(out, w, a, 0, rows)
		// prepare sums every Q8_0 type's activations; only these read them.
		withMin := v.typ == Q4_1 || v.typ == Q5_1
		for r := 0; r < rows; r++ {
			ref, mag := 0.0, 0.0
			for i := 0; i < cols; i++ {
				w := float64(v.want[r*cols+i])
				if withMin {
					// The min's term uses the f16-rounded block sum, as
					// ggml's Q8_1 does: take it out of w and add it below.
					w -= float64(half(v.raw[(r*cols+i)/32*f.bytes+2:]))
				}
				ref += w * xs[i]
				mag += math.Abs(w * xs[i])
			}
			if withMin {
				for b := 0; b < cols/32; b++ {
					t := float64(half(v.raw[(r*cols/32+b)*f.bytes+2:])) * float64(a.sums[b])
					ref += t
					mag += math.Abs(t)
				}
			}
			if d := math.Abs(float64(out[r]) - ref); d > 1e-5*mag {
				t.Errorf("%s row %d: dot %g, unpacked %g (|Δ| %.3g, scale %.3g)", v.typ, r, out[r], ref, d, mag)
			}
		}
	}
}

// TestQuantizeRoundTrip: our quantizers (model gen's) write blocks that
// unpack close to their input, for every packed type.
func TestQuantizeRoundTrip(t *testing.T) {
	x := make([]float32, 1024)
	s := uint64(7)
	for i := range x {
		x[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 23)
	}
	// Worst error for values in ±1: about half a step of each type's grid
	// (a whole step at the far end for the symmetric types, whose most
	// negative level has no positive twin, as in ggml); a wrong layout
	// gives errors near 1.
	limit := map[DType]float64{Q4_0: 0.13, Q4_1: 0.07, Q5_0: 0.065, Q5_1: 0.035, IQ4_NL: 0.12,
		Q4_K: 0.07, Q5_K: 0.035, Q6_K: 0.035, IQ4_XS: 0.13,
		// MXFP4's scale leaves values in [6, 8)·2^(e−1) to clip to 6·2^(e-1),
		// as ggml's does: up to a quarter of max|x|.
		MXFP4: 0.26}
	for typ, lim := range limit {
		var raw []byte
		raw = encodeRow(raw, x, typ)
		if want, _ := rowBytes(typ, uint64(len(x))); uint64(len(raw)) != want {
			t.Fatalf("%s: %d bytes, want %d", typ, len(raw), want)
		}
		got, err := Dequantize(typ, raw, len(x))
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for i := range x {
			worst = math.Max(worst, math.Abs(float64(got[i]-x[i])))
		}
		if worst > lim {
			t.Errorf("%s: worst error %.4f over values in ±1 (limit %.3f)", typ, worst, lim)
		}
	}
}

// TestPackedKernelsMatchPortable: the SIMD row kernels give the portable
// kernels' bits, on ggml's blocks and on our own, for several activation
// rows at once.
func TestPackedKernelsMatchPortable(t *testing.T) {
	forEachPackedPath(t, testPackedKernelsMatchPortable)
}

// forEachPackedPath runs test once per SIMD path of this CPU's packed
// kernels: AVX-512BW where it has it, and always AVX2 (or portable).
func forEachPackedPath(t *testing.T, test func(*testing.T)) {
	t.Run("avx2", func(t *testing.T) {
		useAVX512 = false
		defer func() { useAVX512 = true }()
		test(t)
	})
	if hasAVX512Kernel(Q4_K) {
		t.Run("avx512", test)
	}
}

func testPackedKernelsMatchPortable(t *testing.T) {
	for _, v := range loadQuantVectors(t) {
		if packedRowKernel(v.typ) == nil {
			continue
		}
		for _, raw := range [][]byte{v.raw, encodeRow(nil, v.want, v.typ)} {
			cols := 512
			rows := len(v.want) / cols
			x := make([]float32, 3*cols)
			s := uint64(v.typ) + 99
			for i := range x {
				x[i] = float32(int64(splitmix(&s)>>40)-1<<23) / (1 << 20)
			}
			w := &matrix{rows: rows, cols: cols, raw: raw, qf: quantFormats[v.typ], typ: v.typ}
			if fast, slow := simdAndPortable(w, x, 3); !sameBits(fast, slow) {
				t.Fatalf("%s: SIMD %v, portable %v", v.typ, fast, slow)
			}
		}
	}
}

// TestHalfWidthBitsAndMemory: F16 and BF16 weights stay half width in
// memory and give their portable definition's bits (dotFused: an F32
// file's order of the widened values, products fused), close to an F32
// file's logits; and a stage's heap is about its tensors' bytes for every
// type.
func TestHalfWidthBitsAndMemory(t *testing.T) {
	for _, typ := range []DType{F16, BF16, Q8_0, Q4_K, Q4_0, IQ4_XS} {
		t.Run(typ.String(), func(t *testing.T) {
			c := GenConfig{Arch: "llama", Layers: 4, Dim: 512, Heads: 8, KVHeads: 2, FFN: 1024, Vocab: 512, Seed: 3, DType: typ}
			path := genModel(t, c)
			f, fh, err := OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			fileBytes := int64(0)
			for _, ti := range f.Tensors {
				fileBytes += ti.Size
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%s: tensors %d bytes, stage heap %d bytes (%.2f×), WeightBytes %d", typ, fileBytes, heap, float64(heap)/float64(fileBytes), s.Info().WeightBytes)
			if float64(heap) > 1.15*float64(fileBytes) {
				t.Errorf("a %s stage holds %d bytes for %d bytes of tensors", typ, heap, fileBytes)
			}
			if typ == F16 || typ == BF16 {
				// An F32 file of the widened values gives the same bits.
				var ts []WriteTensor
				for _, ti := range f.Tensors {
					raw := make([]byte, ti.Size)
					if _, err := fh.ReadAt(raw, ti.Offset); err != nil {
						t.Fatal(err)
					}
					vals, err := Dequantize(ti.Type, raw, int(ti.Elements()))
					if err != nil {
						t.Fatal(err)
					}
					b := make([]byte, 4*len(vals))
					for i, v := range vals {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
					}
					ts = append(ts, WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: F32, Data: func(w io.Writer) error { _, err := w.Write(b); return err }})
				}
				wide := filepath.Join(t.TempDir(), "wide.gguf")
				out, err := os.Create(wide)
				if err != nil {
					t.Fatal(err)
				}
				if err := WriteGGUF(out, f.KV, ts); err != nil {
					t.Fatal(err)
				}
				out.Close()
				prompt := []int32{5, 17, 99, 3}
				got := openPipeline(t, path, []int{0, c.Layers}, 2, 16).step(t, prompt)
				useSIMD = false
				want := openPipeline(t, path, []int{0, 2, c.Layers}, 1, 16).step(t, prompt)
				useSIMD = true
				if !sameBits(got, want) {
					t.Fatal("half-width weights' kernels differ from their portable definition")
				}
				// Their F32 file adds rounded products where they fuse
				// them: the same logits but for the last bits.
				f32 := openPipeline(t, wide, []int{0, 2, c.Layers}, 1, 16).step(t, prompt)
				scale, diff := float32(0), float32(0)
				for i, v := range f32 {
					scale, diff = max(scale, abs32(v)), max(diff, abs32(v-got[i]))
				}
				t.Logf("widened F32 file: logits at most %.3g apart (largest %.3g)", diff, scale)
				if diff > 1e-4*scale || sameBits(f32, got) {
					t.Fatalf("half-width weights' logits are %g from their widened F32 file's (largest %g); want close, and not the same bits", diff, scale)
				}
			}
			fh.Close()
			s.Close()
		})
	}
}

// halfOffsets are the byte offsets of each packed type's f16 fields in a
// block; random blocks get finite values there.
var halfOffsets = map[DType][]int{
	Q4_0: {0}, Q4_1: {0, 2}, Q5_0: {0}, Q5_1: {0, 2}, IQ4_NL: {0},
	Q4_K: {0, 2}, Q5_K: {0, 2}, Q6_K: {208}, IQ4_XS: {0},
	MXFP4: {}, // its E8M0 scale byte has no non-finite values
}

// TestPackedKernelsRandomBlocks: the SIMD row kernels give the portable
// kernels' bits on random blocks (every bit pattern of the quants and
// scales, finite halves), for row lengths of 1 to 11 blocks, one
// activation row or several at once, one of them all zero.
func TestPackedKernelsRandomBlocks(t *testing.T) {
	forEachPackedPath(t, testPackedKernelsRandomBlocks)
}

func testPackedKernelsRandomBlocks(t *testing.T) {
	rng := uint64(5)
	for typ, offs := range halfOffsets {
		if packedRowKernel(typ) == nil {
			continue
		}
		f := quantFormats[typ]
		for _, nb := range []int{1, 2, 3, 5, 8, 11} {
			cols, rows := nb*f.block, 7
			raw := make([]byte, rows*nb*f.bytes)
			for i := range raw {
				raw[i] = byte(splitmix(&rng))
			}
			for b := 0; b < rows*nb; b++ {
				for _, o := range offs {
					// Exponents below the maximum: finite, subnormals included.
					binary.LittleEndian.PutUint16(raw[b*f.bytes+o:], uint16(splitmix(&rng))&0xbbff)
				}
			}
			// One activation row (a decode) and four, the last all zero.
			for _, n := range []int{1, 4} {
				x := make([]float32, n*cols)
				for i := range x[:min(n, 3)*cols] {
					x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 21)
				}
				w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: typ}
				if fast, slow := simdAndPortable(w, x, n); !sameBits(fast, slow) {
					t.Fatalf("%s, %d blocks, %d activation rows: SIMD %v, portable %v", typ, nb, n, fast, slow)
				}
			}
		}
	}
}

// TestPackedKernelsExtremes: the SIMD row kernels give the portable
// kernels' bits where the integer sums are largest: blocks of all-ones or
// all-zero bits (largest quants, scales and mins, or the most negative
// Q6_K scale) against activations quantised to ±127 everywhere, with
// alternating signs, or zero, for 1 to 11 blocks and 1 to 3 activation
// rows (the one- and two-row kernels), with extreme halves.
func TestPackedKernelsExtremes(t *testing.T) {
	forEachPackedPath(t, testPackedKernelsExtremes)
}

func testPackedKernelsExtremes(t *testing.T) {
	rng := uint64(11)
	fills := []func(i int) byte{
		func(int) byte { return 0xff },
		func(int) byte { return 0 },
		func(i int) byte { return byte(0x80 >> (i % 2 * 7)) }, // 0x80 and 0x01: Q6_K scale −128
		func(int) byte { return byte(splitmix(&rng)) },
	}
	acts := []func(i int) float32{
		func(int) float32 { return 1e30 },
		func(int) float32 { return -3 },
		func(i int) float32 { return float32(1 - 2*(i%2)) },
		func(i int) float32 { return float32(1 - 2*(i/16%2)) },
		func(int) float32 { return 0 },
	}
	// The largest finite half, the smallest subnormal, then ±infinity and
	// a signalling NaN for the K-quants, whose kernels give the portable
	// NaN's bits too (the others' AVX2 kernels do not, yet).
	halves := []uint16{0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7d01}
	nonFinite := map[DType]bool{Q4_K: true, Q5_K: true, Q6_K: true}
	for typ, offs := range halfOffsets {
		if packedRowKernel(typ) == nil {
			continue
		}
		f := quantFormats[typ]
		for _, nb := range []int{1, 2, 11} {
			cols, rows := nb*f.block, len(fills)
			raw := make([]byte, rows*nb*f.bytes)
			for r, fill := range fills {
				for i := range raw[r*nb*f.bytes : (r+1)*nb*f.bytes] {
					raw[r*nb*f.bytes+i] = fill(i)
				}
			}
			for b := 0; b < rows*nb; b++ {
				for _, o := range offs {
					h := halves[(b+o)%len(halves)]
					if !nonFinite[typ] {
						h = halves[(b+o)%2]
					}
					binary.LittleEndian.PutUint16(raw[b*f.bytes+o:], h)
				}
			}
			for n := 1; n <= 3; n++ {
				for ai := range acts {
					x := make([]float32, n*cols)
					for i := range x {
						x[i] = acts[(ai+i/cols)%len(acts)](i)
					}
					w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: typ}
					if fast, slow := simdAndPortable(w, x, n); !sameBits(fast, slow) {
						t.Fatalf("%s, %d blocks, %d rows, activations %d: SIMD %v, portable %v", typ, nb, n, ai, fast, slow)
					}
				}
			}
		}
	}
}

// simdAndPortable multiplies the packed matrix w by n activation rows x
// with the SIMD kernels and with the portable ones.
func simdAndPortable(w *matrix, x []float32, n int) (simd, portable []float32) {
	a := newAct(x, n, w.cols)
	a.prepare(w)
	simd = make([]float32, n*w.rows)
	matmulPacked(simd, w, a, 0, w.rows)
	useSIMD = false
	defer func() { useSIMD = true }()
	portable = make([]float32, n*w.rows)
	matmulPacked(portable, w, a, 0, w.rows)
	return simd, portable
}

// TestPackedRowsKernelSlices: the many-row decode kernels (Q4_K, Q6_K and
// MXFP4 on AVX-512) give the portable bits on any slice of rows, as the
// worker pool cuts a matrix, one row, an odd count or the rest, with an
// odd and an even block count.
func TestPackedRowsKernelSlices(t *testing.T) {
	rng := uint64(9)
	for _, typ := range []DType{Q4_K, Q6_K, MXFP4} {
		f := quantFormats[typ]
		for _, nb := range []int{3, 4} {
			cols, rows := nb*f.block, 37
			src := make([]float32, cols)
			var raw []byte
			for r := 0; r < rows; r++ {
				for i := range src {
					src[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 20)
				}
				raw = encodeRow(raw, src, typ)
			}
			w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: typ}
			x := make([]float32, cols)
			for i := range x {
				x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 21)
			}
			a := newAct(x, 1, cols)
			a.prepare(w)
			got := make([]float32, rows)
			for _, cut := range [][2]int{{0, 5}, {5, 6}, {6, 17}, {17, rows}} {
				matmulPacked(got, w, a, cut[0], cut[1])
			}
			useSIMD = false
			want := make([]float32, rows)
			matmulPacked(want, w, a, 0, rows)
			useSIMD = true
			if !sameBits(got, want) {
				t.Fatalf("%s, %d blocks: sliced SIMD %v, portable %v", typ, nb, got, want)
			}
			if got[rows-1] == 0 {
				t.Fatalf("%s: last row not computed", typ)
			}
		}
	}
}
