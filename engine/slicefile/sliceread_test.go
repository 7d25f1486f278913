package slicefile

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks"
	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// A node that holds only a slice serves that slice's chunks: a joiner
// fetches a range inside it from the slice holder alone, with the file's
// holder gone, and gets the same slice; a range beyond it is chunks.ErrNoHolders
// from the slice holder alone (which is not dropped: it just lacks the
// chunks), and complete with the file's holder beside it.
func TestFetchFromSliceHolder(t *testing.T) {
	path, m := genModel(t, sixLayers())
	a := holder(t, m, path, nil)
	b := chunkstest.NewHost(t)
	chunkstest.Connect(t, b, a)
	dir := t.TempDir()
	bSlice := filepath.Join(dir, "b-0-3.gguf")
	if _, err := FetchSlice(context.Background(), chunks.NewFetcher(b.Streams(), m), 0, 3, []peer.ID{a.ID()}, bSlice); err != nil {
		t.Fatal(err)
	}
	sl, err := OpenSlice(m, bSlice)
	if err != nil {
		t.Fatal(err)
	}
	need, _ := m.ChunksFor(0, 3)
	buf := make([]byte, m.ChunkSize)
	for _, i := range need {
		_, n := m.ChunkRange(i)
		if err := sl.ReadChunk(i, buf[:n]); err != nil {
			t.Fatalf("chunk %d of the slice's own range: %v", i, err)
		}
	}
	if got := len(sl.Chunks()); got != len(need) {
		t.Fatalf("slice offers %d chunks, its range has %d", got, len(need))
	}
	far, _ := m.ChunksFor(5, 6)
	_, n := m.ChunkRange(far[len(far)-1])
	if err := sl.ReadChunk(far[len(far)-1], buf[:n]); !errors.Is(err, chunks.ErrUnavailable) {
		t.Fatalf("chunk outside the slice: %v", err)
	}
	srv := chunks.NewServer(b.Streams())
	t.Cleanup(func() { srv.Close() })
	if err := srv.ServeSlice(sl); err != nil {
		t.Fatal(err)
	}

	c := chunkstest.NewHost(t)
	chunkstest.Connect(t, c, b)
	f := chunks.NewFetcher(c.Streams(), m)
	for _, r := range [][2]int{{0, 3}, {1, 2}} {
		out := filepath.Join(dir, "c.gguf")
		os.Remove(out)
		res, err := FetchSlice(context.Background(), f, r[0], r[1], []peer.ID{b.ID()}, out)
		want, _ := m.RangeBytes(r[0], r[1])
		if err != nil || res.Bytes != want || res.PerPeer[b.ID()] != want {
			t.Fatalf("%v from the slice holder: %d bytes (want %d), %v", r, res.Bytes, want, err)
		}
		if r == [2]int{0, 3} {
			got, _ := os.ReadFile(out)
			orig, _ := os.ReadFile(bSlice)
			if !bytes.Equal(got, orig) {
				t.Fatal("slice fetched from a slice holder differs from its source")
			}
		}
	}
	out := filepath.Join(dir, "c-2-5.gguf")
	res, err := FetchSlice(context.Background(), f, 2, 5, []peer.ID{b.ID()}, out)
	if !errors.Is(err, chunks.ErrNoHolders) || len(res.Dropped) != 0 {
		t.Fatalf("range beyond the slice from its holder alone: %v, dropped %v", err, res.Dropped)
	}
	chunkstest.Connect(t, c, a)
	res, err = FetchSlice(context.Background(), f, 2, 5, []peer.ID{b.ID(), a.ID()}, out)
	if err != nil || len(res.Dropped) != 0 {
		t.Fatalf("range beyond the slice with the file's holder: %v, dropped %v", err, res.Dropped)
	}
	if err := CheckSlice(m, 2, 5, out); err != nil {
		t.Fatal(err)
	}
}

// A node moved from [0, 3) to [2, 5) copies the chunks the two ranges
// share from its old slice and fetches only the difference.
func TestReuseSlices(t *testing.T) {
	path, m := genModel(t, sixLayers())
	a := holder(t, m, path, nil)
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, a)
	f := chunks.NewFetcher(me.Streams(), m)
	dir := t.TempDir()
	old := filepath.Join(dir, "0-3.gguf")
	if _, err := FetchSlice(context.Background(), f, 0, 3, []peer.ID{a.ID()}, old); err != nil {
		t.Fatal(err)
	}
	oldNeed, _ := m.ChunksFor(0, 3)
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
	next := filepath.Join(dir, "2-5.gguf")
	reused, err := ReuseSlices(m, 2, 5, next, []string{old, filepath.Join(dir, "missing.gguf")})
	if err != nil || reused != m.Bytes(shared) {
		t.Fatalf("reused %d bytes (want %d), %v", reused, m.Bytes(shared), err)
	}
	res, err := FetchSlice(context.Background(), f, 2, 5, []peer.ID{a.ID()}, next)
	if err != nil || res.Bytes != m.Bytes(diff) || res.Chunks != len(diff) {
		t.Fatalf("fetched %d bytes in %d chunks, want the difference: %d in %d; %v", res.Bytes, res.Chunks, m.Bytes(diff), len(diff), err)
	}
	if err := CheckSlice(m, 2, 5, next); err != nil {
		t.Fatal(err)
	}
}
