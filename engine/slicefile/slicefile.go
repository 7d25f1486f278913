package slicefile

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
	"github.com/stratanet/strata/swarm/chunks"
)

// tokenEmbd is the embedding: a middle slice takes the vocabulary size
// from its dims when the metadata lacks it.
const tokenEmbd = "token_embd.weight"

// Layout reads what a manifest says of the GGUF file f (size bytes)
// besides its chunks: the fingerprint, the data offset, the block count
// and the tensor table.
func Layout(f *engine.File, size int64) (chunks.Layout, error) {
	fp, err := f.Fingerprint()
	if err != nil {
		return chunks.Layout{}, err
	}
	arch, err := f.String("general.architecture")
	if err != nil {
		return chunks.Layout{}, err
	}
	layers, err := f.Uint(arch + ".block_count")
	if err != nil {
		return chunks.Layout{}, err
	}
	l := chunks.Layout{Fingerprint: fp, FileSize: size, DataOffset: f.DataOffset, Layers: int(layers)}
	for _, t := range f.Tensors {
		if t.Size <= 0 {
			return chunks.Layout{}, fmt.Errorf("%w: tensor %q of type %s has no known size", chunks.ErrManifest, t.Name, t.Type)
		}
		l.Tensors = append(l.Tensors, chunks.Tensor{Name: t.Name, Type: uint32(t.Type), Dims: slices.Clone(t.Dims), Offset: t.Offset, Size: t.Size})
	}
	return l, nil
}

// Build reads the GGUF file behind r (size bytes) once and builds its
// manifest.
func Build(r io.ReaderAt, size int64, opts ...chunks.BuildOption) (*chunks.Manifest, error) {
	f, err := engine.ReadFile(r, size)
	if err != nil {
		return nil, err
	}
	l, err := Layout(f, size)
	if err != nil {
		return nil, err
	}
	return chunks.Build(r, l, opts...)
}

