// Package chunkstest holds the test fixtures that swarm/chunks' tests and
// engine/slicefile's share: swarm hosts on loopback, and holders whose
// reads lie or wait. It is for tests only and owns nothing else.
package chunkstest

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/stratanet/strata/swarm"
)

// NewHost is a swarm host on loopback, closed at the end of the test.
func NewHost(t testing.TB) *swarm.Host {
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
	return h
}

// Connect dials b from a.
func Connect(t testing.TB, a, b *swarm.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Connect(ctx, b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
}

// Lying flips one byte of every read: a holder whose file is corrupt, or
// who lies.
type Lying struct{ R io.ReaderAt }

// ReadAt implements io.ReaderAt.
func (l Lying) ReadAt(p []byte, off int64) (int, error) {
	n, err := l.R.ReadAt(p, off)
	if n > 0 {
		p[n/2] ^= 0x40
	}
	return n, err
}

// Gated holds every read until Gate closes.
type Gated struct {
	R    io.ReaderAt
	Gate <-chan struct{}
}

// ReadAt implements io.ReaderAt.
func (g Gated) ReadAt(p []byte, off int64) (int, error) {
	<-g.Gate
	return g.R.ReadAt(p, off)
}

// Gate is a channel closed once, by the first Open.
type Gate struct {
	once sync.Once
	ch   chan struct{}
}

// NewGate is a closed gate's opposite: reads through it wait.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Open lets every waiting and later read through.
func (g *Gate) Open() { g.once.Do(func() { close(g.ch) }) }

// C is the channel Open closes.
func (g *Gate) C() <-chan struct{} { return g.ch }
