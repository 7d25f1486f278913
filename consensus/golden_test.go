package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stratanet/strata/internal/goldentest"
)

// checkGoldenLines is goldentest.Lines on names and their encodings: the
// file's bytes in order.
func checkGoldenLines(t *testing.T, file string, names []string, encs [][]byte) [][]byte {
	t.Helper()
	lines := make([]goldentest.Line, len(encs))
	for i, b := range encs {
		lines[i] = goldentest.Line{Name: names[i], Bytes: b}
	}
	var got [][]byte
	for _, l := range goldentest.Lines(t, file, lines) {
		got = append(got, l.Bytes)
	}
	return got
}

// Every Raft record kind (events.go and the records beside it: faults,
// manifests, swarm config, stewards), fully populated as sampleRecords
// makes them; decoding the golden bytes gives each record back.
func TestGoldenRecords(t *testing.T) {
	recs := sampleRecords(t)
	var names []string
	var encs [][]byte
	for i, r := range recs {
		b, err := MarshalRecord(r)
		if err != nil {
			t.Fatalf("%d %s: %v", i, r.Event.Kind(), err)
		}
		names = append(names, fmt.Sprintf("%02d-%s", i, r.Event.Kind()))
		encs = append(encs, b)
	}
	for i, b := range checkGoldenLines(t, "records.txt", names, encs) {
		got, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", names[i], err)
		}
		if !got.At.Equal(recs[i].At) || !reflect.DeepEqual(got.Event, recs[i].Event) {
			t.Fatalf("%s: golden bytes decode to\n%+v\nwant\n%+v", names[i], got, recs[i])
		}
	}
}

// The control protocol's requests (a record with and without a
// forwarding origin) and its responses (success, each sentinel, a plain
// error).
func TestGoldenControlRPC(t *testing.T) {
	recs := sampleRecords(t)
	type req struct {
		origin string
		hops   uint8
		r      Record
	}
	reqs := []req{{"", 0, recs[0]}, {"12D3KooWforwarder", 1, recs[4]}, {"", 0, recs[len(recs)-1]}}
	resps := []error{nil, ErrFingerprint, ErrStale, ErrNotLeader, ErrForbidden, errors.New("disk full")}
	var names []string
	var encs [][]byte
	for i, q := range reqs {
		b, err := encodeRequest(q.origin, q.hops, q.r)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fmt.Sprintf("request-%d", i))
		encs = append(encs, b)
	}
	for i, e := range resps {
		names = append(names, fmt.Sprintf("response-%d", i))
		encs = append(encs, encodeResponse(e))
	}
	g := checkGoldenLines(t, "rpc.txt", names, encs)
	for i, q := range reqs {
		origin, hops, r, err := decodeRequest(g[i])
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if origin != q.origin || hops != q.hops || !r.At.Equal(q.r.At) || !reflect.DeepEqual(r.Event, q.r.Event) {
			t.Fatalf("request %d decodes to %q %d %+v, want %q %d %+v", i, origin, hops, r, q.origin, q.hops, q.r)
		}
	}
	for i, want := range resps {
		err := decodeResponse(g[len(reqs)+i])
		switch {
		case want == nil:
			if err != nil {
				t.Fatalf("success response decodes to %v", err)
			}
		case errors.Is(want, ErrFingerprint), errors.Is(want, ErrStale), errors.Is(want, ErrNotLeader), errors.Is(want, ErrForbidden):
			if !errors.Is(err, want) {
				t.Fatalf("response %d decodes to %v, want %v", i, err, want)
			}
		default:
			if !errors.Is(err, ErrRemote) || !strings.Contains(err.Error(), want.Error()) {
				t.Fatalf("plain error response decodes to %v", err)
			}
		}
	}
}

// The state snapshot Raft installs, folded from every sample record, and
// a lone receipt (the signed part of faults and of node's receipt frame).
func TestGoldenStateAndReceipt(t *testing.T) {
	s := Fold(sampleRecords(t)...)
	sb, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f := sampleFault(t)
	rb, err := f.Evidence.Receipts[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	g := checkGoldenLines(t, "state.txt", []string{"state", "receipt"}, [][]byte{sb, rb})
	var got State
	if err := got.UnmarshalBinary(g[0]); err != nil {
		t.Fatal(err)
	}
	// State's fields are unexported maps: it must encode back to the
	// golden bytes, and what it says must be what the fold said.
	back, err := got.MarshalBinary()
	if err != nil || !bytes.Equal(back, g[0]) {
		t.Fatalf("golden state re-encodes to %x (%v)", back, err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("golden state decodes to\n%+v\nwant\n%+v", got, s)
	}
	var r Receipt
	if err := r.UnmarshalBinary(g[1]); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, f.Evidence.Receipts[0]) {
		t.Fatalf("golden receipt decodes to\n%+v\nwant\n%+v", r, f.Evidence.Receipts[0])
	}
	if err := r.Verify(); err != nil {
		t.Fatalf("golden receipt's signature: %v", err)
	}
}
