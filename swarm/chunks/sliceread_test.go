package chunks

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// synthSlice writes at out a slice of layers [lo, hi) of the file at
// path shaped as a slice file would be without being any format: a
// prefix of junk, then the tensors of TensorsFor(lo, hi) at 64-byte
// aligned offsets of their own, and returns what its opener would find.
func synthSlice(t *testing.T, m *Manifest, path string, lo, hi int, out string) []Held {
	t.Helper()
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := m.TensorsFor(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{0xa5}, 777)
	var held []Held
	for _, x := range ts {
		for len(data)%64 != 0 {
			data = append(data, 0x5a) // padding a slice file may fill as it likes
		}
		held = append(held, Held{Name: x.Name, Type: x.Type, Size: x.Size, Offset: int64(len(data))})
		data = append(data, full[x.Offset:x.End()]...)
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return held
}

// openSynth opens the synthetic slice at out.
func openSynth(t *testing.T, m *Manifest, lo, hi int, out string, held []Held) *SliceReader {
	t.Helper()
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := NewSliceReader(m, lo, hi, fh, held, out)
	if err != nil {
		fh.Close()
		t.Fatal(err)
	}
	return sl
}

// A slice with its edges file rebuilds every chunk of its range as the
// full file has it, and no other; a damaged slice hands out nothing it
// cannot verify; a holder of only a slice serves its range to a fetcher,
// and a range beyond it is ErrNoHolders from that holder alone (which is
// not dropped: it just lacks the chunks).
func TestSliceReader(t *testing.T) {
	path, m := sixLayers(t)
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := holder(t, m, path, nil)
	b := chunkstest.NewHost(t)
	chunkstest.Connect(t, b, a)
	dir := t.TempDir()
	out := filepath.Join(dir, "0-3.slice")
	need, _ := m.ChunksFor(0, 3)
	part := out + PartSuffix
	if _, err := FetchPart(context.Background(), NewFetcher(b.Streams(), m), need, []peer.ID{a.ID()}, part); err != nil {
		t.Fatal(err)
	}
	held := synthSlice(t, m, path, 0, 3, out)

	// Without the edges file, only the chunks inside the tensor data.
	inner := openSynth(t, m, 0, 3, out, held)
	if n := len(inner.Chunks()); n == 0 || n >= len(need) {
		t.Fatalf("a slice without edges offers %d of its range's %d chunks", n, len(need))
	}
	inner.Close()

	pf, err := os.Open(part)
	if err != nil {
		t.Fatal(err)
	}
	err = WriteEdges(m, 0, 3, pf, out)
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	sl := openSynth(t, m, 0, 3, out, held)
	if got := len(sl.Chunks()); got != len(need) {
		t.Fatalf("slice offers %d chunks, its range has %d", got, len(need))
	}
	buf := make([]byte, m.ChunkSize)
	for _, i := range need {
		off, n := m.ChunkRange(i)
		if err := sl.ReadChunk(i, buf[:n]); err != nil {
			t.Fatalf("chunk %d of the slice's own range: %v", i, err)
		}
		if !bytes.Equal(buf[:n], full[off:off+n]) {
			t.Fatalf("chunk %d rebuilt differs from the file's", i)
		}
	}
	far, _ := m.ChunksFor(5, 6)
	_, n := m.ChunkRange(far[len(far)-1])
	if err := sl.ReadChunk(far[len(far)-1], buf[:n]); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("chunk outside the slice: %v", err)
	}

	// A tensor the model does not have, or of another size, is refused.
	bad := append([]Held(nil), held...)
	bad[1].Size++
	if _, err := NewSliceReader(m, 0, 3, bytes.NewReader(nil), bad, out); !errors.Is(err, ErrSlice) {
		t.Fatalf("tensor of another size: %v", err)
	}
	bad[1] = Held{Name: "blk.9.attn_q.weight", Offset: held[1].Offset}
	if _, err := NewSliceReader(m, 0, 3, bytes.NewReader(nil), bad, out); !errors.Is(err, ErrSlice) {
		t.Fatalf("tensor not in the model: %v", err)
	}

	// A flipped byte in a chunk rebuilt from the tensors: that chunk is no
	// longer handed out.
	ci, at := -1, int64(-1)
	for _, i := range need {
		if sl.edge[i] {
			continue
		}
		off, n := m.ChunkRange(i)
		for _, x := range held {
			tm, _ := m.Tensor(x.Name)
			if lo := max(off, tm.Offset); lo < min(off+n, tm.End()) {
				ci, at = i, x.Offset+lo-tm.Offset
				break
			}
		}
		if ci >= 0 {
			break
		}
	}
	if ci < 0 {
		t.Fatal("no chunk of the range is rebuilt from the slice's tensors")
	}
	damaged := filepath.Join(dir, "damaged.slice")
	data, _ := os.ReadFile(out)
	data[at] ^= 1
	if err := os.WriteFile(damaged, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ds := openSynth(t, m, 0, 3, damaged, held)
	defer ds.Close()
	_, n = m.ChunkRange(ci)
	if !ds.Has(ci) {
		t.Fatalf("chunk %d not offered", ci)
	}
	if err := ds.ReadChunk(ci, buf[:n]); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("chunk %d of a damaged slice: %v", ci, err)
	}

	srv := NewServer(b.Streams())
	t.Cleanup(func() { srv.Close() })
	if err := srv.ServeSlice(sl); err != nil {
		t.Fatal(err)
	}
	c := chunkstest.NewHost(t)
	chunkstest.Connect(t, c, b)
	f := NewFetcher(c.Streams(), m)
	for _, r := range [][2]int{{0, 3}, {1, 2}} {
		cs, _ := m.ChunksFor(r[0], r[1])
		cpart := filepath.Join(dir, "c"+PartSuffix)
		os.Remove(cpart)
		res, err := FetchPart(context.Background(), f, cs, []peer.ID{b.ID()}, cpart)
		if err != nil || res.Bytes != m.Bytes(cs) || res.PerPeer[b.ID()] != m.Bytes(cs) {
			t.Fatalf("%v from the slice holder: %d bytes (want %d), %v", r, res.Bytes, m.Bytes(cs), err)
		}
		samePart(t, m, path, cpart, cs)
	}
	cs, _ := m.ChunksFor(2, 5)
	cpart := filepath.Join(dir, "c-2-5"+PartSuffix)
	res, err := FetchPart(context.Background(), f, cs, []peer.ID{b.ID()}, cpart)
	if !errors.Is(err, ErrNoHolders) || len(res.Dropped) != 0 {
		t.Fatalf("range beyond the slice from its holder alone: %v, dropped %v", err, res.Dropped)
	}
	chunkstest.Connect(t, c, a)
	res, err = FetchPart(context.Background(), f, cs, []peer.ID{b.ID(), a.ID()}, cpart)
	if err != nil || len(res.Dropped) != 0 {
		t.Fatalf("range beyond the slice with the file's holder: %v, dropped %v", err, res.Dropped)
	}
	samePart(t, m, path, cpart, cs)
}

