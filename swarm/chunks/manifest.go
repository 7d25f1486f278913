package chunks

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/stratanet/strata/internal/codec"
)

// Chunk size bounds. A chunk is the unit of transfer and of verification:
// small enough that a lie costs little to refetch, large enough that the
// per-request round trip is noise.
const (
	DefaultChunkSize = 4 << 20
	MinChunkSize     = 64 << 10
	MaxChunkSize     = 64 << 20
)

// Encoding bounds, checked before anything is allocated.
const (
	maxFingerprint = 128
	maxName        = 512
	maxTensors     = 1 << 20
	maxLayers      = 1 << 16
)

var manifestMagic = [4]byte{'S', 'C', 'M', 1}

// Tensor is one tensor of the file: its name, type, dims and the
// absolute byte range of its data. Type and Dims are the file format's,
// carried and compared but never interpreted here.
type Tensor struct {
	Name   string
	Type   uint32
	Dims   []uint64
	Offset int64
	Size   int64
}

// End is the offset just past the tensor's data.
func (t Tensor) End() int64 { return t.Offset + t.Size }

// Manifest describes one model file as chunks. Chunk i covers bytes
// [i·ChunkSize, min((i+1)·ChunkSize, FileSize)) of the file: the header
// (metadata and tensor table) is chunked and verified like the weights,
// so that a peer without the file learns the metadata from the chunks.
type Manifest struct {
	// Fingerprint is engine's File.Fingerprint of the file.
	Fingerprint string
	FileSize    int64
	// DataOffset is where the tensor data starts; bytes before it are the
	// header.
	DataOffset int64
	ChunkSize  int64
	// Layers is the model's block count.
	Layers  int
	Tensors []Tensor
	Hashes  [][sha256.Size]byte
}

// Layout is what a manifest says of a file besides its chunks: the
// engine reads it from the file's header (engine/slicefile), and this
// package takes it as given.
type Layout struct {
	// Fingerprint names the model the file holds (engine's
	// File.Fingerprint).
	Fingerprint string
	FileSize    int64
	// DataOffset is where the tensor data starts; bytes before it are the
	// header.
	DataOffset int64
	// Layers is the model's block count.
	Layers  int
	Tensors []Tensor
}

// BuildOption configures Build.
type BuildOption func(*buildConfig)

type buildConfig struct{ chunkSize int64 }

// WithChunkSize sets the chunk size (default DefaultChunkSize).
func WithChunkSize(n int64) BuildOption { return func(c *buildConfig) { c.chunkSize = n } }

