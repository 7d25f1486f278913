package codec

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

var errBad = errors.New("bad input")

func TestReaderFieldsInOrder(t *testing.T) {
	b := []byte{7}
	b = binary.BigEndian.AppendUint16(b, 0x0102)
	b = binary.BigEndian.AppendUint32(b, 0x03040506)
	b = binary.BigEndian.AppendUint64(b, 0x0708090a0b0c0d0e)
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	r := NewReader(b, binary.BigEndian, errBad)
	if v := r.U8("a"); v != 7 {
		t.Errorf("u8 %d", v)
	}
	if v := r.U16("b"); v != 0x0102 {
		t.Errorf("u16 %#x", v)
	}
	if v := r.U32("c"); v != 0x03040506 {
		t.Errorf("u32 %#x", v)
	}
	if v := r.U64("d"); v != 0x0708090a0b0c0d0e {
		t.Errorf("u64 %#x", v)
	}
	if v := r.Uvarint("e", 1000); v != 300 {
		t.Errorf("uvarint %d", v)
	}
	if v := r.Varint("f"); v != -5 {
		t.Errorf("varint %d", v)
	}
	r.End()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
}

// TestReaderFirstFailureSticks: after a failure every read is zero and
// the error names the first failure, wrapping the sentinel.
func TestReaderFirstFailureSticks(t *testing.T) {
	r := NewReader([]byte{1, 2, 3}, binary.LittleEndian, errBad)
	if v := r.U32("count"); v != 0 {
		t.Errorf("truncated u32 gave %d", v)
	}
	if v := r.U8("next"); v != 0 {
		t.Errorf("read after failure gave %d", v)
	}
	r.Fail("later failure")
	err := r.Err()
	if !errors.Is(err, errBad) || !strings.Contains(err.Error(), "truncated count") {
		t.Fatalf("error %v", err)
	}
}

func TestReaderRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []byte
		read func(*Reader)
		want string
	}{
		"non-canonical uvarint": {[]byte{0x80, 0x00}, func(r *Reader) { r.Uvarint("n", 10) }, "non-canonical n"},
		"uvarint over limit":    {binary.AppendUvarint(nil, 11), func(r *Reader) { r.Uvarint("n", 10) }, "n 11 exceeds 10"},
		"non-canonical varint":  {[]byte{0x81, 0x00}, func(r *Reader) { r.Varint("v") }, "non-canonical v"},
		"trailing bytes":        {[]byte{1, 2}, func(r *Reader) { r.U8("x"); r.End() }, "1 trailing bytes"},
		"negative take":         {[]byte{1}, func(r *Reader) { r.Take(-1, "x") }, "truncated x"},
		"empty peer":            {[]byte{0}, func(r *Reader) { r.PeerID("hop", 64, false) }, "empty hop"},
		"long peer":             {[]byte{65}, func(r *Reader) { r.PeerID("hop", 64, false) }, "hop of 65 bytes"},
		"garbage peer":          {[]byte{2, 0xff, 0xff}, func(r *Reader) { r.PeerID("hop", 64, false) }, "hop:"},
	} {
		r := NewReader(tc.in, binary.BigEndian, errBad)
		tc.read(r)
		if err := r.Err(); !errors.Is(err, errBad) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", name, err, tc.want)
		}
	}
}

func TestReaderPeerID(t *testing.T) {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte{byte(len(id))}, id...)
	b = append(b, 0) // an empty ID where one may be empty
	r := NewReader(b, binary.BigEndian, errBad)
	if got := r.PeerID("entry", 64, false); got != id {
		t.Errorf("got %s, want %s", got, id)
	}
	if got := r.PeerID("fault", 64, true); got != "" {
		t.Errorf("empty ID read as %q", got)
	}
	r.End()
	if r.Err() != nil {
		t.Fatal(r.Err())
	}
}
