package chunks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// holder serves a file (or a reader over it) from a new host, and the
// fetcher's host connects to it.
func holder(t *testing.T, m *Manifest, path string, wrap func(*os.File) interface {
	ReadAt([]byte, int64) (int, error)
}) *swarm.Host {
	t.Helper()
	h := chunkstest.NewHost(t)
	s := NewServer(h.Streams())
	t.Cleanup(func() { s.Close() })
	if wrap == nil {
		if err := s.ServeFile(m, path); err != nil {
			t.Fatal(err)
		}
		return h
	}
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fh.Close() })
	if err := s.ServeReaderAt(m, wrap(fh)); err != nil {
		t.Fatal(err)
	}
	return h
}

// samePart checks that the part file at part holds chunks cs as the file
// at path does.
func samePart(t *testing.T, m *Manifest, path, part string, cs []int) {
	t.Helper()
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != m.FileSize {
		t.Fatalf("part file of %d bytes, the file %d", len(got), m.FileSize)
	}
	for _, i := range cs {
		off, n := m.ChunkRange(i)
		if !bytes.Equal(got[off:off+n], want[off:off+n]) {
			t.Fatalf("chunk %d in the part file is not the file's", i)
		}
	}
}

// The chunks of a first, a middle and a last stage's ranges, fetched from
// two holders into part files, are the file's bytes, and only they cross
// the wire; a second fetch into the same part fetches nothing.
func TestFetchPart(t *testing.T) {
	for _, tied := range []bool{false, true} {
		path, m := synthModel(t, 6, tied)
		a, b := holder(t, m, path, nil), holder(t, m, path, nil)
		me := chunkstest.NewHost(t)
		chunkstest.Connect(t, me, a)
		chunkstest.Connect(t, me, b)
		f := NewFetcher(me.Streams(), m)
		dir := t.TempDir()
		for _, r := range [][2]int{{0, 2}, {2, 5}, {5, 6}} {
			need, err := m.ChunksFor(r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			part := filepath.Join(dir, fmt.Sprintf("%v-%d-%d%s", tied, r[0], r[1], PartSuffix))
			res, err := FetchPart(context.Background(), f, need, []peer.ID{a.ID(), b.ID()}, part)
			if err != nil {
				t.Fatal(err)
			}
			if res.Bytes != m.Bytes(need) || res.Chunks != len(need) || len(res.Dropped) != 0 || res.Bytes >= m.FileSize {
				t.Fatalf("%v: fetched %d bytes in %d chunks (want %d in %d of a %d-byte file), dropped %v",
					r, res.Bytes, res.Chunks, m.Bytes(need), len(need), m.FileSize, res.Dropped)
			}
			samePart(t, m, path, part, need)
			again, err := FetchPart(context.Background(), f, need, []peer.ID{a.ID(), b.ID()}, part)
			if err != nil || again.Bytes != 0 {
				t.Fatalf("second fetch: %d bytes, %v", again.Bytes, err)
			}
		}
	}
}

// A fetch stopped half-way resumes from the part file: the two runs fetch
// the range's chunks once between them.
func TestFetchPartResume(t *testing.T) {
	path, m := sixLayers(t)
	a := holder(t, m, path, nil)
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	need, _ := m.ChunksFor(1, 5)
	total := m.Bytes(need)
	f := NewFetcher(me.Streams(), m, WithProgress(func(done, _ int64) {
		if done > total/3 {
			cancel()
		}
	}))
	part := filepath.Join(t.TempDir(), "slice"+PartSuffix)
	first, err := FetchPart(ctx, f, need, []peer.ID{a.ID()}, part)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	if first.Bytes <= total/3 || first.Bytes >= total {
		t.Fatalf("first run fetched %d of %d", first.Bytes, total)
	}
	second, err := FetchPart(context.Background(), NewFetcher(me.Streams(), m), need, []peer.ID{a.ID()}, part)
	if err != nil {
		t.Fatal(err)
	}
	if first.Bytes+second.Bytes != total {
		t.Fatalf("fetched %d + %d bytes, want %d once", first.Bytes, second.Bytes, total)
	}
	samePart(t, m, path, part, need)
}

// stallHandler reads a request and never answers: a peer that stalls.
func stallHandler(t *testing.T, h *swarm.Host) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	h.Streams().Handle(Protocol, func(s *swarm.Stream) {
		wg.Add(1)
		defer wg.Done()
		readRequest(s)
		<-done
		s.Reset()
	})
}