// A node moved from [0, 3) to [2, 5) copies the chunks the two ranges
// share from its old slice and fetches only the difference.
func TestReuseChunks(t *testing.T) {
	path, m := sixLayers(t)
	a := holder(t, m, path, nil)
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, a)
	f := NewFetcher(me.Streams(), m)
	dir := t.TempDir()
	old := filepath.Join(dir, "0-3.slice")
	oldNeed, _ := m.ChunksFor(0, 3)
	if _, err := FetchPart(context.Background(), f, oldNeed, []peer.ID{a.ID()}, old+PartSuffix); err != nil {
		t.Fatal(err)
	}
	held := synthSlice(t, m, path, 0, 3, old)
	pf, err := os.Open(old + PartSuffix)
	if err != nil {
		t.Fatal(err)
	}
	err = WriteEdges(m, 0, 3, pf, old)
	pf.Close()
	if err != nil {
		t.Fatal(err)
	}
	sl := openSynth(t, m, 0, 3, old, held)
	defer sl.Close()

	newNeed, _ := m.ChunksFor(2, 5)
	had := map[int]bool{}
	for _, i := range oldNeed {
		had[i] = true
	}
	var shared, diff []int
	for _, i := range newNeed {
		if had[i] {
			shared = append(shared, i)
		} else {
			diff = append(diff, i)
		}
	}
	if len(shared) == 0 || len(diff) == 0 {
		t.Fatalf("test ranges share %d chunks and differ by %d", len(shared), len(diff))
	}
	next := filepath.Join(dir, "2-5.slice")
	reused, err := ReuseChunks(m, 2, 5, next, []*SliceReader{sl})
	if err != nil || reused != m.Bytes(shared) {
		t.Fatalf("reused %d bytes (want %d), %v", reused, m.Bytes(shared), err)
	}
	res, err := FetchPart(context.Background(), f, newNeed, []peer.ID{a.ID()}, next+PartSuffix)
	if err != nil || res.Bytes != m.Bytes(diff) || res.Chunks != len(diff) {
		t.Fatalf("fetched %d bytes in %d chunks, want the difference: %d in %d; %v", res.Bytes, res.Chunks, m.Bytes(diff), len(diff), err)
	}
	samePart(t, m, path, next+PartSuffix, newNeed)
	if _, err := ReuseChunks(m, 4, 2, next, []*SliceReader{sl}); !errors.Is(err, ErrRange) {
		t.Fatalf("bad range: %v", err)
	}
}