// BuildManifest builds the manifest of the GGUF file at path.
func BuildManifest(path string, opts ...chunks.BuildOption) (*chunks.Manifest, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	m, err := Build(fh, st.Size(), opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// FetchSlice makes path a GGUF slice of layers [lo, hi) of the fetcher's
// model: the full file's metadata and the tensors TensorsFor(lo, hi)
// names, loadable with engine.Open. A slice already at path for the same
// model and range is kept and nothing is fetched; a different file there
// is a chunks.ErrSlice and is left alone. Chunks already in
// path+chunks.PartSuffix are verified and not fetched again.
func FetchSlice(ctx context.Context, f *chunks.Fetcher, lo, hi int, holders []peer.ID, path string) (chunks.Result, error) {
	m := f.Manifest()
	want, err := m.TensorsFor(lo, hi)
	if err != nil {
		return chunks.Result{}, err
	}
	switch err := CheckSlice(m, lo, hi, path); {
	case err == nil:
		return chunks.Result{}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return chunks.Result{}, err
	}
	need, err := m.ChunksFor(lo, hi)
	if err != nil {
		return chunks.Result{}, err
	}
	partPath := path + chunks.PartSuffix
	res, err := chunks.FetchPart(ctx, f, need, holders, partPath)
	if err != nil {
		return res, err
	}
	part, err := os.Open(partPath)
	if err != nil {
		return res, err
	}
	defer part.Close()
	if err := writeSlice(m, lo, hi, want, part, path); err != nil {
		return res, err
	}
	if err := chunks.WriteEdges(m, lo, hi, part, path); err != nil {
		return res, err
	}
	part.Close()
	return res, os.Remove(partPath)
}

// writeSlice writes the slice from the verified chunks in part, through a
// temporary file renamed into place.
func writeSlice(m *chunks.Manifest, lo, hi int, want []chunks.Tensor, part io.ReaderAt, path string) error {
	// The header's chunks are verified, so this is the model's own header;
	// it must agree with the manifest's tensor table, or the manifest lies.
	f, err := engine.ReadFile(part, m.FileSize)
	if err != nil {
		return fmt.Errorf("%w: header from verified chunks: %w", chunks.ErrManifest, err)
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
		ts[i] = engine.WriteTensor{Name: t.Name, Dims: t.Dims, Type: engine.DType(t.Type), Data: func(w io.Writer) error {
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
func sameTable(ts []chunks.Tensor, f *engine.File) error {
	if len(ts) != len(f.Tensors) {
		return fmt.Errorf("%w: %d tensors, the file's header %d", chunks.ErrManifest, len(ts), len(f.Tensors))
	}
	for i, t := range ts {
		g := f.Tensors[i]
		if t.Name != g.Name || engine.DType(t.Type) != g.Type || !slices.Equal(t.Dims, g.Dims) || t.Offset != g.Offset || t.Size != g.Size {
			return fmt.Errorf("%w: tensor %d is %q %s %v at %d, the file's header says %q %s %v at %d",
				chunks.ErrManifest, i, t.Name, engine.DType(t.Type), t.Dims, t.Offset, g.Name, g.Type, g.Dims, g.Offset)
		}
	}
	return nil
}

// sliceKVs is the full file's metadata, marked as a slice. WriteGGUF
// aligns to 32 bytes, so the alignment key says so; a middle slice has no
// embedding to take the vocabulary size from, so the key carries it.
func sliceKVs(m *chunks.Manifest, f *engine.File, lo, hi int) ([]engine.KV, error) {
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
			return nil, fmt.Errorf("%w: no %s to take the vocabulary size from", chunks.ErrManifest, tokenEmbd)
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
// chunks.ErrSlice if the file is another one.
func CheckSlice(m *chunks.Manifest, lo, hi int, path string) error {
	want, err := m.TensorsFor(lo, hi)
	if err != nil {
		return err
	}
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("%w: %w", chunks.ErrSlice, err)
	}
	defer fh.Close()
	slo, shi, fp, ok, err := f.SliceRange()
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", chunks.ErrSlice, err)
	case !ok:
		return fmt.Errorf("%w: %s is not a slice", chunks.ErrSlice, path)
	case fp != m.Fingerprint || slo != lo || shi != hi:
		return fmt.Errorf("%w: %s is layers [%d, %d) of model %s, not [%d, %d) of %s", chunks.ErrSlice, path, slo, shi, fp, lo, hi, m.Fingerprint)
	case len(f.Tensors) != len(want):
		return fmt.Errorf("%w: %s has %d tensors, want %d", chunks.ErrSlice, path, len(f.Tensors), len(want))
	}
	for i, t := range want {
		g := f.Tensors[i]
		if t.Name != g.Name || engine.DType(t.Type) != g.Type || !slices.Equal(t.Dims, g.Dims) || g.Size != t.Size {
			return fmt.Errorf("%w: %s: tensor %d is %q, want %q", chunks.ErrSlice, path, i, g.Name, t.Name)
		}
	}
	return nil
}

// OpenSlice opens the GGUF slice at path of m's model for serving and
// reusing its chunks (see chunks.SliceReader), with its edges file when
// there is one. Closing the reader closes the file.
func OpenSlice(m *chunks.Manifest, path string) (*chunks.SliceReader, error) {
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", chunks.ErrSlice, err)
	}
	lo, hi, fp, ok, err := f.SliceRange()
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", chunks.ErrSlice, err)
	case !ok:
		err = fmt.Errorf("%w: %s is not a slice", chunks.ErrSlice, path)
	case fp != m.Fingerprint:
		err = fmt.Errorf("%w: %s is a slice of model %.16s, not %.16s", chunks.ErrSlice, path, fp, m.Fingerprint)
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	held := make([]chunks.Held, len(f.Tensors))
	for i, g := range f.Tensors {
		held[i] = chunks.Held{Name: g.Name, Type: uint32(g.Type), Size: g.Size, Offset: g.Offset}
	}
	sl, err := chunks.NewSliceReader(m, lo, hi, fh, held, path)
	if err != nil {
		fh.Close()
		return nil, err
	}
	return sl, nil
}

// ReuseSlices copies into path+chunks.PartSuffix, where FetchSlice of
// [lo, hi) finds them, the chunks of that range that the slices at olds
// hold, and returns their bytes: a node moved to a new range fetches only
// the difference. A slice that does not open is skipped.
func ReuseSlices(m *chunks.Manifest, lo, hi int, path string, olds []string) (int64, error) {
	if _, err := m.ChunksFor(lo, hi); err != nil {
		return 0, err
	}
	var srcs []*chunks.SliceReader
	for _, o := range olds {
		if sl, err := OpenSlice(m, o); err == nil {
			defer sl.Close()
			srcs = append(srcs, sl)
		}
	}
	return chunks.ReuseChunks(m, lo, hi, path, srcs)
}
