package swarm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
)

// oneWrite is the payload size up to which the framing sends header and
// payload in one write (internal/codec).
const oneWrite = 32 << 10

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payloads := [][]byte{{}, []byte("a"), bytes.Repeat([]byte{7}, oneWrite), bytes.Repeat([]byte{9}, oneWrite+1), bytes.Repeat([]byte{1}, 1<<20)}
	for _, p := range payloads {
		if err := WriteFrame(&buf, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(&buf, 2<<20)
	for i, want := range payloads {
		got, err := fr.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
		}
	}
	if _, err := fr.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

// TestFrameTooLargeBeforeAllocation: a header that declares 2 GiB must
// fail at once, reading nothing past the header.
func TestFrameTooLargeBeforeAllocation(t *testing.T) {
	var hdr [FrameHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], 1<<31)
	r := &countingReader{r: bytes.NewReader(append(hdr[:], 1, 2, 3))}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fr := NewFrameReader(r, 1<<20)
	if _, err := fr.Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v, want ErrFrameTooLarge", err)
	}
	runtime.ReadMemStats(&after)
	if r.n != FrameHeaderSize {
		t.Fatalf("read %d bytes, want only the %d-byte header", r.n, FrameHeaderSize)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<10 {
		t.Fatalf("allocated %d bytes for a rejected frame", d)
	}
	if _, err := ReadFrame(bytes.NewReader(hdr[:]), 1<<20); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("ReadFrame: %v", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, 11), 10); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("WriteFrame over max: %v", err)
	}
}

func TestFrameTruncated(t *testing.T) {
	for _, in := range [][]byte{{0, 0}, {0, 0, 0, 5, 1, 2}} {
		_, err := NewFrameReader(bytes.NewReader(in), 100).Next()
		if !errors.Is(err, ErrShortFrame) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("%v: got %v, want ErrShortFrame", in, err)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzFrameDecoder: any byte stream decodes into frames or fails with a
// clean error, never reads a frame above the maximum, and the frames it
// accepts re-encode to the bytes they came from.
func FuzzFrameDecoder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		const max = 1 << 10
		fr := NewFrameReader(bytes.NewReader(in), max)
		var out bytes.Buffer
		for {
			p, err := fr.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrShortFrame) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				if errors.Is(err, io.EOF) && !bytes.Equal(out.Bytes(), in) {
					t.Fatalf("clean end but re-encoding differs")
				}
				return
			}
			if len(p) > max {
				t.Fatalf("frame of %d bytes above max", len(p))
			}
			if err := WriteFrame(&out, p, max); err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(in, out.Bytes()) {
				t.Fatalf("re-encoded frames are not a prefix of the input")
			}
		}
	})
}
