package swarm

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/stratanet/strata/internal/goldentest"
)

// goldenFigure is the figure (bytes/s) of the probe's golden last
// message: 100 Mbit/s.
const goldenFigure = 12.5e6

// tapStream records what the probe's answerer reads (the prober's bytes)
// and writes (its own). serveBW uses a stream from one goroutine, so the
// buffers need no lock; they are read after it returns.
type tapStream struct {
	network.Stream
	in, out bytes.Buffer
}

func (s *tapStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	s.in.Write(p[:n])
	return n, err
}

func (s *tapStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	s.out.Write(p[:n])
	return n, err
}

// TestBWProbeWire: the bytes a real probe puts on a loopback stream,
// both ways, are the golden ones (testdata/golden/bwprobe.txt) that
// TestGoldenBWProbe holds the encoders to: the size, the answerer's ready
// byte and count, and a payload of ProbeBytes zeros. The figure is
// measured, so it is checked to be the f64 bits, big-endian, of what
// ProbeBandwidth returned; its golden line is a fixed figure.
func TestBWProbeWire(t *testing.T) {
	a, b := connectPair(t)
	taps := make(chan *tapStream, 1)
	b.h.SetStreamHandler(ProtocolBW, func(st network.Stream) {
		tap := &tapStream{Stream: st}
		b.links.serveBW(tap)
		taps <- tap
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bw, err := a.links.ProbeBandwidth(ctx, b.ID())
	if err != nil {
		t.Fatal(err)
	}
	var tap *tapStream
	select {
	case tap = <-taps:
	case <-ctx.Done():
		t.Fatal("the answerer did not finish")
	}
	in, out := tap.in.Bytes(), tap.out.Bytes()
	if len(in) != 4+ProbeBytes+8 || len(out) != 1+8 {
		t.Fatalf("probe of %d bytes and answer of %d, want %d and %d", len(in), len(out), 4+ProbeBytes+8, 1+8)
	}
	if !bytes.Equal(in[4:4+ProbeBytes], make([]byte, ProbeBytes)) {
		t.Fatal("the probe's payload is not zeros")
	}
	fig := in[4+ProbeBytes:]
	if got := math.Float64frombits(binary.BigEndian.Uint64(fig)); got != bw {
		t.Fatalf("figure on the wire %x (%v), ProbeBandwidth returned %v", fig, got, bw)
	}
	goldentest.Lines(t, "bwprobe.txt", []goldentest.Line{
		{Name: "probe-size", Bytes: in[:4]},
		{Name: "probe-ready", Bytes: out[:1]},
		{Name: "probe-count", Bytes: out[1:]},
		{Name: "probe-figure", Bytes: binary.BigEndian.AppendUint64(nil, math.Float64bits(goldenFigure))},
	})
}
