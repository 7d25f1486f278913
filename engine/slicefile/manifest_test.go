package slicefile

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm/chunks"
)

// A generated model's manifest carries the file's own tensor table,
// survives its encoding, and its hashes are the file's.
func TestManifestRoundTrip(t *testing.T) {
	path, m := genModel(t, sixLayers())
	f, fh, err := engine.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if err := sameTable(m.Tensors, f); err != nil || len(m.Tensors) == 0 || m.DataOffset != f.DataOffset || m.Layers != 6 {
		t.Fatalf("manifest's table is not the file's: %v", err)
	}
	if m.NumChunks() < 40 {
		t.Fatalf("%d chunks: the test model should span many", m.NumChunks())
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got chunks.Manifest
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	b2, err := got.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatal("re-encoding differs")
	}
	// The hashes are the file's: every chunk verifies, and a flipped byte
	// does not.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < got.NumChunks(); i++ {
		off, n := got.ChunkRange(i)
		c := data[off : off+n]
		if !got.Verify(i, c) {
			t.Fatalf("chunk %d does not verify", i)
		}
		c2 := bytes.Clone(c)
		c2[len(c2)-1] ^= 1
		if got.Verify(i, c2) || got.Verify(i, c[:n-1]) {
			t.Fatalf("chunk %d: corrupt or short data verifies", i)
		}
	}
	// Another chunk size is another manifest of the same model.
	m2, err := BuildManifest(path, chunks.WithChunkSize(2*testChunk))
	if err != nil {
		t.Fatal(err)
	}
	id1, _ := m.ID()
	id2, _ := m2.ID()
	if m2.Fingerprint != m.Fingerprint || id1 == id2 {
		t.Fatal("chunk size should change the manifest's ID and not the fingerprint")
	}
	if _, err := BuildManifest(path, chunks.WithChunkSize(chunks.MinChunkSize-1)); !errors.Is(err, chunks.ErrManifest) {
		t.Fatalf("tiny chunk size: %v", err)
	}
}

// ChunksFor covers the header and every tensor a stage loads, and holds
// no chunk that covers neither.
func TestChunksFor(t *testing.T) {
	for _, tied := range []bool{false, true} {
		c := sixLayers()
		c.Tied = tied
		_, m := genModel(t, c)
		for _, r := range [][2]int{{0, 6}, {0, 1}, {0, 2}, {2, 4}, {3, 4}, {4, 6}, {5, 6}} {
			lo, hi := r[0], r[1]
			ts, err := m.TensorsFor(lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, t := range ts {
				names[t.Name] = true
			}
			wantEmbd := lo == 0 || (hi == 6 && tied)
			if names["token_embd.weight"] != wantEmbd || names["output.weight"] != (hi == 6 && !tied) || names["output_norm.weight"] != (hi == 6) {
				t.Fatalf("tied=%v [%d,%d): embedding %v, head %v, norm %v", tied, lo, hi, names["token_embd.weight"], names["output.weight"], names["output_norm.weight"])
			}
			for l := 0; l < 6; l++ {
				if got := names[blockName(l)]; got != (l >= lo && l < hi) {
					t.Fatalf("[%d,%d): layer %d included = %v", lo, hi, l, got)
				}
			}
			cs, err := m.ChunksFor(lo, hi)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := m.RangeBytes(lo, hi); err != nil || n != m.Bytes(cs) {
				t.Fatalf("RangeBytes %d, %v", n, err)
			}
			in := map[int]bool{}
			for _, i := range cs {
				in[i] = true
			}
			covered := func(off, end int64) bool {
				for i := off / m.ChunkSize; i*m.ChunkSize < end; i++ {
					if !in[int(i)] {
						return false
					}
				}
				return true
			}
			if !covered(0, m.DataOffset) {
				t.Fatal("header not covered")
			}
			for _, t2 := range ts {
				if !covered(t2.Offset, t2.End()) {
					t.Fatalf("[%d,%d): tensor %s not covered", lo, hi, t2.Name)
				}
			}
			for _, i := range cs {
				off, n := m.ChunkRange(i)
				useful := off < m.DataOffset
				for _, t2 := range ts {
					useful = useful || (t2.Offset < off+n && t2.End() > off)
				}
				if !useful {
					t.Fatalf("[%d,%d): chunk %d covers nothing needed", lo, hi, i)
				}
			}
		}
		for _, r := range [][2]int{{-1, 2}, {2, 2}, {3, 7}, {4, 2}} {
			if _, err := m.ChunksFor(r[0], r[1]); !errors.Is(err, chunks.ErrRange) {
				t.Fatalf("range %v: %v", r, err)
			}
		}
	}
}

func blockName(l int) string { return "blk." + string(rune('0'+l)) + ".attn_q.weight" }
