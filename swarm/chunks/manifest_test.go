package chunks

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
)

func TestManifestRoundTrip(t *testing.T) {
	path, m := sixLayers(t)
	if m.NumChunks() < 40 {
		t.Fatalf("%d chunks: the test model should span many", m.NumChunks())
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got Manifest
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
	l := Layout{Fingerprint: m.Fingerprint, FileSize: m.FileSize, DataOffset: m.DataOffset, Layers: m.Layers, Tensors: m.Tensors}
	r := bytes.NewReader(data)
	m2, err := Build(r, l, WithChunkSize(2*testChunk))
	if err != nil {
		t.Fatal(err)
	}
	id1, _ := m.ID()
	id2, _ := m2.ID()
	if m2.Fingerprint != m.Fingerprint || id1 == id2 {
		t.Fatal("chunk size should change the manifest's ID and not the fingerprint")
	}
	if _, err := Build(r, l, WithChunkSize(MinChunkSize-1)); !errors.Is(err, ErrManifest) {
		t.Fatalf("tiny chunk size: %v", err)
	}
	// A layout that is not the file's, or not one file's, is refused.
	long := l
	long.FileSize++
	if _, err := Build(r, long, WithChunkSize(testChunk)); !errors.Is(err, io.EOF) {
		t.Fatalf("layout longer than the file: %v", err)
	}
	for name, edit := range map[string]func(*Layout){
		"no size":        func(l *Layout) { l.Tensors[3].Size = 0 },
		"past the end":   func(l *Layout) { l.Tensors[len(l.Tensors)-1].Size += 32; l.FileSize -= 32 },
		"no layers":      func(l *Layout) { l.Layers = 0 },
		"block 6 of 6":   func(l *Layout) { l.Layers = 5 },
		"duplicate":      func(l *Layout) { l.Tensors[2].Name = l.Tensors[1].Name },
		"in header":      func(l *Layout) { l.Tensors[0].Offset = l.DataOffset - 32 },
		"no fingerprint": func(l *Layout) { l.Fingerprint = "" },
	} {
		bad := l
		bad.Tensors = slices.Clone(l.Tensors)
		edit(&bad)
		if _, err := Build(r, bad, WithChunkSize(testChunk)); !errors.Is(err, ErrManifest) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// Every prefix of a manifest and every single-byte change either fails
// with ErrManifest or decodes to a valid manifest: never a panic.
func TestManifestCorrupt(t *testing.T) {
	_, m := synthModel(t, 2, false)
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(b); n++ {
		var got Manifest
		if err := got.UnmarshalBinary(b[:n]); !errors.Is(err, ErrManifest) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
	var got Manifest
	if err := got.UnmarshalBinary(append(bytes.Clone(b), 0)); !errors.Is(err, ErrManifest) {
		t.Fatalf("trailing byte: %v", err)
	}
	// Byte changes over the structured part (the hashes are free data).
	for i := 0; i < len(b)-32*len(m.Hashes); i++ {
		c := bytes.Clone(b)
		c[i] ^= 0xff
		var got Manifest
		if err := got.UnmarshalBinary(c); err != nil && !errors.Is(err, ErrManifest) {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	// Overlapping tensors are refused.
	over := *m
	over.Tensors = append([]Tensor(nil), m.Tensors...)
	over.Tensors[1].Offset = over.Tensors[0].Offset + 32
	if _, err := over.MarshalBinary(); !errors.Is(err, ErrManifest) {
		t.Fatalf("overlapping tensors: %v", err)
	}
	// Forged counts are refused before allocation.
	forged := append(bytes.Clone(b[:4]), 1, 'x', 1, 1, 0x80, 0x80, 4, 1, 0xff, 0xff, 0xff, 0xff, 0x0f)
	if err := got.UnmarshalBinary(forged); !errors.Is(err, ErrManifest) {
		t.Fatalf("forged: %v", err)
	}
}

// ChunksFor covers the header and every tensor a stage loads, and holds
// no chunk that covers neither.
func TestChunksFor(t *testing.T) {
	for _, tied := range []bool{false, true} {
		_, m := synthModel(t, 6, tied)
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
			if names[tokenEmbd] != wantEmbd || names[output] != (hi == 6 && !tied) || names[outputNorm] != (hi == 6) {
				t.Fatalf("tied=%v [%d,%d): embedding %v, head %v, norm %v", tied, lo, hi, names[tokenEmbd], names[output], names[outputNorm])
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
			if _, err := m.ChunksFor(r[0], r[1]); !errors.Is(err, ErrRange) {
				t.Fatalf("range %v: %v", r, err)
			}
		}
	}
}

func blockName(l int) string { return "blk." + string(rune('0'+l)) + ".attn_q.weight" }

func FuzzManifest(f *testing.F) {
	m := &Manifest{Fingerprint: "fp", FileSize: 3*MinChunkSize + 5, DataOffset: 96, ChunkSize: MinChunkSize, Layers: 2,
		Tensors: []Tensor{
			{Name: "token_embd.weight", Type: 0, Dims: []uint64{8, 4}, Offset: 96, Size: 128},
			{Name: "blk.0.attn_q.weight", Type: 0, Dims: []uint64{8, 8}, Offset: 224, Size: 256},
			{Name: "blk.1.attn_q.weight", Type: 8, Dims: []uint64{32, 2}, Offset: 512, Size: 68},
			{Name: "output.weight", Type: 0, Dims: []uint64{8, 4}, Offset: 1024, Size: 128},
		},
		Hashes: make([][32]byte, 4)}
	b, err := m.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if err := m.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error without ErrManifest: %v", err)
			}
			return
		}
		b2, err := m.MarshalBinary()
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("decoded manifest does not re-encode to its bytes: %v", err)
		}
		for lo := 0; lo < m.Layers && lo < 4; lo++ {
			cs, err := m.ChunksFor(lo, min(lo+2, m.Layers))
			if err != nil {
				t.Fatal(err)
			}
			for _, i := range cs {
				if i < 0 || i >= m.NumChunks() {
					t.Fatalf("chunk %d of %d", i, m.NumChunks())
				}
			}
		}
	})
}
