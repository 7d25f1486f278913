package swarm

import (
	"io"

	"github.com/stratanet/strata/internal/codec"
)

// Frames are how every Strata stream protocol delimits its messages: a
// 4-byte big-endian payload length followed by the payload. The framing
// lives in internal/codec, below swarm and consensus (whose built-in
// control protocol uses it too); swarm names it for its callers.

// FrameHeaderSize is the size of a frame's length prefix.
const FrameHeaderSize = codec.FrameHeaderSize

// Frame size limits.
const (
	// DefaultMaxActFrame bounds activation frames: a prefill of 2,048
	// tokens of an 8,192-wide model in float32 is 64 MiB.
	DefaultMaxActFrame = 64 << 20
	// DefaultMaxCtlFrame bounds control requests and responses.
	DefaultMaxCtlFrame = 4 << 20
	// MaxFrameLimit is the largest maximum any reader accepts.
	MaxFrameLimit = codec.MaxFrameLimit
)

// FrameReader reads frames from a stream into a buffer that it reuses.
type FrameReader = codec.FrameReader

// WriteFrame writes p as one frame. It fails without writing when p is
// larger than max (max <= 0 means MaxFrameLimit).
func WriteFrame(w io.Writer, p []byte, max int) error { return codec.WriteFrame(w, p, max) }

// NewFrameReader reads frames of at most max bytes from r (max <= 0 means
// DefaultMaxActFrame).
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxActFrame
	}
	return codec.NewFrameReader(r, max)
}

// ReadFrame reads one frame of at most max bytes into a new slice.
func ReadFrame(r io.Reader, max int) ([]byte, error) { return codec.ReadFrame(r, max) }
