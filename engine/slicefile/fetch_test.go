package slicefile

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// stages runs tokens through stages in turn, twice (a prefill and one
// decode step), and returns the last stage's logits of each step.
func runStages(t *testing.T, stages []engine.Stage) [][]float32 {
	t.Helper()
	var sess []engine.Session
	for _, s := range stages {
		ss, err := s.NewSession(16)
		if err != nil {
			t.Fatal(err)
		}
		sess = append(sess, ss)
	}
	var out [][]float32
	for _, tokens := range [][]int32{{5, 17, 99, 3}, {42}} {
		in := engine.Step{Tokens: tokens}
		for i, s := range stages {
			in.Session, in.Pos = sess[i], sess[i].Len()
			o, err := s.Forward(context.Background(), in)
			if err != nil {
				t.Fatalf("stage %d: %v", i, err)
			}
			if o.Logits != nil {
				out = append(out, o.Logits)
				break
			}
			in = engine.Step{Hidden: o.Hidden}
		}
	}
	if len(out) != 2 {
		t.Fatal("no logits")
	}
	return out
}

func openStage(t *testing.T, path string, opts ...engine.Option) engine.Stage {
	t.Helper()
	s, err := engine.Open(path, append(opts, engine.WithThreads(1))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sameBits(a, b [][]float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// holder serves a file (or a reader over it) from a new host, and the
// fetcher's host connects to it.
func holder(t *testing.T, m *chunks.Manifest, path string, wrap func(*os.File) interface {
	ReadAt([]byte, int64) (int, error)
}) *swarm.Host {
	t.Helper()
	h := chunkstest.NewHost(t)
	s := chunks.NewServer(h.Streams())
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

// rangeBytes is the data of the tensors a range needs, and the number of
// runs of tensors adjacent in the file they make.
func rangeBytes(t *testing.T, m *chunks.Manifest, lo, hi int) (n int64, runs int) {
	ts, err := m.TensorsFor(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	var end int64 = -1
	for _, x := range ts {
		n += x.Size
		if x.Offset-end > 32 { // more than alignment padding between: a new run
			runs++
		}
		end = x.End()
	}
	return n, runs
}

// Slices fetched from two holders, for a first, a middle and a last
// stage, load as stages whose logits are the full file's bit for bit, and
// only the ranges' chunks cross the wire.
func TestFetchSliceBitIdentical(t *testing.T) {
	for _, tied := range []bool{false, true} {
		c := sixLayers()
		c.Tied = tied
		if tied {
			c.DType, c.Seed = engine.Q8_0, 4
		}
		path, m := genModel(t, c)
		a, b := holder(t, m, path, nil), holder(t, m, path, nil)
		me := chunkstest.NewHost(t)
		chunkstest.Connect(t, me, a)
		chunkstest.Connect(t, me, b)
		f := chunks.NewFetcher(me.Streams(), m)
		dir := t.TempDir()
		cuts := []int{0, 2, 5, 6}
		var sliced, full []engine.Stage
		for i := 0; i+1 < len(cuts); i++ {
			lo, hi := cuts[i], cuts[i+1]
			out := filepath.Join(dir, "slice.gguf."+string(rune('0'+i)))
			res, err := FetchSlice(context.Background(), f, lo, hi, []peer.ID{a.ID(), b.ID()}, out)
			if err != nil {
				t.Fatal(err)
			}
			need, _ := m.ChunksFor(lo, hi)
			data, runs := rangeBytes(t, m, lo, hi)
			if res.Bytes != m.Bytes(need) || res.Chunks != len(need) || len(res.Dropped) != 0 {
				t.Fatalf("[%d,%d): fetched %d bytes in %d chunks (want %d in %d), dropped %v", lo, hi, res.Bytes, res.Chunks, m.Bytes(need), len(need), res.Dropped)
			}
			// About the range's bytes: its tensors, the header's chunks, and
			// at most a chunk's overhang at each end of each run of tensors.
			header := (m.DataOffset + m.ChunkSize - 1) / m.ChunkSize * m.ChunkSize
			if res.Bytes < data || res.Bytes > data+header+int64(2*runs)*m.ChunkSize {
				t.Fatalf("[%d,%d): %d bytes fetched for %d bytes of tensors in %d runs", lo, hi, res.Bytes, data, runs)
			}
			t.Logf("tied=%v [%d,%d): fetched %d bytes for %d of tensors (file %d)", tied, lo, hi, res.Bytes, data, m.FileSize)
			if _, err := os.Stat(out + chunks.PartSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("part file left: %v", err)
			}
			// A restart finds the slice and fetches nothing.
			again, err := FetchSlice(context.Background(), f, lo, hi, []peer.ID{a.ID(), b.ID()}, out)
			if err != nil || again.Bytes != 0 {
				t.Fatalf("second fetch: %d bytes, %v", again.Bytes, err)
			}
			s := openStage(t, out)
			if info := s.Info(); info.Lo != lo || info.Hi != hi || info.Fingerprint != m.Fingerprint {
				t.Fatalf("slice stage is [%d,%d) of %s", info.Lo, info.Hi, info.Fingerprint)
			}
			if lo > 0 {
				if _, err := engine.Open(out, engine.WithRange(lo-1, hi)); !errors.Is(err, engine.ErrRange) {
					t.Fatalf("[%d,%d) of a slice of [%d,%d): %v", lo-1, hi, lo, hi, err)
				}
			}
			sliced = append(sliced, s)
			full = append(full, openStage(t, path, engine.WithRange(lo, hi)))
		}
		want := runStages(t, []engine.Stage{openStage(t, path)})
		if !sameBits(runStages(t, full), want) {
			t.Fatal("full-file stages differ from one stage")
		}
		if !sameBits(runStages(t, sliced), want) {
			t.Fatalf("tied=%v: stages from slices differ from the full file", tied)
		}
		// The full file is no slice, and is left alone.
		if _, err := FetchSlice(context.Background(), f, 0, 3, []peer.ID{a.ID()}, path); !errors.Is(err, chunks.ErrSlice) {
			t.Fatalf("full file as a slice: %v", err)
		}
		// A slice of another range is not taken for this one.
		if _, err := FetchSlice(context.Background(), f, 0, 3, []peer.ID{a.ID()}, filepath.Join(dir, "slice.gguf.0")); !errors.Is(err, chunks.ErrSlice) {
			t.Fatalf("slice of another range: %v", err)
		}
	}
}

// A fetch stopped half-way resumes from the part file: the two runs fetch
// the range's chunks once between them.
func TestFetchSliceResume(t *testing.T) {
	path, m := genModel(t, sixLayers())
	a := holder(t, m, path, nil)
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	need, _ := m.ChunksFor(1, 5)
	total := m.Bytes(need)
	f := chunks.NewFetcher(me.Streams(), m, chunks.WithProgress(func(done, _ int64) {
		if done > total/3 {
			cancel()
		}
	}))
	out := filepath.Join(t.TempDir(), "slice.gguf")
	first, err := FetchSlice(ctx, f, 1, 5, []peer.ID{a.ID()}, out)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	if first.Bytes <= total/3 || first.Bytes >= total {
		t.Fatalf("first run fetched %d of %d", first.Bytes, total)
	}
	second, err := FetchSlice(context.Background(), chunks.NewFetcher(me.Streams(), m), 1, 5, []peer.ID{a.ID()}, out)
	if err != nil {
		t.Fatal(err)
	}
	if first.Bytes+second.Bytes != total {
		t.Fatalf("fetched %d + %d bytes, want %d once", first.Bytes, second.Bytes, total)
	}
	if err := CheckSlice(m, 1, 5, out); err != nil {
		t.Fatal(err)
	}
}

// Two holders: one lies (its chunks fail the hash), one is honest but
// answers only once the liar is caught. The liar is dropped, every chunk
// comes from the honest holder, and the slice loads as a stage whose
// logits are the full file's bit for bit.
func TestFetchSlicePastLiar(t *testing.T) {
	path, m := genModel(t, sixLayers())
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
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, honest)
	chunkstest.Connect(t, me, liar)
	f := chunks.NewFetcher(me.Streams(), m, chunks.WithOnDrop(func(p peer.ID, err error) {
		if p == liar.ID() {
			gate.Open()
		}
	}))
	out := filepath.Join(t.TempDir(), "slice.gguf")
	res, err := FetchSlice(context.Background(), f, 2, 4, []peer.ID{liar.ID(), honest.ID()}, out)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res.Dropped[liar.ID()], chunks.ErrBadChunk) || len(res.Dropped) != 1 || res.PerPeer[honest.ID()] != res.Bytes {
		t.Fatalf("dropped %v, per peer %v", res.Dropped, res.PerPeer)
	}
	want := runStages(t, []engine.Stage{openStage(t, path, engine.WithRange(0, 2)), openStage(t, path, engine.WithRange(2, 4)), openStage(t, path, engine.WithRange(4, 6))})
	got := runStages(t, []engine.Stage{openStage(t, path, engine.WithRange(0, 2)), openStage(t, out), openStage(t, path, engine.WithRange(4, 6))})
	if !sameBits(got, want) {
		t.Fatal("slice fetched past a liar differs")
	}
}

// With only a liar, the fetch fails with chunks.ErrNoHolders and says
// why, and leaves no slice.
func TestFetchOnlyLiar(t *testing.T) {
	path, m := genModel(t, sixLayers())
	liar := holder(t, m, path, func(fh *os.File) interface {
		ReadAt([]byte, int64) (int, error)
	} {
		return chunkstest.Lying{R: fh}
	})
	me := chunkstest.NewHost(t)
	chunkstest.Connect(t, me, liar)
	out := filepath.Join(t.TempDir(), "slice.gguf")
	_, err := FetchSlice(context.Background(), chunks.NewFetcher(me.Streams(), m), 0, 2, []peer.ID{liar.ID()}, out)
	if !errors.Is(err, chunks.ErrNoHolders) || !errors.Is(err, chunks.ErrBadChunk) {
		t.Fatalf("fetch from a liar: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("slice written: %v", err)
	}
}
