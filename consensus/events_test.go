package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

func sampleRecords(t testing.TB) []Record {
	caps := testCaps(t)
	caps.MaxLayers = 7
	caps.Relayed = true
	m := mustMap(t, 8, 3, st("a", 0, 5), st("b", 4, 8))
	return []Record{
		rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp", Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"}}),
		rec(2, NodeJoined{Node: "b", Caps: testCaps(t), Fingerprint: "fp"}),
		rec(3, NodeLeft{Node: "a", Reason: LeftDead}),
		rec(4, NodeDraining{Node: "b"}),
		rec(5, MapProposed{Map: m, Deadline: t0.Add(time.Minute), Reason: "join of b"}),
		rec(6, StageReady{Node: "b", Epoch: 3, Range: layers.Range{Start: 4, End: 8}}),
		rec(7, MapCommitted{Epoch: 3}),
		rec(8, WarmupAbandoned{Epoch: 3, Laggards: []string{"b", "a"}, Until: t0.Add(time.Hour), Reason: "deadline"}),
		{Event: MapCommitted{Epoch: 1}}, // zero time
		rec(9, ManifestPublished{Fingerprint: "fp", Manifest: []byte("manifest bytes")}),
		rec(10, sampleFault(t)),
		rec(11, ManifestPart{Fingerprint: "fp", Digest: sha256.Sum256([]byte("whole")), Index: 1, Total: 3, Bytes: []byte("part")}),
		rec(12, SwarmConfigSet{VerifyRate: 0.05}),
		rec(13, sampleToleranceFault(t)),
		rec(14, SessionTokensSet{Tokens: 1000}),
		rec(15, sampleMidToleranceFault(t)),
		rec(16, sampleStewards(t)),
	}
}

// sampleStewards is a founder's signed steward set (stewards_test.go).
func sampleStewards(t testing.TB) StewardsSet {
	s, keys, ids := stewardSwarm(t, 3, "fp", 1)
	return mustSign(t, s, ids[:2], keys[0])
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range sampleRecords(t) {
		b, err := MarshalRecord(r)
		if err != nil {
			t.Fatalf("%s: %v", r.Event.Kind(), err)
		}
		got, err := UnmarshalRecord(b)
		if err != nil {
			t.Fatalf("%s: %v", r.Event.Kind(), err)
		}
		if !got.At.Equal(r.At) || !reflect.DeepEqual(got.Event, r.Event) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", r.Event.Kind(), got, r)
		}
		// Every strict prefix is refused, never a panic.
		for i := range b {
			if _, err := UnmarshalRecord(b[:i]); !errors.Is(err, ErrBadEvent) {
				t.Fatalf("%s: prefix of %d: %v", r.Event.Kind(), i, err)
			}
		}
		if _, err := UnmarshalRecord(append(b, 0)); !errors.Is(err, ErrBadEvent) {
			t.Fatalf("%s: trailing byte: %v", r.Event.Kind(), err)
		}
	}
}

func TestRecordRefusals(t *testing.T) {
	caps := testCaps(t)
	bad := map[string]Record{
		"no fingerprint":     rec(1, NodeJoined{Node: "a", Caps: caps}),
		"no node":            rec(1, NodeJoined{Caps: caps, Fingerprint: "fp"}),
		"bad hardware":       rec(1, NodeJoined{Node: "a", Fingerprint: "fp"}),
		"long id":            rec(1, NodeDraining{Node: strings.Repeat("x", MaxIDLen+1)}),
		"too many addrs":     rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp", Addrs: make([]string, MaxAddrs+1)}),
		"empty addr":         rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp", Addrs: []string{""}}),
		"bad reason":         rec(1, NodeLeft{Node: "a", Reason: 9}),
		"empty map":          rec(1, MapProposed{}),
		"empty range":        rec(1, StageReady{Node: "a", Epoch: 1, Range: layers.Range{Start: 3, End: 3}}),
		"duplicate laggards": rec(1, WarmupAbandoned{Epoch: 1, Laggards: []string{"a", "a"}}),
		"long reason":        rec(1, MapCommitted{}),
	}
	bad["long reason"] = rec(1, WarmupAbandoned{Epoch: 1, Reason: strings.Repeat("r", MaxReasonLen+1)})
	for name, r := range bad {
		if _, err := MarshalRecord(r); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := MarshalRecord(Record{}); !errors.Is(err, ErrBadEvent) {
		t.Errorf("no event: %v", err)
	}
	raw := map[string][]byte{
		"empty":         nil,
		"version 2":     {2, byte(KindMapCommitted), 0, 1},
		"unknown kind":  {1, 99, 0},
		"non-canonical": {1, byte(KindMapCommitted), 0, 0x81, 0x00},
		"huge count":    append([]byte{1, byte(KindWarmupAbandoned), 0, 1}, binary.AppendUvarint(nil, MaxMembers)...),
		"oversize":      make([]byte, MaxRecordSize+1),
		"bad utf-8":     {1, byte(KindNodeDraining), 0, 2, 0xff, 0xfe},
	}
	for name, b := range raw {
		if _, err := UnmarshalRecord(b); !errors.Is(err, ErrBadEvent) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzUnmarshalRecord: any bytes decode to a record or to ErrBadEvent;
// what decodes re-encodes to the same bytes (one encoding per record) and
// folds into a state without a panic.
func FuzzUnmarshalRecord(f *testing.F) {
	for _, r := range sampleRecords(f) {
		b, err := MarshalRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	base := Fold(sampleRecords(f)[:2]...)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := UnmarshalRecord(b)
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error without ErrBadEvent: %v", err)
			}
			return
		}
		again, err := MarshalRecord(r)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
		next, err := base.Apply(r)
		if err == nil {
			if _, err := next.MarshalBinary(); err != nil {
				t.Fatalf("admitted record gives a state that does not encode: %v", err)
			}
		}
	})
}

