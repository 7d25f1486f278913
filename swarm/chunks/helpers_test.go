package chunks

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// testChunk is the smallest chunk size, so that tiny models span many
// chunks.
const testChunk = MinChunkSize

// synthModel writes a file shaped like a model file without being one,
// and builds its manifest from the layout it wrote: a header of random
// bytes, then tensors named as a llama's of layers blocks (with no
// output.weight when tied), each of random bytes of an odd length, at
// 32-byte aligned offsets with zero padding between them. The type codes
// are arbitrary integers: this package carries them and reads nothing
// into them. Six layers make about 5 MiB, 80-odd chunks of 64 KiB.
func synthModel(t testing.TB, layers int, tied bool) (string, *Manifest) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(layers), map[bool]uint64{false: 1, true: 2}[tied]))
	align := func(n int64) int64 { return (n + 31) / 32 * 32 }
	const header = 5000
	l := Layout{FileSize: 0, DataOffset: align(header), Layers: layers}
	off := l.DataOffset
	add := func(name string, size int64) {
		size += 4 * rng.Int64N(7)
		l.Tensors = append(l.Tensors, Tensor{Name: name, Type: uint32(rng.IntN(40)), Dims: []uint64{uint64(size) / 4, 1 + uint64(rng.IntN(3))},
			Offset: off, Size: size})
		l.FileSize = off + size
		off = align(off + size)
	}
	add("token_embd.weight", 256<<10)
	add("rope_freqs.weight", 256)
	for b := range layers {
		for _, x := range []struct {
			name string
			size int64
		}{{"attn_norm", 512}, {"attn_q", 64 << 10}, {"attn_k", 32 << 10}, {"attn_v", 32 << 10}, {"attn_output", 64 << 10},
			{"ffn_norm", 512}, {"ffn_gate", 192 << 10}, {"ffn_up", 192 << 10}, {"ffn_down", 192 << 10}} {
			add(fmt.Sprintf("blk.%d.%s.weight", b, x.name), x.size)
		}
	}
	add(outputNorm, 512)
	if !tied {
		add(output, 256<<10)
	}
	data := make([]byte, l.FileSize)
	for i := range header {
		data[i] = byte(rng.Uint32())
	}
	for _, x := range l.Tensors {
		for i := x.Offset; i < x.End(); i++ {
			data[i] = byte(rng.Uint32())
		}
	}
	sum := sha256.Sum256(data)
	l.Fingerprint = hex.EncodeToString(sum[:])
	path := filepath.Join(t.TempDir(), fmt.Sprintf("synth-%d-%v.bin", layers, tied))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Build(bytes.NewReader(data), l, WithChunkSize(testChunk))
	if err != nil {
		t.Fatal(err)
	}
	return path, m
}

// sixLayers is the synthetic model most tests use.
func sixLayers(t testing.TB) (string, *Manifest) { return synthModel(t, 6, false) }
