package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frames are how every Strata stream protocol delimits its messages (the
// swarm's, and consensus's built-in control protocol): a
// 4-byte big-endian payload length followed by the payload. A reader
// checks the declared length against its maximum before it allocates or
// reads a byte of the payload, so a peer cannot make it reserve memory by
// lying in a header.

// FrameHeaderSize is the size of a frame's length prefix.
const FrameHeaderSize = 4

// MaxFrameLimit is the largest maximum any reader accepts.
const MaxFrameLimit = 1<<31 - 1

// Frame errors.
var (
	// ErrFrameTooLarge: a frame's declared length is above the maximum.
	// Nothing of the payload was allocated or read.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrShortFrame: the stream ended inside a frame.
	ErrShortFrame = errors.New("truncated frame")
)

// smallFrame is the payload size below which WriteFrame copies header and
// payload into one buffer so that they leave in one write.
const smallFrame = 32 << 10

// WriteFrame writes p as one frame. It fails without writing when p is
// larger than max (max <= 0 means MaxFrameLimit).
func WriteFrame(w io.Writer, p []byte, max int) error {
	if max <= 0 || max > MaxFrameLimit {
		max = MaxFrameLimit
	}
	if len(p) > max {
		return fmt.Errorf("write %d bytes (max %d): %w", len(p), max, ErrFrameTooLarge)
	}
	if len(p) <= smallFrame {
		var buf [FrameHeaderSize + smallFrame]byte
		binary.BigEndian.PutUint32(buf[:], uint32(len(p)))
		n := copy(buf[FrameHeaderSize:], p)
		_, err := w.Write(buf[:FrameHeaderSize+n])
		return err
	}
	var hdr [FrameHeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(p)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// FrameReader reads frames from a stream into a buffer that it reuses.
type FrameReader struct {
	r   io.Reader
	max int
	hdr [FrameHeaderSize]byte
	buf []byte
}

// NewFrameReader reads frames of at most max bytes from r (max <= 0 or
// above MaxFrameLimit means MaxFrameLimit).
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 || max > MaxFrameLimit {
		max = MaxFrameLimit
	}
	return &FrameReader{r: r, max: max}
}

// Max is the largest payload the reader accepts.
func (fr *FrameReader) Max() int { return fr.max }

// Next returns the next frame's payload. The slice is valid until the next
// call. At a clean end of stream between frames it returns io.EOF; a
// stream that ends inside a frame gives ErrShortFrame, and a declared
// length above the maximum gives ErrFrameTooLarge before any allocation.
// After an error the stream is out of step and must be closed.
func (fr *FrameReader) Next() ([]byte, error) {
	n, err := readHeader(fr.r, fr.hdr[:], fr.max)
	if err != nil {
		return nil, err
	}
	// Let go of a huge buffer once frames are small again.
	if cap(fr.buf) > 1<<20 && n < cap(fr.buf)/4 {
		fr.buf = nil
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		return nil, shortErr(err)
	}
	return p, nil
}

// ReadFrame reads one frame of at most max bytes into a new slice.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 || max > MaxFrameLimit {
		max = MaxFrameLimit
	}
	var hdr [FrameHeaderSize]byte
	n, err := readHeader(r, hdr[:], max)
	if err != nil {
		return nil, err
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, shortErr(err)
	}
	return p, nil
}

func readHeader(r io.Reader, hdr []byte, max int) (int, error) {
	if _, err := io.ReadFull(r, hdr); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		return 0, shortErr(err)
	}
	n := binary.BigEndian.Uint32(hdr)
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("frame declares %d bytes (max %d): %w", n, max, ErrFrameTooLarge)
	}
	return int(n), nil
}

func shortErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", ErrShortFrame, io.ErrUnexpectedEOF)
	}
	return err
}
