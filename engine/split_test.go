package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genLayout writes c laid out as l into a temporary directory.
func genLayout(t testing.TB, c GenConfig, l FileLayout) []string {
	t.Helper()
	paths, err := GenerateFiles(filepath.Join(t.TempDir(), "model.gguf"), c, l)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// nopCloser is a buffer that WriteSplitGGUF can close.
type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// splitBytes is c as split parts in memory.
func splitBytes(t testing.TB, c GenConfig, maxTensors int) [][]byte {
	t.Helper()
	kvs, ts, err := genParts(c)
	if err != nil {
		t.Fatal(err)
	}
	var bufs []*bytes.Buffer
	err = WriteSplitGGUF(func(i, n int) (io.WriteCloser, error) {
		b := &bytes.Buffer{}
		bufs = append(bufs, b)
		return nopCloser{b}, nil
	}, kvs, ts, maxTensors)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(bufs))
	for i, b := range bufs {
		out[i] = b.Bytes()
	}
	return out
}

// TestSplitFile: a model split as llama-gguf-split does, opened through any
// of its parts, gives the single file's logits bit for bit, whichever part
// each stage of a pipeline was opened with.
func TestSplitFile(t *testing.T) {
	for _, shape := range []string{"llama-gqa", "qwen3", "llama-q4_k_m", "phi3-q4_k_m"} {
		t.Run(shape, func(t *testing.T) {
			c := testShapes[shape]
			if c.Mix == "" {
				c.DType = Q8_0
			}
			single := genModel(t, c)
			parts := genLayout(t, c, FileLayout{SplitMaxTensors: 7})
			f1, fh1, err := OpenFile(single)
			if err != nil {
				t.Fatal(err)
			}
			defer fh1.Close()
			want := (len(f1.Tensors) + 6) / 7
			if len(parts) != want || !strings.HasSuffix(parts[0], fmt.Sprintf("model-00001-of-%05d.gguf", want)) {
				t.Fatalf("wrote %v, want %d parts", parts, want)
			}
			fp1, _ := f1.Fingerprint()
			spec1, err := f1.ModelSpec()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range parts {
				f, fh, err := OpenFile(p)
				if err != nil {
					t.Fatal(err)
				}
				fh.Close()
				if len(f.Parts) != len(parts) || len(f.Tensors) != len(f1.Tensors) {
					t.Fatalf("part %d: %d parts, %d tensors; want %d, %d", i, len(f.Parts), len(f.Tensors), len(parts), len(f1.Tensors))
				}
				for j, pt := range f.Parts {
					if pt.Path != parts[j] || pt.Tensors == 0 || pt.Tensors > 7 {
						t.Errorf("part %d: %+v", j, pt)
					}
				}
				fp, _ := f.Fingerprint()
				if fp == fp1 {
					t.Error("split and single files have the same fingerprint")
				}
				if spec, _ := f.ModelSpec(); spec != spec1 {
					t.Errorf("spec %+v, want %+v", spec, spec1)
				}
			}
			prompt := []int32{1, 17, 42, 99, 250, 3, 77}
			ref := openPipeline(t, single, []int{0, c.Layers}, 1, 32)
			// Each stage opened through another part, at 2 goroutines.
			var sp pipeline
			cuts := []int{0, 1, 3, c.Layers}
			for i := 0; i+1 < len(cuts); i++ {
				s, err := Open(parts[(len(parts)-1-i)%len(parts)], WithRange(cuts[i], cuts[i+1]), WithThreads(2))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				ss, err := s.NewSession(32)
				if err != nil {
					t.Fatal(err)
				}
				sp.stages, sp.sess = append(sp.stages, s), append(sp.sess, ss)
			}
			wantLogits, wantToks := ref.generate(t, prompt, 6, SamplingParams{})
			gotLogits, gotToks := sp.generate(t, prompt, 6, SamplingParams{})
			for i := range wantLogits {
				if !sameBits(wantLogits[i], gotLogits[i]) {
					t.Fatalf("step %d: split-file logits differ from the single file's", i)
				}
			}
			if fmt.Sprint(gotToks) != fmt.Sprint(wantToks) {
				t.Fatalf("tokens %v, want %v", gotToks, wantToks)
			}
		})
	}
}

