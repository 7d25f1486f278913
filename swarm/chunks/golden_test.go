package chunks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// updateGolden rewrites the golden files from what the code makes now:
// only for a deliberate change of format, never to make a test pass.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the current code")

// checkGolden compares got with the golden file name.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the golden %d bytes", name, len(got), len(want))
	}
}

// The encodings of a manifest built from a real model file, and the
// slices and edges files written from its chunks, are engine/slicefile's
// golden tests: this package reads no model file.

// The encodings of a hand-built manifest and of a chunk request.
func TestGoldenWire(t *testing.T) {
	m := &Manifest{Fingerprint: "fp-golden", FileSize: 3*MinChunkSize + 5, DataOffset: 96, ChunkSize: MinChunkSize, Layers: 2,
		Tensors: []Tensor{
			{Name: "token_embd.weight", Type: 0, Dims: []uint64{8, 4}, Offset: 96, Size: 128},
			{Name: "blk.0.attn_q.weight", Type: 1, Dims: []uint64{8, 8}, Offset: 224, Size: 256},
			{Name: "blk.1.attn_q.weight", Type: 8, Dims: []uint64{32, 2}, Offset: 512, Size: 68},
			{Name: "output.weight", Type: 300, Dims: []uint64{8, 4, 1}, Offset: 1024, Size: 1 << 17},
		}}
	for i := range 4 {
		m.Hashes = append(m.Hashes, sha256.Sum256([]byte{byte(i)}))
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	id, err := m.ID()
	if err != nil {
		t.Fatal(err)
	}
	req := encodeRequest("fp-golden", 300)
	got := fmt.Sprintf("manifest %s\nid %x\nrequest %s\n", hex.EncodeToString(b), id, hex.EncodeToString(req))
	checkGolden(t, "wire.txt", []byte(got))
}
