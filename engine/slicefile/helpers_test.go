package slicefile

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm"
	"github.com/stratanet/strata/swarm/chunks"
)

// testChunk is the smallest chunk size, so that tiny models span many
// chunks.
const testChunk = chunks.MinChunkSize

// genModel writes a generated model and builds its manifest.
func genModel(t testing.TB, c engine.GenConfig) (string, *chunks.Manifest) {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.gguf", c.Arch, c.Seed))
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	m, err := BuildManifest(path, chunks.WithChunkSize(testChunk))
	if err != nil {
		t.Fatal(err)
	}
	return path, m
}

// sixLayers is a llama of six layers, about 5 MiB: 80 chunks of 64 KiB.
func sixLayers() engine.GenConfig {
	return engine.GenConfig{Arch: "llama", Layers: 6, Dim: 128, Heads: 4, KVHeads: 2, FFN: 384, Vocab: 512, Seed: 3, DType: engine.F32}
}

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
