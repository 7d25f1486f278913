// Package codec is the binary encoding helper of the swarm's, the
// node's and consensus's wire formats: a Reader that takes fields in order
// from a byte slice and keeps the first failure, and a Writer that mirrors
// it field for field. It owns no format; each codec keeps its byte layout,
// its bounds and its sentinel error, and a decoder checks every count
// against the bytes left before it allocates. It sits below swarm and
// consensus, which never import each other.
package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Reader reads fields of one byte order. The first failure sticks: later
// reads return zero values and nil slices, so a decoder checks Err once
// per stage instead of after every field. Errors wrap the sentinel the
// Reader was made with.
type Reader struct {
	b        []byte
	off      int
	order    binary.ByteOrder
	sentinel error
	err      error
}

// NewReader reads b in the given byte order; its errors wrap sentinel.
func NewReader(b []byte, order binary.ByteOrder, sentinel error) *Reader {
	return &Reader{b: b, order: order, sentinel: sentinel}
}

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of bytes not read yet.
func (r *Reader) Len() int { return len(r.b) }

// Fail records a failure in words, unless one is recorded already.
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s (at byte %d)", r.sentinel, fmt.Sprintf(format, args...), r.off)
	}
}

// End fails if bytes are left: nothing may follow a message.
func (r *Reader) End() {
	if r.err == nil && len(r.b) != 0 {
		r.Fail("%d trailing bytes", len(r.b))
	}
}

// Take returns the next n bytes, aliasing the input.
func (r *Reader) Take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.Fail("truncated %s (%d bytes wanted, %d left)", what, n, len(r.b))
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	r.off += n
	return p
}

// U8 reads one byte.
func (r *Reader) U8(what string) uint8 {
	if p := r.Take(1, what); p != nil {
		return p[0]
	}
	return 0
}

// U16 reads two bytes.
func (r *Reader) U16(what string) uint16 {
	if p := r.Take(2, what); p != nil {
		return r.order.Uint16(p)
	}
	return 0
}

// U32 reads four bytes.
func (r *Reader) U32(what string) uint32 {
	if p := r.Take(4, what); p != nil {
		return r.order.Uint32(p)
	}
	return 0
}

// U64 reads eight bytes.
func (r *Reader) U64(what string) uint64 {
	if p := r.Take(8, what); p != nil {
		return r.order.Uint64(p)
	}
	return 0
}

// F32 reads an IEEE single.
func (r *Reader) F32(what string) float32 { return math.Float32frombits(r.U32(what)) }

// F64 reads an IEEE double.
func (r *Reader) F64(what string) float64 { return math.Float64frombits(r.U64(what)) }

// Uvarint reads a canonical (shortest) uvarint of at most limit.
func (r *Reader) Uvarint(what string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n <= 0:
		r.Fail("truncated %s", what)
		return 0
	case n != len(binary.AppendUvarint(nil, v)):
		r.Fail("non-canonical %s", what)
		return 0
	case v > limit:
		r.Fail("%s %d exceeds %d", what, v, limit)
		return 0
	}
	r.b = r.b[n:]
	r.off += n
	return v
}

// Varint reads a canonical (shortest) zig-zag varint.
func (r *Reader) Varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	switch {
	case n <= 0:
		r.Fail("truncated %s", what)
		return 0
	case n != len(binary.AppendVarint(nil, v)):
		r.Fail("non-canonical %s", what)
		return 0
	}
	r.b = r.b[n:]
	r.off += n
	return v
}

// PeerID reads a peer ID as a u8 length and the ID's bytes, of at most
// maxLen bytes. A zero length is the empty ID where mayBeEmpty, and a
// failure otherwise.
func (r *Reader) PeerID(what string, maxLen int, mayBeEmpty bool) peer.ID {
	n := int(r.U8(what + " length"))
	if r.err != nil {
		return ""
	}
	if n == 0 {
		if !mayBeEmpty {
			r.Fail("empty %s", what)
		}
		return ""
	}
	if n > maxLen {
		r.Fail("%s of %d bytes (max %d)", what, n, maxLen)
		return ""
	}
	raw := r.Take(n, what)
	if r.err != nil {
		return ""
	}
	id, err := peer.IDFromBytes(raw)
	if err != nil {
		r.Fail("%s: %v", what, err)
		return ""
	}
	return id
}

// Bytes16 reads a u16 length and that many bytes (aliasing the input),
// of at most maxLen: Writer.Bytes16's mirror.
func (r *Reader) Bytes16(what string, maxLen int) []byte {
	n := int(r.U16(what + " length"))
	if r.err == nil && n > maxLen {
		r.Fail("%s of %d bytes (max %d)", what, n, maxLen)
		return nil
	}
	return r.Take(n, what)
}

// Bytes8 reads a u8 length and that many bytes (aliasing the input), of
// at most maxLen; a zero length fails unless mayBeEmpty: Writer.Bytes8's
// mirror.
func (r *Reader) Bytes8(what string, maxLen int, mayBeEmpty bool) []byte {
	n := int(r.U8(what + " length"))
	switch {
	case r.err != nil:
		return nil
	case n == 0 && !mayBeEmpty:
		r.Fail("empty %s", what)
		return nil
	case n > maxLen:
		r.Fail("%s of %d bytes (max %d)", what, n, maxLen)
		return nil
	}
	return r.Take(n, what)
}
