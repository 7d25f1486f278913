package codec

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"testing"
)

// A frame's bytes: a big-endian u32 length, then the payload.
func TestFrameGolden(t *testing.T) {
	for _, c := range []struct {
		payload string
		golden  string
	}{
		{"", "00000000"},
		{"abc", "00000003616263"},
	} {
		var b bytes.Buffer
		if err := WriteFrame(&b, []byte(c.payload), 16); err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(b.Bytes()); got != c.golden {
			t.Fatalf("frame of %q: %s, want %s", c.payload, got, c.golden)
		}
		p, err := ReadFrame(&b, 16)
		if err != nil || string(p) != c.payload {
			t.Fatalf("read back %q, %v", p, err)
		}
		if _, err := ReadFrame(&b, 16); err != io.EOF {
			t.Fatalf("after the last frame: %v, want io.EOF", err)
		}
	}
}

// Bounds and truncation fail with the framing's sentinels, before any
// allocation for a header that lies.
func TestFrameErrors(t *testing.T) {
	if err := WriteFrame(io.Discard, make([]byte, 17), 16); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized write: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{0x7f, 0xff, 0xff, 0xff}), 16); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("lying header: %v", err)
	}
	if _, err := NewFrameReader(bytes.NewReader([]byte{0, 0, 0, 5, 'a'}), 0).Next(); !errors.Is(err, ErrShortFrame) {
		t.Fatalf("truncated frame: %v", err)
	}
}