// Three holders: one lies (its chunks fail the hash), one stalls, one is
// honest but answers only once the liar is caught. The liar and the
// staller are dropped with their errors and every chunk comes from the
// honest holder.
func TestFetchLiarAndStaller(t *testing.T) {
	path, m := sixLayers(t)
	gate := chunkstest.NewGate()
	t.Cleanup(gate.Open)
	honest := holder(t, m, path, func(fh *os.File) interface {
		ReadAt([]byte, int64) (int, error)
	} {
		return chunkstest.Gated{R: fh, Gate: gate.C()}
	})
	liar := holder(t, m, path, func(fh *os.File) interface {
		ReadAt([]byte, int64) (int, error)
	} {
		return chunkstest.Lying{R: fh}
	})
	staller := chunkstest.NewHost(t)
	stallHandler(t, staller)
	me := chunkstest.NewHost(t)
	for _, h := range []*swarm.Host{honest, liar, staller} {
		chunkstest.Connect(t, me, h)
	}
	var mu sync.Mutex
	reported := map[peer.ID]error{}
	f := NewFetcher(me.Streams(), m, WithStallTimeout(3*time.Second), WithOnDrop(func(p peer.ID, err error) {
		mu.Lock()
		reported[p] = err
		mu.Unlock()
		if p == liar.ID() {
			gate.Open()
		}
	}))
	need, _ := m.ChunksFor(2, 4)
	part := filepath.Join(t.TempDir(), "slice"+PartSuffix)
	res, err := FetchPart(context.Background(), f, need, []peer.ID{liar.ID(), staller.ID(), honest.ID()}, part)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Dropped[liar.ID()], ErrBadChunk) || !errors.Is(res.Dropped[staller.ID()], ErrStalled) {
		t.Fatalf("dropped: %v", res.Dropped)
	}
	if _, ok := res.Dropped[honest.ID()]; ok || res.PerPeer[honest.ID()] != res.Bytes || res.PerPeer[liar.ID()] != 0 {
		t.Fatalf("honest holder dropped or others credited: %v, %v", res.Dropped, res.PerPeer)
	}
	mu.Lock()
	if len(reported) != 2 || !errors.Is(reported[liar.ID()], ErrBadChunk) || !errors.Is(reported[staller.ID()], ErrStalled) {
		t.Fatalf("reported: %v", reported)
	}
	mu.Unlock()
	samePart(t, m, path, part, need)
}

// With only a liar, the fetch fails with ErrNoHolders and says why, and
// the part file holds none of the liar's bytes.
func TestFetchOnlyLiar(t *testing.T) {
	path, m := sixLayers(t)
	liar := holder(t, m, path, func(fh *os.File) interface {
		ReadAt([]byte, int64) (int, error)
	} {
		return chunkstest.Lying{R: fh}
	})
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, liar)
	need, _ := m.ChunksFor(0, 2)
	part := filepath.Join(t.TempDir(), "slice"+PartSuffix)
	_, err := FetchPart(context.Background(), NewFetcher(me.Streams(), m), need, []peer.ID{liar.ID()}, part)
	if !errors.Is(err, ErrNoHolders) || !errors.Is(err, ErrBadChunk) {
		t.Fatalf("fetch from a liar: %v", err)
	}
	data, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Count(data, []byte{0}) != len(data) {
		t.Fatal("the part file holds bytes from the liar")
	}
}

func TestFetchArgs(t *testing.T) {
	_, m := sixLayers(t)
	me := chunkstest.NewHost(t)
	f := NewFetcher(me.Streams(), m)
	nop := func(int, []byte) error { return nil }
	if _, err := f.Fetch(context.Background(), []int{0, m.NumChunks()}, nil, nop); !errors.Is(err, ErrRange) {
		t.Fatalf("chunk past the end: %v", err)
	}
	if _, err := f.Fetch(context.Background(), []int{0}, []peer.ID{me.ID()}, nop); !errors.Is(err, ErrNoHolders) {
		t.Fatalf("no holder but ourselves: %v", err)
	}
	if res, err := f.Fetch(context.Background(), nil, nil, nop); err != nil || res.Chunks != 0 {
		t.Fatalf("nothing to fetch: %v", err)
	}
}
