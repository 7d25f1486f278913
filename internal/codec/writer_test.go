package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// The Writer's bytes are encoding/binary's, field for field, and read back
// through the Reader.
func TestWriterMatchesBinaryAndReader(t *testing.T) {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	for _, order := range []interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}{binary.BigEndian, binary.LittleEndian} {
		want := []byte{0xee, 7}
		want = order.AppendUint16(want, 0x0102)
		want = order.AppendUint32(want, 0x03040506)
		want = order.AppendUint64(want, 0x0708090a0b0c0d0e)
		want = order.AppendUint32(want, math.Float32bits(1.5))
		want = order.AppendUint64(want, math.Float64bits(-2.25))
		want = binary.AppendUvarint(want, 300)
		want = binary.AppendVarint(want, -5)
		want = append(want, byte(len(id)))
		want = append(want, id...)
		want = order.AppendUint16(want, 3)
		want = append(want, "abc"...)
		want = append(want, 0) // an empty ID
		want = append(want, 2, 'h', 'i')

		w := NewWriter([]byte{0xee}, order, errBad)
		w.U8(7)
		w.U16(0x0102)
		w.U32(0x03040506)
		w.U64(0x0708090a0b0c0d0e)
		w.F32(1.5)
		w.F64(-2.25)
		w.Uvarint(300)
		w.Varint(-5)
		w.PeerID("id", id, 64, false)
		w.Bytes16("text", []byte("abc"), 10)
		w.PeerID("empty id", "", 64, true)
		w.Bytes8("name", []byte("hi"), 8, false)
		if w.Err() != nil || !bytes.Equal(w.Bytes(), want) || w.Len() != len(want) {
			t.Fatalf("%v: wrote %x (%v), want %x", order, w.Bytes(), w.Err(), want)
		}

		r := NewReader(w.Bytes()[1:], order, errBad)
		ok := r.U8("a") == 7 && r.U16("b") == 0x0102 && r.U32("c") == 0x03040506 && r.U64("d") == 0x0708090a0b0c0d0e &&
			r.F32("e") == 1.5 && r.F64("f") == -2.25 && r.Uvarint("g", 1000) == 300 && r.Varint("h") == -5 &&
			r.PeerID("id", 64, false) == id && string(r.Bytes16("text", 10)) == "abc" && r.PeerID("empty", 64, true) == "" &&
			string(r.Bytes8("name", 8, false)) == "hi"
		r.End()
		if !ok || r.Err() != nil {
			t.Fatalf("%v: read back %v (fields equal: %v)", order, r.Err(), ok)
		}
	}
}

// A field out of bounds fails with the sentinel, sticks, and leaves no
// bytes to send.
func TestWriterFailureSticks(t *testing.T) {
	for name, write := range map[string]func(w *Writer){
		"long bytes8":  func(w *Writer) { w.Bytes8("name", make([]byte, 9), 8, false) },
		"over u8":      func(w *Writer) { w.Bytes8("name", make([]byte, 256), 1000, false) },
		"empty bytes8": func(w *Writer) { w.Bytes8("name", nil, 8, false) },
		"long bytes16": func(w *Writer) { w.Bytes16("text", make([]byte, 11), 10) },
		"over u16":     func(w *Writer) { w.Bytes16("text", make([]byte, 1<<16), 1<<20) },
		"empty peer":   func(w *Writer) { w.PeerID("id", "", 64, false) },
		"failed":       func(w *Writer) { w.Fail("refused %d", 3) },
	} {
		w := NewWriter(nil, binary.BigEndian, errBad)
		w.U8(1)
		write(w)
		first := w.Err()
		w.U32(5)
		w.Fail("a second failure")
		if !errors.Is(first, errBad) || w.Err() != first || w.Bytes() != nil || w.Len() != 1 {
			t.Errorf("%s: err %v then %v, bytes %x, len %d", name, first, w.Err(), w.Bytes(), w.Len())
		}
		if !strings.Contains(first.Error(), "at byte 1") {
			t.Errorf("%s: %v names no offset", name, first)
		}
	}
}

// Bytes16 refuses a length above its bound before it takes a byte.
func TestReaderBytes16Bound(t *testing.T) {
	r := NewReader([]byte{0, 11, 'x'}, binary.BigEndian, errBad)
	if p := r.Bytes16("text", 10); p != nil || !errors.Is(r.Err(), errBad) {
		t.Fatalf("got %q, %v", p, r.Err())
	}
}