// TestSplitStageReadsOnlyItsTensors: a stage of a split model reads each
// part's header, 32-byte fingerprint samples, and exactly its own tensors,
// once each, from whichever part holds them.
func TestSplitStageReadsOnlyItsTensors(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 6, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 1000, Seed: 3, DType: Q8_0}
	parts := splitBytes(t, c, 9)
	readers := make([]io.ReaderAt, len(parts))
	sizes := make([]int64, len(parts))
	var total int64
	for i, p := range parts {
		readers[i], sizes[i] = bytes.NewReader(p), int64(len(p))
		total += sizes[i]
	}
	f, err := ReadSplit(readers, sizes)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 2}, {2, 4}, {4, 6}, {0, 6}, {3, 4}} {
		t.Run(fmt.Sprint(r), func(t *testing.T) {
			recs := make([]*recReader, len(parts))
			for i := range parts {
				recs[i] = &recReader{r: readers[i]}
				readers[i] = recs[i]
			}
			sf, err := ReadSplit(readers, sizes)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Load(sf, WithRange(r[0], r[1]), WithThreads(1))
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			want := map[string]bool{}
			if r[0] == 0 {
				want["token_embd.weight"] = true
			}
			for _, ti := range f.Tensors {
				var l int
				if _, err := fmt.Sscanf(ti.Name, "blk.%d.", &l); err == nil && l >= r[0] && l < r[1] {
					want[ti.Name] = true
				}
			}
			if r[1] == c.Layers {
				want["output_norm.weight"], want["output.weight"] = true, true
			}
			var header, samples, tensorBytes, wantBytes int64
			got := map[string]int{}
			for pi, rec := range recs {
				byOffset := map[int64]*TensorInfo{}
				for i := range f.Tensors {
					if f.Tensors[i].Part == pi {
						byOffset[f.Tensors[i].Offset] = &f.Tensors[i]
					}
				}
				for _, rd := range rec.reads {
					off, n := rd[0], rd[1]
					switch ti := byOffset[off]; {
					case off < f.Parts[pi].DataOffset:
						header += n
					case ti != nil && n == ti.Size && want[ti.Name]:
						got[ti.Name]++
						tensorBytes += n
					case ti != nil && n <= 32:
						samples += n
					default:
						t.Errorf("part %d: unexpected read of %d bytes at %d", pi, n, off)
					}
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
			var headers int64
			for _, p := range f.Parts {
				headers += p.DataOffset
			}
			if header > 2*headers+int64(len(parts))*4<<10 || samples > 32*int64(len(f.Tensors)) || tensorBytes != wantBytes {
				t.Errorf("bytes read: header %d (headers are %d), samples %d, tensors %d (want %d)", header, headers, samples, tensorBytes, wantBytes)
			}
			// The header reader reads ahead up to 64 KiB per part: nothing
			// next to a real part's gigabytes, but visible here.
			t.Logf("range %v: read %d of %d bytes in %d parts: its tensors %d, headers and read-ahead %d, samples %d",
				r, header+samples+tensorBytes, total, len(parts), tensorBytes, header, samples)
		})
	}
}

// TestSplitFileErrors: a missing, misplaced, foreign or lone part is an
// ErrSplitPart that names it, and nothing loads.
func TestSplitFileErrors(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 2, Dim: 32, Heads: 2, FFN: 64, Vocab: 300, Seed: 5}
	fresh := func(t *testing.T) []string { return genLayout(t, c, FileLayout{SplitMaxTensors: 6}) }
	expect := func(t *testing.T, err error, names ...string) {
		t.Helper()
		if !errors.Is(err, ErrSplitPart) {
			t.Fatalf("got %v, want ErrSplitPart", err)
		}
		for _, n := range names {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("error %q does not name %q", err, n)
			}
		}
	}
	open := func(path string) error {
		f, fh, err := OpenFile(path)
		if err == nil {
			fh.Close()
			t.Fatalf("opened, %d parts", len(f.Parts))
		}
		if _, err2 := Open(path); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("Open: %v; OpenFile: %v", err2, err)
		}
		return err
	}
	t.Run("missing", func(t *testing.T) {
		p := fresh(t)
		if len(p) < 3 {
			t.Fatalf("%d parts", len(p))
		}
		os.Remove(p[1])
		for _, q := range []string{p[0], p[2]} {
			expect(t, open(q), filepath.Base(p[1]), "part 2 of")
		}
	})
	t.Run("swapped", func(t *testing.T) {
		p := fresh(t)
		tmp := p[1] + ".tmp"
		os.Rename(p[1], tmp)
		os.Rename(p[2], p[1])
		os.Rename(tmp, p[2])
		expect(t, open(p[0]), filepath.Base(p[1]))
	})
	t.Run("foreign", func(t *testing.T) {
		// A part of the same model split another way.
		p := fresh(t)
		other := genLayout(t, c, FileLayout{SplitMaxTensors: 5})
		b, err := os.ReadFile(other[1])
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(p[1], b, 0o644)
		expect(t, open(p[0]), filepath.Base(p[1]))
	})
	t.Run("renamed", func(t *testing.T) {
		p := fresh(t)
		lone := filepath.Join(filepath.Dir(p[0]), "model.gguf")
		os.Rename(p[0], lone)
		expect(t, open(lone), "model.gguf", "PREFIX-00001-of-")
		// A name that says another position than the keys.
		wrong := SplitPath(strings.TrimSuffix(lone, ".gguf"), 1, len(p))
		b, _ := os.ReadFile(p[2])
		os.WriteFile(wrong, b, 0o644)
		expect(t, open(wrong), "named part 2", "say part 3")
	})
	t.Run("alone", func(t *testing.T) {
		parts := splitBytes(t, c, 6)
		for i, b := range parts {
			_, err := OpenReaderAt(bytes.NewReader(b), int64(len(b)))
			expect(t, err, fmt.Sprintf("part %d of", i+1))
		}
	})
	t.Run("ReadSplit", func(t *testing.T) {
		parts := splitBytes(t, c, 8)
		rs := func(order ...int) error {
			var readers []io.ReaderAt
			var sizes []int64
			for _, i := range order {
				readers, sizes = append(readers, bytes.NewReader(parts[i])), append(sizes, int64(len(parts[i])))
			}
			_, err := ReadSplit(readers, sizes)
			return err
		}
		expect(t, rs(0, 2, 1), "part 2 of 3", "is part 3")
		expect(t, rs(0, 1), "part 1 of 2", "3 parts")
		expect(t, rs(1, 0, 2), "part 1 of 3")
		expect(t, rs(0, 1, 2, 2), "4")
		if err := rs(0, 1, 2); err != nil {
			t.Fatal(err)
		}
		trunc := parts[2][:len(parts[2])-1]
		_, err := ReadSplit([]io.ReaderAt{bytes.NewReader(parts[0]), bytes.NewReader(parts[1]), bytes.NewReader(trunc)},
			[]int64{int64(len(parts[0])), int64(len(parts[1])), int64(len(trunc))})
		expect(t, err, "part 3 of 3")
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated part: %v, want ErrCorrupt too", err)
		}
	})
	t.Run("tensors", func(t *testing.T) {
		// Parts whose tensors do not add up, or repeat one another's.
		kvs, ts, err := genParts(c)
		if err != nil {
			t.Fatal(err)
		}
		part := func(no, count, total int, kv []KV, ts []WriteTensor) io.ReaderAt {
			kv = append(append([]KV(nil), kv...), KV{keySplitNo, uint16(no)}, KV{keySplitCount, uint16(count)}, KV{keySplitTensors, int32(total)})
			return bytes.NewReader(writeParts(t, kv, ts))
		}
		read := func(rs ...io.ReaderAt) error {
			sizes := make([]int64, len(rs))
			for i, r := range rs {
				sizes[i] = r.(*bytes.Reader).Size()
			}
			_, err := ReadSplit(rs, sizes)
			return err
		}
		n := len(ts)
		expect(t, read(part(0, 2, n, kvs, ts[:4]), part(1, 2, n, nil, ts[3:])), "repeats tensor", ts[3].Name)
		expect(t, read(part(0, 2, n, kvs, ts[:4]), part(1, 2, n, nil, ts[5:])), fmt.Sprintf("hold %d tensors", n-1))
		expect(t, read(part(0, 2, n, kvs, ts[:4]), part(1, 2, n+1, nil, ts[4:])), "part 2 of 2", fmt.Sprint(n+1))
	})
}

