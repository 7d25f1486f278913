package consensus

import (
	"bytes"
	"errors"
	"testing"
)

func TestManifestPublished(t *testing.T) {
	caps := testCaps(t)
	man := []byte("the manifest")
	var empty State
	if _, err := empty.Apply(rec(1, ManifestPublished{Fingerprint: "fp", Manifest: man})); !errors.Is(err, ErrRejected) {
		t.Fatalf("manifest before any join: %v", err)
	}
	s := mustApply(t, empty, rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"}))
	if s.Manifest() != nil {
		t.Fatal("a manifest before one was published")
	}
	if _, err := s.Apply(rec(2, ManifestPublished{Fingerprint: "other", Manifest: man})); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("manifest of another model: %v", err)
	}
	if _, err := s.Apply(rec(2, ManifestPublished{Fingerprint: "fp"})); !errors.Is(err, ErrRejected) {
		t.Fatalf("empty manifest: %v", err)
	}
	s = mustApply(t, s, rec(2, ManifestPublished{Fingerprint: "fp", Manifest: man}))
	got := s.Manifest()
	if !bytes.Equal(got, man) {
		t.Fatalf("manifest %q, want %q", got, man)
	}
	got[0] ^= 1 // the caller's copy
	if !bytes.Equal(s.Manifest(), man) {
		t.Fatal("Manifest shares its bytes with the caller")
	}
	if _, err := s.Apply(rec(3, ManifestPublished{Fingerprint: "fp", Manifest: man})); !errors.Is(err, ErrStale) {
		t.Fatalf("the same manifest again: %v", err)
	}
	if _, err := s.Apply(rec(3, ManifestPublished{Fingerprint: "fp", Manifest: []byte("another")})); !errors.Is(err, ErrRejected) {
		t.Fatalf("a second manifest: %v", err)
	}

	// A snapshot carries it; one written without a manifest still reads.
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var r State
	if err := r.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Manifest(), man) {
		t.Fatalf("restored manifest %q", r.Manifest())
	}
	old := Fold(rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"}))
	ob, err := old.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.UnmarshalBinary(ob); err != nil || r.Manifest() != nil {
		t.Fatalf("snapshot without a manifest: %v, manifest %q", err, r.Manifest())
	}
	// A manifest cut short is refused.
	if err := r.UnmarshalBinary(b[:len(b)-1]); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("truncated manifest: %v", err)
	}
}

func TestManifestRecordBounds(t *testing.T) {
	big := make([]byte, MaxManifestLen+1)
	if _, err := MarshalRecord(rec(1, ManifestPublished{Fingerprint: "fp", Manifest: big})); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("oversized manifest: %v", err)
	}
	ok := make([]byte, MaxManifestLen)
	b, err := MarshalRecord(rec(1, ManifestPublished{Fingerprint: "fp", Manifest: ok}))
	if err != nil {
		t.Fatalf("largest manifest: %v", err)
	}
	if len(b) > MaxRecordSize {
		t.Fatalf("largest manifest record is %d bytes, above %d", len(b), MaxRecordSize)
	}
	if err := WithManifest(big)(&config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("WithManifest of an oversized manifest: %v", err)
	}
}