// FuzzUnmarshalState: a snapshot from a peer (raft installs them) never
// panics the decoder, and what decodes re-encodes to the same bytes.
func FuzzUnmarshalState(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3} {
		b, err := Fold(randomLog(seed, 120)...).MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	withManifest := Fold(sampleRecords(f)[1], rec(9, ManifestPublished{Fingerprint: "fp", Manifest: []byte("manifest")}))
	if b, err := withManifest.MarshalBinary(); err != nil || withManifest.Manifest() == nil {
		f.Fatalf("state with a manifest: %v", err)
	} else {
		f.Add(b)
	}
	midParts := Fold(sampleRecords(f)[1], rec(9, ManifestPart{Fingerprint: "fp", Digest: sha256.Sum256([]byte("whole")), Index: 1, Total: 3, Bytes: []byte("part")}))
	if b, err := midParts.MarshalBinary(); err != nil {
		f.Fatalf("state with manifest parts: %v", err)
	} else {
		f.Add(b)
	}
	// The swarm's configuration, with and without a manifest before it.
	for _, st := range []State{Fold(sampleRecords(f)[1], rec(9, SwarmConfigSet{VerifyRate: 0.05})),
		Fold(sampleRecords(f)[1], rec(9, ManifestPublished{Fingerprint: "fp", Manifest: []byte("m")}), rec(10, SwarmConfigSet{VerifyRate: 1})),
		Fold(sampleRecords(f)[1], rec(9, SessionTokensSet{Tokens: 1000})),
		Fold(sampleRecords(f)[1], rec(9, ManifestPublished{Fingerprint: "fp", Manifest: []byte("m")}), rec(10, SwarmConfigSet{VerifyRate: 1}), rec(11, SessionTokensSet{Tokens: 0}))} {
		b, err := st.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Stewards, alone and after the other sections.
	{
		s, keys, ids := stewardSwarm(f, 3, "fp", 1)
		for _, st := range []State{s, Fold(sampleRecords(f)[1], rec(9, SwarmConfigSet{VerifyRate: 1}))} {
			if st.Len() == 1 {
				st, _ = st.Apply(rec(10, NodeJoined{Node: ids[0], Caps: testCaps(f), Fingerprint: "fp"}))
				st, _ = st.Apply(rec(11, NodeLeft{Node: "b", Reason: LeftDead}))
			}
			st, err := st.Apply(rec(12, mustSign(f, st, ids, keys[0])))
			if err != nil {
				f.Fatal(err)
			}
			b, err := st.MarshalBinary()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error without ErrBadSnapshot: %v", err)
			}
			return
		}
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded state does not encode: %v", err)
		}
		want := b
		if string(b[:4]) == snapshotMagicV1 {
			// A v1 snapshot reads as a v2 one with no bans.
			want = append([]byte(snapshotMagic), b[4:]...)
			want = append(want, 0)
		}
		if !bytes.Equal(again, want) {
			t.Fatalf("re-encoding differs")
		}
	})
}