// TestAlignment: general.alignment (32 by default, 64, 256) is honoured in
// writing and reading, one file or split, with the same logits.
func TestAlignment(t *testing.T) {
	c := testShapes["llama-q4_k_m"]
	var ref []float32
	prompt := []int32{5, 6, 7, 8}
	for _, l := range []FileLayout{{}, {Alignment: 64}, {Alignment: 256}, {Alignment: 256, SplitMaxTensors: 9}, {Alignment: 32}} {
		t.Run(fmt.Sprintf("%d/%d", l.Alignment, l.SplitMaxTensors), func(t *testing.T) {
			paths := genLayout(t, c, l)
			f, fh, err := OpenFile(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			want := int64(max(l.Alignment, 32))
			if f.Alignment != want {
				t.Fatalf("alignment %d, want %d", f.Alignment, want)
			}
			for i, p := range f.Parts {
				// As llama-gguf-split, only the first part has the metadata;
				// the others align to the default.
				pw := want
				if i > 0 {
					pw = ggufDefaultAlign
				}
				if p.Alignment != pw || p.DataOffset%pw != 0 {
					t.Errorf("part %d: %+v, want alignment %d", i, p, pw)
				}
			}
			for _, ti := range f.Tensors {
				if a := f.Parts[ti.Part].Alignment; ti.Offset%a != 0 {
					t.Errorf("tensor %s at %d, not a multiple of %d", ti.Name, ti.Offset, a)
				}
			}
			got := openPipeline(t, paths[len(paths)-1], []int{0, c.Layers}, 1, 8).step(t, prompt)
			if ref == nil {
				ref = got
			} else if !sameBits(ref, got) {
				t.Fatal("logits differ from the 32-byte aligned file's")
			}
		})
	}
	for _, a := range []uint32{48, 0x80000000} {
		kvs, ts, _ := genParts(c)
		err := WriteGGUF(io.Discard, append(kvs, KV{"general.alignment", a}), ts)
		if !errors.Is(err, ErrShape) {
			t.Errorf("alignment %d: %v, want ErrShape", a, err)
		}
	}
}

// tinySplit is a tiny model in two parts.
func tinySplit(t testing.TB, arch string) [][]byte {
	kvs, ts := tinyModel(arch)
	var bufs []*bytes.Buffer
	err := WriteSplitGGUF(func(i, n int) (io.WriteCloser, error) {
		b := &bytes.Buffer{}
		bufs = append(bufs, b)
		return nopCloser{b}, nil
	}, kvs, ts, (len(ts)+1)/2)
	if err != nil || len(bufs) != 2 {
		t.Fatalf("%v, %d parts", err, len(bufs))
	}
	return [][]byte{bufs[0].Bytes(), bufs[1].Bytes()}
}

// FuzzReadSplit feeds two arbitrary parts to the split decoder and, when
// they parse as one model, to the whole load path: errors are fine, panics
// are not. Seeds: testdata/fuzz/FuzzReadSplit plus tiny models in two parts.
func FuzzReadSplit(f *testing.F) {
	for _, arch := range []string{"llama", "qwen2"} {
		p := tinySplit(f, arch)
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		file, err := ReadSplit([]io.ReaderAt{bytes.NewReader(a), bytes.NewReader(b)}, []int64{int64(len(a)), int64(len(b))})
		if err != nil {
			return
		}
		_, _ = file.Fingerprint()
		if s, err := Load(file, WithThreads(1)); err == nil {
			fuzzStep(t, s)
		}
	})
}

