package chunks

import (
	"fmt"
	"io"
	"os"

	"github.com/stratanet/strata/engine"
)

// SliceReader reads the chunks of the full file that a GGUF slice (see
// FetchSlice) holds: a node that holds only a slice serves them, and a
// node moved to another range reuses them. The slice's tensors sit at
// other offsets than in the full file, so a chunk inside the tensor data
// is put back together from the slice's tensors and zeros for the padding
// between them. The chunks that also hold bytes the slice lacks (the
// header's, and those at the ends of its runs of tensors) FetchSlice keeps
// whole in a sparse side file (path+EdgesSuffix). A chunk is handed out
// only when its hash is the manifest's.
type SliceReader struct {
	m      *Manifest
	slice  *os.File
	edges  *os.File // nil: none
	held   []heldTensor
	has    []bool
	edge   []bool // has[i] from the edges file
	lo, hi int
	path   string
}

// EdgesSuffix names the side file of a slice that holds, at their offsets
// in the full file (sparse), the chunks the slice cannot rebuild.
const EdgesSuffix = ".edges"

// edgeChunks is the chunks of need that the tensors of [lo, hi) cannot
// rebuild: those with header bytes or bytes of another tensor.
func edgeChunks(m *Manifest, lo, hi int, need []int) ([]bool, error) {
	ts, err := m.TensorsFor(lo, hi)
	if err != nil {
		return nil, err
	}
	in := map[string]bool{}
	for _, t := range ts {
		in[t.Name] = true
	}
	out := make([]bool, m.NumChunks())
	for _, i := range need {
		out[i] = true
	}
	rebuild := make([]bool, m.NumChunks())
	for i := range rebuild {
		rebuild[i] = true
	}
	lack := func(off, end int64) {
		for i := off / m.ChunkSize; i*m.ChunkSize < end && int(i) < len(rebuild); i++ {
			rebuild[i] = false
		}
	}
	lack(0, m.DataOffset)
	for _, t := range m.Tensors {
		if !in[t.Name] {
			lack(t.Offset, t.End())
		}
	}
	for i := range out {
		out[i] = out[i] && !rebuild[i]
	}
	return out, nil
}

// writeEdges writes the edge chunks of [lo, hi), read from part, into
// path+EdgesSuffix.
func writeEdges(m *Manifest, lo, hi int, part io.ReaderAt, path string) error {
	need, err := m.ChunksFor(lo, hi)
	if err != nil {
		return err
	}
	edge, err := edgeChunks(m, lo, hi, need)
	if err != nil {
		return err
	}
	tmp := path + EdgesSuffix + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = out.Truncate(m.FileSize)
	buf := make([]byte, m.ChunkSize)
	for i, ok := range edge {
		if !ok || err != nil {
			continue
		}
		off, n := m.ChunkRange(i)
		if _, err = part.ReadAt(buf[:n], off); err == nil {
			_, err = out.WriteAt(buf[:n], off)
		}
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path+EdgesSuffix)
}

// heldTensor is a tensor of the slice: where it is in the full file and
// where in the slice.
type heldTensor struct{ off, size, sliceOff int64 }

// OpenSlice opens the slice at path of m's model, and its edges file when
// there is one (without, the slice offers only the chunks inside its
// tensor data). Close closes them.
func OpenSlice(m *Manifest, path string) (*SliceReader, error) {
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSlice, err)
	}
	lo, hi, fp, ok, err := f.SliceRange()
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrSlice, err)
	case !ok:
		err = fmt.Errorf("%w: %s is not a slice", ErrSlice, path)
	case fp != m.Fingerprint:
		err = fmt.Errorf("%w: %s is a slice of model %.16s, not %.16s", ErrSlice, path, fp, m.Fingerprint)
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	s := &SliceReader{m: m, slice: fh, has: make([]bool, m.NumChunks()), edge: make([]bool, m.NumChunks()), lo: lo, hi: hi, path: path}
	in := map[string]bool{}
	for _, g := range f.Tensors {
		t, ok := m.Tensor(g.Name)
		if !ok || t.Size != g.Size || t.Type != g.Type {
			fh.Close()
			return nil, fmt.Errorf("%w: %s: tensor %q is not the model's", ErrSlice, path, g.Name)
		}
		in[t.Name] = true
		s.held = append(s.held, heldTensor{off: t.Offset, size: t.Size, sliceOff: g.Offset})
	}
	for i := range s.has {
		s.has[i] = true
	}
	// A chunk with a byte of a tensor the slice lacks cannot be rebuilt.
	lack := func(off, end int64) {
		for i := off / m.ChunkSize; i*m.ChunkSize < end && int(i) < len(s.has); i++ {
			s.has[i] = false
		}
	}
	lack(0, m.DataOffset)
	for _, t := range m.Tensors {
		if !in[t.Name] {
			lack(t.Offset, t.End())
		}
	}
	// The edges file's chunks are checked once here: there are few.
	if ef, err := os.Open(path + EdgesSuffix); err == nil {
		buf := make([]byte, m.ChunkSize)
		for i := range s.has {
			if s.has[i] {
				continue
			}
			off, n := m.ChunkRange(i)
			if _, err := ef.ReadAt(buf[:n], off); err == nil && m.Verify(i, buf[:n]) {
				s.has[i], s.edge[i] = true, true
			}
		}
		s.edges = ef
	}
	return s, nil
}

