package chunks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/stratanet/strata/swarm"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
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

// newHost is a swarm host on loopback, closed at the end of the test.
func newHost(t testing.TB) host.Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := swarm.New(ctx,
		swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"),
		swarm.WithReachability(swarm.ReachabilityPublic),
		swarm.WithNATPortMap(false),
		swarm.WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h.Libp2p()
}

// connect dials b from a.
func connect(t testing.TB, a, b host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// lyingReader flips one byte of every read: a holder whose file is
// corrupt, or who lies.
type lyingReader struct{ r io.ReaderAt }

func (l lyingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := l.r.ReadAt(p, off)
	if n > 0 {
		p[n/2] ^= 0x40
	}
	return n, err
}

// gatedReader holds every read until the gate opens.
type gatedReader struct {
	r    io.ReaderAt
	gate <-chan struct{}
}

func (g gatedReader) ReadAt(p []byte, off int64) (int, error) {
	<-g.gate
	return g.r.ReadAt(p, off)
}

// onceCloser closes a channel once.
type onceCloser struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *onceCloser               { return &onceCloser{ch: make(chan struct{})} }
func (o *onceCloser) open()              { o.once.Do(func() { close(o.ch) }) }
func (o *onceCloser) c() <-chan struct{} { return o.ch }