// TestTinySplitRuns keeps FuzzReadSplit's seeds honest: they load and run.
func TestTinySplitRuns(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2"} {
		p := tinySplit(t, arch)
		f, err := ReadSplit([]io.ReaderAt{bytes.NewReader(p[0]), bytes.NewReader(p[1])}, []int64{int64(len(p[0])), int64(len(p[1]))})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Load(f, WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := s.NewSession(4)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := s.Forward(t.Context(), Step{Session: ss, Tokens: []int32{1, 2}}); err != nil || len(out.Logits) == 0 {
			t.Fatalf("%s: %v", arch, err)
		}
		s.Close()
	}
}

// TestOpenParts: parts under names of their own (as a content-addressed
// store keeps them) open in the order given, with the single file's
// logits; a wrong order or a missing part is an ErrSplitPart naming it.
func TestOpenParts(t *testing.T) {
	c := testShapes["llama-q4_k_m"]
	single := genModel(t, c)
	parts := genLayout(t, c, FileLayout{SplitMaxTensors: 10})
	var blobs []string
	for i, p := range parts {
		b := filepath.Join(filepath.Dir(p), fmt.Sprintf("blob-%c", 'z'-i))
		if err := os.Rename(p, b); err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
	}
	f, err := OpenParts(blobs)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Parts) != len(blobs) || f.Parts[1].Path != blobs[1] {
		t.Fatalf("parts %+v", f.Parts)
	}
	s, err := Load(f, WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ss, _ := s.NewSession(8)
	out, err := s.Forward(t.Context(), Step{Session: ss, Tokens: []int32{5, 6, 7}})
	if err != nil {
		t.Fatal(err)
	}
	if want := openPipeline(t, single, []int{0, c.Layers}, 1, 8).step(t, []int32{5, 6, 7}); !sameBits(out.Logits, want) {
		t.Fatal("logits differ from the single file's")
	}
	one, err := OpenParts([]string{single})
	if err != nil || len(one.Parts) != 1 || one.Parts[0].Path != single {
		t.Fatalf("one file: %v, %+v", err, one)
	}
	for _, bad := range [][]string{{blobs[1], blobs[0], blobs[2]}, blobs[:2], {blobs[0]}, {blobs[0], blobs[1], blobs[2] + ".gone"}, nil} {
		_, err := OpenParts(bad)
		if !errors.Is(err, ErrSplitPart) {
			t.Errorf("%v: %v, want ErrSplitPart", bad, err)
		} else if len(bad) > 0 && !strings.Contains(err.Error(), "blob-") {
			t.Errorf("%v: %v does not name the part", bad, err)
		}
	}
}