// Range is the slice's layer range.
func (s *SliceReader) Range() (lo, hi int) { return s.lo, s.hi }

// Has reports whether the slice holds what chunk i needs (its hash is
// checked only when it is read).
func (s *SliceReader) Has(i int) bool { return i >= 0 && i < len(s.has) && s.has[i] }

// Chunks is the chunks the slice may hold, in order.
func (s *SliceReader) Chunks() []int {
	var out []int
	for i, ok := range s.has {
		if ok {
			out = append(out, i)
		}
	}
	return out
}

// ReadChunk reads chunk i into buf, which has the chunk's length. It
// reports ErrUnavailable when the slice does not hold the chunk or the
// rebuilt bytes are not the manifest's (padding that was not zeros, a
// damaged slice).
func (s *SliceReader) ReadChunk(i int, buf []byte) error {
	if !s.Has(i) {
		return fmt.Errorf("%w: chunk %d is not in slice [%d, %d)", ErrUnavailable, i, s.lo, s.hi)
	}
	off, n := s.m.ChunkRange(i)
	if int64(len(buf)) != n {
		return fmt.Errorf("%w: chunk %d has %d bytes, buffer %d", ErrRange, i, n, len(buf))
	}
	if err := s.readChunkAt(i, buf, off); err != nil {
		return err
	}
	if !s.m.Verify(i, buf) {
		return fmt.Errorf("%w: chunk %d rebuilt from slice [%d, %d) does not match its hash", ErrUnavailable, i, s.lo, s.hi)
	}
	return nil
}

// readChunkAt reads chunk i (at off): from the edges file, or rebuilt
// from the held tensors with zeros between them.
func (s *SliceReader) readChunkAt(i int, p []byte, off int64) error {
	if s.edge[i] {
		_, err := s.edges.ReadAt(p, off)
		return err
	}
	clear(p)
	end := off + int64(len(p))
	for _, t := range s.held {
		a, b := max(off, t.off), min(end, t.off+t.size)
		if a >= b {
			continue
		}
		if _, err := s.slice.ReadAt(p[a-off:b-off], t.sliceOff+a-t.off); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrSlice, s.path, err)
		}
	}
	return nil
}

// Close closes the slice file and its edges file.
func (s *SliceReader) Close() error {
	if s.edges != nil {
		s.edges.Close()
	}
	return s.slice.Close()
}

// ReuseSlices copies into path+PartSuffix, where FetchSlice of [lo, hi)
// finds them, the chunks of that range that the slices at olds hold, and
// returns their bytes: a node moved to a new range fetches only the
// difference. A slice that does not open is skipped.
func ReuseSlices(m *Manifest, lo, hi int, path string, olds []string) (int64, error) {
	need, err := m.ChunksFor(lo, hi)
	if err != nil {
		return 0, err
	}
	var srcs []*SliceReader
	for _, o := range olds {
		if sl, err := OpenSlice(m, o); err == nil {
			defer sl.Close()
			srcs = append(srcs, sl)
		}
	}
	if len(srcs) == 0 {
		return 0, nil
	}
	part, err := os.OpenFile(path+PartSuffix, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer part.Close()
	if err := part.Truncate(m.FileSize); err != nil {
		return 0, err
	}
	var n int64
	buf := make([]byte, m.ChunkSize)
	for _, i := range need {
		off, l := m.ChunkRange(i)
		if _, err := part.ReadAt(buf[:l], off); err == nil && m.Verify(i, buf[:l]) {
			continue // there already (a fetch cut short)
		}
		for _, sl := range srcs {
			if sl.ReadChunk(i, buf[:l]) == nil {
				if _, err := part.WriteAt(buf[:l], off); err != nil {
					return n, err
				}
				n += l
				break
			}
		}
	}
	return n, part.Sync()
}
