package codec

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Writer appends fields of one byte order; it mirrors Reader field for
// field, so that an encoder and its decoder read alike. Appending cannot
// fail, but a field can be out of its bounds (a peer ID or a string longer
// than its length prefix holds): the first such failure sticks, later
// writes do nothing, and Bytes is nil while Err is set. Errors wrap the
// sentinel the Writer was made with.
type Writer struct {
	b        []byte
	order    binary.AppendByteOrder
	sentinel error
	err      error
}

// NewWriter appends to buf (which may be nil; pass a slice with capacity
// to write without allocating) in the given byte order; its errors wrap
// sentinel.
func NewWriter(buf []byte, order binary.AppendByteOrder, sentinel error) *Writer {
	return &Writer{b: buf, order: order, sentinel: sentinel}
}

// Err is the first failure, or nil.
func (w *Writer) Err() error { return w.err }

// Len is the number of bytes written so far, buf's included.
func (w *Writer) Len() int { return len(w.b) }

// Bytes is what was written, buf's bytes included; nil after a failure.
func (w *Writer) Bytes() []byte {
	if w.err != nil {
		return nil
	}
	return w.b
}

// Fail records a failure in words, unless one is recorded already.
func (w *Writer) Fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf("%w: %s (at byte %d)", w.sentinel, fmt.Sprintf(format, args...), len(w.b))
	}
}

// Put appends p as it is (Reader.Take's mirror).
func (w *Writer) Put(p []byte) {
	if w.err == nil {
		w.b = append(w.b, p...)
	}
}

// U8 writes one byte.
func (w *Writer) U8(v uint8) {
	if w.err == nil {
		w.b = append(w.b, v)
	}
}

// U16 writes two bytes.
func (w *Writer) U16(v uint16) {
	if w.err == nil {
		w.b = w.order.AppendUint16(w.b, v)
	}
}

// U32 writes four bytes.
func (w *Writer) U32(v uint32) {
	if w.err == nil {
		w.b = w.order.AppendUint32(w.b, v)
	}
}

// U64 writes eight bytes.
func (w *Writer) U64(v uint64) {
	if w.err == nil {
		w.b = w.order.AppendUint64(w.b, v)
	}
}

// F32 writes an IEEE single.
func (w *Writer) F32(v float32) { w.U32(math.Float32bits(v)) }

// F64 writes an IEEE double.
func (w *Writer) F64(v float64) { w.U64(math.Float64bits(v)) }

// Uvarint writes v as a canonical uvarint.
func (w *Writer) Uvarint(v uint64) {
	if w.err == nil {
		w.b = binary.AppendUvarint(w.b, v)
	}
}

// Varint writes v as a canonical zig-zag varint.
func (w *Writer) Varint(v int64) {
	if w.err == nil {
		w.b = binary.AppendVarint(w.b, v)
	}
}

// Bytes8 writes p as a u8 length and its bytes; it fails above maxLen
// (at most 255) or when p is empty and mayBeEmpty is false.
func (w *Writer) Bytes8(what string, p []byte, maxLen int, mayBeEmpty bool) {
	switch {
	case w.err != nil:
		return
	case len(p) == 0 && !mayBeEmpty:
		w.Fail("empty %s", what)
	case len(p) > min(maxLen, math.MaxUint8):
		w.Fail("%s of %d bytes (max %d)", what, len(p), min(maxLen, math.MaxUint8))
	default:
		w.U8(uint8(len(p)))
		w.Put(p)
	}
}

// Bytes16 writes p as a u16 length and its bytes; it fails above maxLen
// (at most 65,535).
func (w *Writer) Bytes16(what string, p []byte, maxLen int) {
	if w.err != nil {
		return
	}
	if len(p) > min(maxLen, math.MaxUint16) {
		w.Fail("%s of %d bytes (max %d)", what, len(p), min(maxLen, math.MaxUint16))
		return
	}
	w.U16(uint16(len(p)))
	w.Put(p)
}

// PeerID writes a peer ID as Reader.PeerID reads it: a u8 length and the
// ID's bytes, of at most maxLen bytes; the empty ID is a zero length
// where mayBeEmpty, and a failure otherwise.
func (w *Writer) PeerID(what string, id peer.ID, maxLen int, mayBeEmpty bool) {
	w.Bytes8(what, []byte(id), maxLen, mayBeEmpty)
}
