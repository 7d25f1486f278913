package chunks

import (
	"fmt"
	"io"
	"os"
)

// SliceReader reads the chunks of the full file that a slice holds (a
// file with some of the full file's tensors at other offsets, such as
// engine/slicefile writes): a node that holds only a slice serves them,
// and a node moved to another range reuses them. A chunk inside the
// tensor data is put back together from the slice's tensors and zeros for
// the padding between them. The chunks that also hold bytes the slice
// lacks (the header's, and those at the ends of its runs of tensors) sit
// whole in a sparse side file (path+EdgesSuffix, see WriteEdges). A chunk
// is handed out only when its hash is the manifest's.
type SliceReader struct {
	m      *Manifest
	slice  io.ReaderAt
	closer io.Closer
	edges  *os.File // nil: none
	held   []heldTensor
	has    []bool
	edge   []bool // has[i] from the edges file
	lo, hi int
	path   string
}

// heldTensor is a tensor of the slice: where it is in the full file and
// where in the slice.
type heldTensor struct{ off, size, sliceOff int64 }

// Held is a tensor that a slice file holds, as the file's opener found
// it: its name, type and size (which must be the manifest's), and where
// its data starts in the slice file.
type Held struct {
	Name   string
	Type   uint32
	Size   int64
	Offset int64
}

// NewSliceReader reads the chunks of m's file that the slice at path
// holds: layers [lo, hi) of m's model, whose tensors held are read from
// r. It opens path+EdgesSuffix when there is one (without, the slice
// offers only the chunks inside its tensor data). Close closes r, when it
// is an io.Closer, and the edges file; on an error r is left open.
func NewSliceReader(m *Manifest, lo, hi int, r io.ReaderAt, held []Held, path string) (*SliceReader, error) {
	if lo < 0 || hi > m.Layers || lo >= hi {
		return nil, fmt.Errorf("%w: %s is layers [%d, %d) of a %d-layer model", ErrSlice, path, lo, hi, m.Layers)
	}
	s := &SliceReader{m: m, slice: r, has: make([]bool, m.NumChunks()), edge: make([]bool, m.NumChunks()), lo: lo, hi: hi, path: path}
	s.closer, _ = r.(io.Closer)
	in := map[string]bool{}
	for _, g := range held {
		t, ok := m.Tensor(g.Name)
		if !ok || t.Size != g.Size || t.Type != g.Type {
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
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}

// Manifest is the manifest the slice's chunks are checked against.
func (s *SliceReader) Manifest() *Manifest { return s.m }