// Build reads the file behind r, whose layout l describes, once, hashing
// every chunk, and checks that l describes one consistent file.
func Build(r io.ReaderAt, l Layout, opts ...BuildOption) (*Manifest, error) {
	c := buildConfig{chunkSize: DefaultChunkSize}
	for _, o := range opts {
		o(&c)
	}
	if c.chunkSize < MinChunkSize || c.chunkSize > MaxChunkSize {
		return nil, fmt.Errorf("%w: chunk size %d outside [%d, %d]", ErrManifest, c.chunkSize, MinChunkSize, MaxChunkSize)
	}
	m := &Manifest{Fingerprint: l.Fingerprint, FileSize: l.FileSize, DataOffset: l.DataOffset, ChunkSize: c.chunkSize, Layers: l.Layers}
	for _, t := range l.Tensors {
		if t.Size <= 0 {
			return nil, fmt.Errorf("%w: tensor %q of type %d has no known size", ErrManifest, t.Name, t.Type)
		}
		t.Dims = slices.Clone(t.Dims)
		m.Tensors = append(m.Tensors, t)
	}
	// A file of no bytes has no chunks to hash; validate refuses it.
	if m.FileSize > 0 {
		buf := make([]byte, c.chunkSize)
		for i := 0; i < m.NumChunks(); i++ {
			off, n := m.ChunkRange(i)
			if _, err := r.ReadAt(buf[:n], off); err != nil {
				return nil, fmt.Errorf("chunk %d: %w", i, err)
			}
			m.Hashes = append(m.Hashes, sha256.Sum256(buf[:n]))
		}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// NumChunks is the number of chunks of the file.
func (m *Manifest) NumChunks() int {
	return int((m.FileSize + m.ChunkSize - 1) / m.ChunkSize)
}

// ChunkRange is the offset and length of chunk i.
func (m *Manifest) ChunkRange(i int) (off, n int64) {
	off = int64(i) * m.ChunkSize
	return off, min(m.ChunkSize, m.FileSize-off)
}

// Verify reports whether data is chunk i.
func (m *Manifest) Verify(i int, data []byte) bool {
	if i < 0 || i >= len(m.Hashes) {
		return false
	}
	if _, n := m.ChunkRange(i); int64(len(data)) != n {
		return false
	}
	return sha256.Sum256(data) == m.Hashes[i]
}

// Tensor returns the tensor named name.
func (m *Manifest) Tensor(name string) (Tensor, bool) {
	for _, t := range m.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// blockOf is the layer of a "blk.N." tensor, or -1.
func blockOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Tensors a stage needs besides its blocks.
const (
	tokenEmbd  = "token_embd.weight"
	output     = "output.weight"
	outputNorm = "output_norm.weight"
)

// TensorsFor is the tensors a stage of layers [lo, hi) loads, in file
// order: its blocks; the embedding on the first stage; the head (and the
// embedding, when the head is tied to it) on the last; and tensors of no
// block that are neither (rope_freqs.weight) on every stage.
func (m *Manifest) TensorsFor(lo, hi int) ([]Tensor, error) {
	if lo < 0 || hi > m.Layers || lo >= hi {
		return nil, fmt.Errorf("%w: [%d, %d) of a %d-layer model", ErrRange, lo, hi, m.Layers)
	}
	first, last := lo == 0, hi == m.Layers
	_, untied := m.Tensor(output)
	var out []Tensor
	for _, t := range m.Tensors {
		keep := false
		switch b := blockOf(t.Name); {
		case b >= 0:
			keep = b >= lo && b < hi
		case t.Name == tokenEmbd:
			keep = first || (last && !untied)
		case t.Name == output || t.Name == outputNorm:
			keep = last
		default:
			keep = true
		}
		if keep {
			out = append(out, t)
		}
	}
	return out, nil
}

// ChunksFor is the sorted chunks that hold the header and the tensors of
// TensorsFor(lo, hi).
func (m *Manifest) ChunksFor(lo, hi int) ([]int, error) {
	ts, err := m.TensorsFor(lo, hi)
	if err != nil {
		return nil, err
	}
	// Tensors do not overlap (validate), so this walks each chunk about once.
	need := make([]bool, m.NumChunks())
	span := func(off, end int64) {
		for i := off / m.ChunkSize; i*m.ChunkSize < end; i++ {
			need[i] = true
		}
	}
	span(0, m.DataOffset)
	for _, t := range ts {
		span(t.Offset, t.End())
	}
	var out []int
	for i, ok := range need {
		if ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// RangeBytes is what a node without the file fetches to serve layers
// [lo, hi): the bytes of ChunksFor(lo, hi). Placement can divide it by a
// node's link rate to cost a move.
func (m *Manifest) RangeBytes(lo, hi int) (int64, error) {
	cs, err := m.ChunksFor(lo, hi)
	if err != nil {
		return 0, err
	}
	return m.Bytes(cs), nil
}

// Bytes is the total length of the given chunks.
func (m *Manifest) Bytes(chunks []int) int64 {
	var n int64
	for _, i := range chunks {
		_, l := m.ChunkRange(i)
		n += l
	}
	return n
}

// MarshalBinary encodes the manifest: a magic and version, then uvarints
// and length-prefixed strings, then the chunk hashes.
func (m *Manifest) MarshalBinary() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	b := append([]byte(nil), manifestMagic[:]...)
	str := func(s string) { b = binary.AppendUvarint(b, uint64(len(s))); b = append(b, s...) }
	uv := func(v uint64) { b = binary.AppendUvarint(b, v) }
	str(m.Fingerprint)
	uv(uint64(m.FileSize))
	uv(uint64(m.DataOffset))
	uv(uint64(m.ChunkSize))
	uv(uint64(m.Layers))
	uv(uint64(len(m.Tensors)))
	for _, t := range m.Tensors {
		str(t.Name)
		uv(uint64(t.Type))
		b = append(b, byte(len(t.Dims)))
		for _, d := range t.Dims {
			uv(d)
		}
		uv(uint64(t.Offset))
		uv(uint64(t.Size))
	}
	uv(uint64(len(m.Hashes)))
	for _, h := range m.Hashes {
		b = append(b, h[:]...)
	}
	return b, nil
}

// UnmarshalBinary decodes a manifest and checks that it describes a
// consistent file. Every failure wraps ErrManifest.
func (m *Manifest) UnmarshalBinary(b []byte) error {
	r := codec.NewReader(b, binary.LittleEndian, ErrManifest)
	if magic := r.Take(4, "magic"); r.Err() == nil && [4]byte(magic) != manifestMagic {
		r.Fail("magic %x (want %x)", magic, manifestMagic[:])
	}
	str := func(what string, limit int) string {
		n := r.Uvarint(what+" length", uint64(limit))
		return string(r.Take(int(n), what))
	}
	const maxSize = 1 << 50
	var out Manifest
	out.Fingerprint = str("fingerprint", maxFingerprint)
	out.FileSize = int64(r.Uvarint("file size", maxSize))
	out.DataOffset = int64(r.Uvarint("data offset", maxSize))
	out.ChunkSize = int64(r.Uvarint("chunk size", MaxChunkSize))
	out.Layers = int(r.Uvarint("layers", maxLayers))
	// A tensor takes at least 6 bytes: a 1-byte name and five 1-byte fields.
	nt := r.Uvarint("tensor count", min(maxTensors, uint64(r.Len()/6)))
	if r.Err() != nil {
		return r.Err()
	}
	out.Tensors = make([]Tensor, 0, nt)
	for i := uint64(0); i < nt && r.Err() == nil; i++ {
		var t Tensor
		t.Name = str("tensor name", maxName)
		t.Type = uint32(r.Uvarint("tensor type", 1<<31))
		nd := r.U8("dims count")
		if r.Err() == nil && (nd == 0 || nd > 4) {
			r.Fail("tensor %q has %d dims", t.Name, nd)
		}
		for d := 0; d < int(nd) && r.Err() == nil; d++ {
			t.Dims = append(t.Dims, r.Uvarint("dim", 1<<40))
		}
		t.Offset = int64(r.Uvarint("tensor offset", maxSize))
		t.Size = int64(r.Uvarint("tensor size", maxSize))
		out.Tensors = append(out.Tensors, t)
	}
	nh := r.Uvarint("chunk count", uint64(r.Len()/sha256.Size))
	if r.Err() != nil {
		return r.Err()
	}
	out.Hashes = make([][sha256.Size]byte, nh)
	for i := range out.Hashes {
		if h := r.Take(sha256.Size, "chunk hash"); h != nil {
			out.Hashes[i] = [sha256.Size]byte(h)
		}
	}
	r.End()
	if r.Err() != nil {
		return r.Err()
	}
	if err := out.validate(); err != nil {
		return err
	}
	*m = out
	return nil
}

// validate checks that the manifest describes one consistent file.
func (m *Manifest) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrManifest, fmt.Sprintf(format, a...))
	}
	switch {
	case m.Fingerprint == "" || len(m.Fingerprint) > maxFingerprint:
		return bad("fingerprint of %d bytes", len(m.Fingerprint))
	case m.ChunkSize < MinChunkSize || m.ChunkSize > MaxChunkSize:
		return bad("chunk size %d outside [%d, %d]", m.ChunkSize, MinChunkSize, MaxChunkSize)
	case m.FileSize <= 0 || m.DataOffset <= 0 || m.DataOffset > m.FileSize:
		return bad("data offset %d of a %d-byte file", m.DataOffset, m.FileSize)
	case m.Layers <= 0 || m.Layers > maxLayers:
		return bad("%d layers", m.Layers)
	case len(m.Hashes) != m.NumChunks():
		return bad("%d chunk hashes for %d chunks", len(m.Hashes), m.NumChunks())
	case len(m.Tensors) == 0 || len(m.Tensors) > maxTensors:
		return bad("%d tensors", len(m.Tensors))
	}
	seen := make(map[string]bool, len(m.Tensors))
	for _, t := range m.Tensors {
		switch {
		case t.Name == "" || len(t.Name) > maxName || seen[t.Name]:
			return bad("empty, long or duplicate tensor name %q", t.Name)
		case len(t.Dims) == 0 || len(t.Dims) > 4:
			return bad("tensor %q has %d dims", t.Name, len(t.Dims))
		case t.Offset < m.DataOffset || t.Size <= 0 || t.Size > m.FileSize-t.Offset:
			return bad("tensor %q: data [%d, +%d) outside the data section [%d, %d)", t.Name, t.Offset, t.Size, m.DataOffset, m.FileSize)
		}
		for _, d := range t.Dims {
			if d == 0 || d > 1<<40 {
				return bad("tensor %q has dims %v", t.Name, t.Dims)
			}
		}
		if b := blockOf(t.Name); b >= m.Layers {
			return bad("tensor %q of a %d-layer model", t.Name, m.Layers)
		}
		seen[t.Name] = true
	}
	// Overlapping tensors would make ChunksFor's work quadratic, and no
	// real file has them.
	byOffset := slices.Clone(m.Tensors)
	slices.SortFunc(byOffset, func(a, b Tensor) int { return cmp.Compare(a.Offset, b.Offset) })
	for i := 1; i < len(byOffset); i++ {
		if a, b := byOffset[i-1], byOffset[i]; b.Offset < a.End() {
			return bad("tensors %q and %q overlap", a.Name, b.Name)
		}
	}
	return nil
}

// ID is the SHA-256 of the manifest's encoding: what a swarm's replicated
// state can commit to.
func (m *Manifest) ID() ([sha256.Size]byte, error) {
	b, err := m.MarshalBinary()
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(b), nil
}
