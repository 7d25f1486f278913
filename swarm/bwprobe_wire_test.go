package swarm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
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
		{Name: "probe-figure", Bytes: encodeProbeFigure(goldenFigure)},
	})
}

// TestGoldenBWProbe: the encoders give the golden bytes, which the wire
// test above captured from a real probe, and the decoders give the values
// back from the file's bytes.
func TestGoldenBWProbe(t *testing.T) {
	g := checkGoldenLines(t, "bwprobe.txt", []goldenLine{
		{Name: "probe-size", Bytes: encodeProbeSize(ProbeBytes)},
		{Name: "probe-ready", Bytes: encodeProbeReady()},
		{Name: "probe-count", Bytes: encodeProbeCount(ProbeBytes)},
		{Name: "probe-figure", Bytes: encodeProbeFigure(goldenFigure)},
	})
	if size, err := decodeProbeSize(g["probe-size"]); err != nil || size != ProbeBytes {
		t.Fatalf("size %d, %v; want %d", size, err, ProbeBytes)
	}
	if err := decodeProbeReady(g["probe-ready"]); err != nil {
		t.Fatal(err)
	}
	if n, err := decodeProbeCount(g["probe-count"]); err != nil || n != ProbeBytes {
		t.Fatalf("count %d, %v; want %d", n, err, ProbeBytes)
	}
	if bw, err := decodeProbeFigure(g["probe-figure"]); err != nil || bw != goldenFigure {
		t.Fatalf("figure %v, %v; want %v", bw, err, goldenFigure)
	}
}

// TestBWProbeDecodeRefuses: each malformed message is refused with
// ErrProbeSchema, and an encoder given a value out of bounds gives
// nothing rather than bytes a decoder refuses.
func TestBWProbeDecodeRefuses(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	f64 := func(v float64) []byte { return u64(math.Float64bits(v)) }
	size := func(b []byte) error { _, err := decodeProbeSize(b); return err }
	count := func(b []byte) error { _, err := decodeProbeCount(b); return err }
	figure := func(b []byte) error { _, err := decodeProbeFigure(b); return err }
	for _, c := range []struct {
		name   string
		decode func([]byte) error
		in     []byte
	}{
		{"size empty", size, nil},
		{"size short", size, []byte{0, 8, 0}},
		{"size long", size, append(u32(1000), 0)},
		{"size zero", size, u32(0)},
		{"size oversize", size, u32(ProbeBytes + 1)},
		{"size max", size, u32(math.MaxUint32)},
		{"ready empty", decodeProbeReady, nil},
		{"ready zero", decodeProbeReady, []byte{0}},
		{"ready two", decodeProbeReady, []byte{2}},
		{"ready long", decodeProbeReady, []byte{1, 1}},
		{"count short", count, u64(ProbeBytes)[:7]},
		{"count zero", count, u64(0)},
		{"count oversize", count, u64(ProbeBytes + 1)},
		{"count negative", count, u64(uint64(1) << 63)},
		{"count minus one", count, u64(math.MaxUint64)},
		{"figure short", figure, f64(1e6)[:4]},
		{"figure long", figure, append(f64(1e6), 0)},
		{"figure zero", figure, f64(0)},
		{"figure negative", figure, f64(-1e6)},
		{"figure NaN", figure, f64(math.NaN())},
		{"figure +Inf", figure, f64(math.Inf(1))},
		{"figure oversize", figure, f64(maxBandwidth * 1.01)},
	} {
		if err := c.decode(c.in); !errors.Is(err, ErrProbeSchema) {
			t.Errorf("%s (%x): %v, want ErrProbeSchema", c.name, c.in, err)
		}
	}
	for _, v := range []int64{0, -1, ProbeBytes + 1} {
		if b := encodeProbeSize(v); b != nil {
			t.Errorf("size %d encoded to %x", v, b)
		}
		if b := encodeProbeCount(v); b != nil {
			t.Errorf("count %d encoded to %x", v, b)
		}
	}
}

// FuzzBWProbeDecoder: every probe decoder takes any bytes without
// panicking, refuses with ErrProbeSchema, and what it accepts is in
// bounds and encodes back to the same bytes.
func FuzzBWProbeDecoder(f *testing.F) {
	f.Add(encodeProbeSize(ProbeBytes))
	f.Add(encodeProbeReady())
	f.Add(encodeProbeCount(1))
	f.Add(encodeProbeFigure(goldenFigure))
	f.Fuzz(func(t *testing.T, in []byte) {
		check := func(what string, err error, out []byte) {
			if err != nil {
				if !errors.Is(err, ErrProbeSchema) {
					t.Fatalf("%s: unexpected error %v", what, err)
				}
				return
			}
			if !bytes.Equal(out, in) {
				t.Fatalf("%s: re-encoding differs:\n in %x\nout %x", what, in, out)
			}
		}
		size, err := decodeProbeSize(in)
		if err == nil && (size < 1 || size > ProbeBytes) {
			t.Fatalf("size %d accepted", size)
		}
		check("size", err, encodeProbeSize(size))
		check("ready", decodeProbeReady(in), encodeProbeReady())
		n, err := decodeProbeCount(in)
		if err == nil && (n < 1 || n > ProbeBytes) {
			t.Fatalf("count %d accepted", n)
		}
		check("count", err, encodeProbeCount(n))
		bw, err := decodeProbeFigure(in)
		if err == nil && !(bw > 0 && bw <= maxBandwidth) {
			t.Fatalf("figure %v accepted", bw)
		}
		check("figure", err, encodeProbeFigure(bw))
	})
}
