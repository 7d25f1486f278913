package engine

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSlice copies the metadata and the named tensors of the file at
// path into a new file with extra keys.
func writeSlice(t *testing.T, path string, keep func(name string) bool, extra ...KV) string {
	t.Helper()
	f, fh, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var ts []WriteTensor
	for _, ti := range f.Tensors {
		if !keep(ti.Name) {
			continue
		}
		ti := ti
		ts = append(ts, WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type, Data: func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(fh, ti.Offset, ti.Size))
			return err
		}})
	}
	out := filepath.Join(t.TempDir(), "slice.gguf")
	o, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := WriteGGUF(o, append(f.KV[:len(f.KV):len(f.KV)], extra...), ts); err != nil {
		t.Fatal(err)
	}
	return out
}

// A slice of middle layers, without the embedding, opens on its own range
// with the full model's fingerprint and hidden states bit-identical to
// the full file's; a range outside it and malformed slice keys are errors.
func TestSliceFile(t *testing.T) {
	c := DefaultGenConfig()
	path := genModel(t, c)
	full, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fp := full.Info().Fingerprint
	full.Close()
	middle := func(name string) bool { return strings.HasPrefix(name, "blk.1.") || strings.HasPrefix(name, "blk.2.") }
	out := writeSlice(t, path, middle, KV{SliceKeyFingerprint, fp}, KV{SliceKeyLo, uint32(1)}, KV{SliceKeyHi, uint32(3)})
	s, err := Open(out, WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if i := s.Info(); i.Lo != 1 || i.Hi != 3 || i.Fingerprint != fp {
		t.Fatalf("slice opened as [%d,%d) of %s", i.Lo, i.Hi, i.Fingerprint)
	}
	ref, err := Open(path, WithRange(1, 3), WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	in := make([]float32, 3*c.Dim)
	for i := range in {
		in[i] = float32(i%7) - 3
	}
	hidden := func(st Stage) []float32 {
		ss, err := st.NewSession(8)
		if err != nil {
			t.Fatal(err)
		}
		o, err := st.Forward(t.Context(), Step{Session: ss, Hidden: in})
		if err != nil {
			t.Fatal(err)
		}
		return o.Hidden
	}
	if !sameBits(hidden(s), hidden(ref)) {
		t.Fatal("slice stage differs from the full file's")
	}
	if _, err := Open(out, WithRange(0, 3)); !errors.Is(err, ErrRange) {
		t.Fatalf("range outside the slice: %v", err)
	}
	// Without the slice keys, the missing embedding is corruption.
	if _, err := Open(writeSlice(t, path, middle)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("middle layers without slice keys: %v", err)
	}
	for name, kvs := range map[string][]KV{
		"empty range":   {{SliceKeyFingerprint, fp}, {SliceKeyLo, uint32(2)}, {SliceKeyHi, uint32(2)}},
		"no hi":         {{SliceKeyFingerprint, fp}, {SliceKeyLo, uint32(1)}},
		"fp not string": {{SliceKeyFingerprint, uint32(1)}, {SliceKeyLo, uint32(1)}, {SliceKeyHi, uint32(3)}},
	} {
		if _, err := Open(writeSlice(t, path, middle, kvs...)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
