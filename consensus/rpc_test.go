package consensus

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stratanet/strata/layers"
)

func TestControlCodec(t *testing.T) {
	r := rec(1, StageReady{Node: "n", Epoch: 4, Range: layers.Range{Start: 2, End: 9}})
	for _, tc := range []struct {
		origin string
		hops   uint8
	}{{"", 0}, {"origin", 1}} {
		b, err := encodeRequest(tc.origin, tc.hops, r)
		if err != nil {
			t.Fatal(err)
		}
		origin, hops, got, err := decodeRequest(b)
		if err != nil || origin != tc.origin || hops != tc.hops || got.Event != r.Event {
			t.Fatalf("round trip: %q %d %+v %v", origin, hops, got, err)
		}
	}
	for _, bad := range [][]byte{nil, {'S', 'C', 2, 0, 0, 0}, {'S', 'C', 1, 1, 0, 0}, {'S', 'C', 1, 2, 1, 'x', 0}, {'S', 'C', 1, 0, 1, 'x', 0}, {1, 0, 0, 0}} {
		if _, _, _, err := decodeRequest(bad); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%x: %v", bad, err)
		}
	}
	// Errors cross the wire as their sentinels.
	for _, sentinel := range []error{ErrFingerprint, ErrStale, ErrNotLeader, ErrForbidden} {
		err := decodeResponse(encodeResponse(sentinel))
		if !errors.Is(err, sentinel) {
			t.Errorf("%v came back as %v", sentinel, err)
		}
	}
	if err := decodeResponse(encodeResponse(errors.New("other"))); !errors.Is(err, ErrRemote) {
		t.Errorf("plain error came back as %v", err)
	}
	if err := decodeResponse(encodeResponse(nil)); err != nil {
		t.Errorf("success came back as %v", err)
	}
	var buf bytes.Buffer
	if err := writeFrame(&buf, make([]byte, MaxControlFrame+2)); !errors.Is(err, ErrBadEvent) {
		t.Errorf("oversize frame written: %v", err)
	}
	buf.Write([]byte{0xff, 0xff, 0xff, 0xff})
	if _, err := readFrame(&buf, MaxControlFrame); !errors.Is(err, ErrBadEvent) {
		t.Errorf("oversize frame read: %v", err)
	}
}

// FuzzControlRequest: a control request from a peer decodes or is
// refused with ErrBadEvent, never a panic.
func FuzzControlRequest(f *testing.F) {
	for _, r := range sampleRecords(f) {
		for _, origin := range []string{"", "someone"} {
			hops := uint8(0)
			if origin != "" {
				hops = 1
			}
			if b, err := encodeRequest(origin, hops, r); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		origin, hops, r, err := decodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error without ErrBadEvent: %v", err)
			}
			return
		}
		again, err := encodeRequest(origin, hops, r)
		if err != nil {
			t.Fatalf("decoded request does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs")
		}
	})
}
