package chunks

import (
	"context"
	"io"
	"os"

	"github.com/libp2p/go-libp2p/core/peer"
)

// PartSuffix names the file that collects a slice's chunks, at their
// offsets in the full file (sparse), until the slice is written. It
// survives a stop, so a restart fetches only the chunks it lacks.
const PartSuffix = ".part"

// EdgesSuffix names the side file of a slice that holds, at their offsets
// in the full file (sparse), the chunks the slice cannot rebuild.
const EdgesSuffix = ".edges"

// FetchPart fetches the chunks need into the part file at part (created
// if absent), sized to the full file. Chunks already there that verify
// are not fetched again. The file is synced before FetchPart returns
// without error.
func FetchPart(ctx context.Context, f *Fetcher, need []int, holders []peer.ID, part string) (Result, error) {
	m := f.m
	fh, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return Result{}, err
	}
	defer fh.Close()
	missing, err := missingChunks(m, fh, need)
	if err != nil {
		return Result{}, err
	}
	res, err := f.Fetch(ctx, missing, holders, func(i int, data []byte) error {
		off, _ := m.ChunkRange(i)
		_, err := fh.WriteAt(data, off)
		return err
	})
	if err != nil {
		return res, err
	}
	if err := fh.Sync(); err != nil {
		return res, err
	}
	return res, fh.Close()
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

// WriteEdges writes the chunks of [lo, hi) that a slice of that range
// cannot rebuild (see SliceReader), read from part, into
// path+EdgesSuffix. Without them a slice could serve only its inner
// chunks.
func WriteEdges(m *Manifest, lo, hi int, part io.ReaderAt, path string) error {
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

// ReuseChunks copies into path+PartSuffix, where FetchPart finds them, the
// chunks of [lo, hi) that srcs hold, and returns their bytes: a node moved
// to a new range fetches only the difference. It does not close srcs.
func ReuseChunks(m *Manifest, lo, hi int, path string, srcs []*SliceReader) (int64, error) {
	need, err := m.ChunksFor(lo, hi)
	if err != nil {
		return 0, err
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
