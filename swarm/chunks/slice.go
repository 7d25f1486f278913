package chunks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/engine"
)

// PartSuffix names the file that collects a slice's chunks, at their
// offsets in the full file (sparse), until the slice is written. It
// survives a stop, so a restart fetches only the chunks it lacks.
const PartSuffix = ".part"

// FetchSlice makes path a GGUF slice of layers [lo, hi) of the fetcher's
// model: the full file's metadata and the tensors TensorsFor(lo, hi)
// names, loadable with engine.Open. A slice already at path for the same
// model and range is kept and nothing is fetched; a different file there
// is an ErrSlice and is left alone. Chunks already in path+PartSuffix are
// verified and not fetched again.
func FetchSlice(ctx context.Context, f *Fetcher, lo, hi int, holders []peer.ID, path string) (Result, error) {
	m := f.m
	want, err := m.TensorsFor(lo, hi)
	if err != nil {
		return Result{}, err
	}
	switch err := CheckSlice(m, lo, hi, path); {
	case err == nil:
		return Result{}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Result{}, err
	}
	need, err := m.ChunksFor(lo, hi)
	if err != nil {
		return Result{}, err
	}
	part, err := os.OpenFile(path+PartSuffix, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return Result{}, err
	}
	defer part.Close()
	missing, err := missingChunks(m, part, need)
	if err != nil {
		return Result{}, err
	}
	res, err := f.Fetch(ctx, missing, holders, func(i int, data []byte) error {
		off, _ := m.ChunkRange(i)
		_, err := part.WriteAt(data, off)
		return err
	})
	if err != nil {
		return res, err
	}
	if err := part.Sync(); err != nil {
		return res, err
	}
	if err := writeSlice(m, lo, hi, want, part, path); err != nil {
		return res, err
	}
	// Without its edge chunks a slice could serve only its inner chunks.
	if err := writeEdges(m, lo, hi, part, path); err != nil {
		return res, err
	}
	part.Close()
	return res, os.Remove(path + PartSuffix)
}

// missingChunks sizes part to the full file (holes cost no disk) and
// returns the chunks of need it does not hold verified.
func missingChunks(m *Manifest, part *os.File, need []int) ([]int, error) {
	st, err := part.Stat()
	if err != nil {
		return nil, err
	}
	fresh := st.Size() == 0
	if st.Size() != m.FileSize {
		if err := part.Truncate(m.FileSize); err != nil {
			return nil, err
		}
	}
	if fresh {
		return need, nil
	}
	var missing []int
	buf := make([]byte, m.ChunkSize)
	for _, i := range need {
		off, n := m.ChunkRange(i)
		if _, err := part.ReadAt(buf[:n], off); err != nil {
			return nil, err
		}
		if !m.Verify(i, buf[:n]) {
			missing = append(missing, i)
		}
	}
	return missing, nil
}

// writeSlice writes the slice from the verified chunks in part, through a
// temporary file renamed into place.
func writeSlice(m *Manifest, lo, hi int, want []Tensor, part io.ReaderAt, path string) error {
	// The header's chunks are verified, so this is the model's own header;
	// it must agree with the manifest's tensor table, or the manifest lies.
	f, err := engine.ReadFile(part, m.FileSize)
	if err != nil {
		return fmt.Errorf("%w: header from verified chunks: %w", ErrManifest, err)
	}
	if err := sameTable(m.Tensors, f); err != nil {
		return err
	}
	kvs, err := sliceKVs(m, f, lo, hi)
	if err != nil {
		return err
	}
	ts := make([]engine.WriteTensor, len(want))
	for i, t := range want {
		ts[i] = engine.WriteTensor{Name: t.Name, Dims: t.Dims, Type: t.Type, Data: func(w io.Writer) error {
			_, err := io.Copy(w, io.NewSectionReader(part, t.Offset, t.Size))
			return err
		}}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = engine.WriteGGUF(tmp, kvs, ts)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// sameTable checks that the manifest's tensors are the file's.
func sameTable(ts []Tensor, f *engine.File) error {
	if len(ts) != len(f.Tensors) {
		return fmt.Errorf("%w: %d tensors, the file's header %d", ErrManifest, len(ts), len(f.Tensors))
	}
	for i, t := range ts {
		g := f.Tensors[i]
		if t.Name != g.Name || t.Type != g.Type || !slices.Equal(t.Dims, g.Dims) || t.Offset != g.Offset || t.Size != g.Size {
			return fmt.Errorf("%w: tensor %d is %q %s %v at %d, the file's header says %q %s %v at %d",
				ErrManifest, i, t.Name, t.Type, t.Dims, t.Offset, g.Name, g.Type, g.Dims, g.Offset)
		}
	}
	return nil
}

// sliceKVs is the full file's metadata, marked as a slice. WriteGGUF
// aligns to 32 bytes, so the alignment key says so; a middle slice has no
// embedding to take the vocabulary size from, so the key carries it.
func sliceKVs(m *Manifest, f *engine.File, lo, hi int) ([]engine.KV, error) {
	arch, err := f.String("general.architecture")
	if err != nil {
		return nil, err
	}
	vocabKey := arch + ".vocab_size"
	var kvs []engine.KV
	hasVocab := false
	for _, kv := range f.KV {
		switch kv.Key {
		case engine.SliceKeyFingerprint, engine.SliceKeyLo, engine.SliceKeyHi:
			continue
		case "general.alignment":
			kv.Value = uint32(32)
		case vocabKey:
			hasVocab = true
		}
		kvs = append(kvs, kv)
	}
	if !hasVocab {
		emb, ok := m.Tensor(tokenEmbd)
		if !ok || len(emb.Dims) != 2 {
			return nil, fmt.Errorf("%w: no %s to take the vocabulary size from", ErrManifest, tokenEmbd)
		}
		kvs = append(kvs, engine.KV{Key: vocabKey, Value: uint32(emb.Dims[1])})
	}
	return append(kvs,
		engine.KV{Key: engine.SliceKeyFingerprint, Value: m.Fingerprint},
		engine.KV{Key: engine.SliceKeyLo, Value: uint32(lo)},
		engine.KV{Key: engine.SliceKeyHi, Value: uint32(hi)}), nil
}

// CheckSlice reports whether path is a slice of layers [lo, hi) of m's
// model: nil if so, an error wrapping fs.ErrNotExist if there is no file,
// ErrSlice if the file is another one.
func CheckSlice(m *Manifest, lo, hi int, path string) error {
	want, err := m.TensorsFor(lo, hi)
	if err != nil {
		return err
	}
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrSlice, err)
	}
	defer fh.Close()
	slo, shi, fp, ok, err := f.SliceRange()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrSlice, err)
	case !ok:
		return fmt.Errorf("%w: %s is not a slice", ErrSlice, path)
	case fp != m.Fingerprint || slo != lo || shi != hi:
		return fmt.Errorf("%w: %s is layers [%d, %d) of model %s, not [%d, %d) of %s", ErrSlice, path, slo, shi, fp, lo, hi, m.Fingerprint)
	case len(f.Tensors) != len(want):
		return fmt.Errorf("%w: %s has %d tensors, want %d", ErrSlice, path, len(f.Tensors), len(want))
	}
	for i, t := range want {
		g := f.Tensors[i]
		if t.Name != g.Name || t.Type != g.Type || !slices.Equal(t.Dims, g.Dims) || g.Size != t.Size {
			return fmt.Errorf("%w: %s: tensor %d is %q, want %q", ErrSlice, path, i, g.Name, t.Name)
		}
	}
	return nil
}
