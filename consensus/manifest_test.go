package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
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
	// Larger ones go in parts, up to MaxManifestSize.
	if err := WithManifest(big)(&config{}); err != nil {
		t.Fatalf("WithManifest of a manifest larger than a record: %v", err)
	}
	if err := WithManifest(make([]byte, MaxManifestSize+1))(&config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("WithManifest of an oversized manifest: %v", err)
	}
}

// bigManifest is a manifest of n pseudo-random bytes (seeded: the same
// bytes every run) that needs parts.
func bigManifest(t testing.TB, n int, seed uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 17))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func joinedState(t *testing.T) State {
	return mustApply(t, State{}, rec(1, NodeJoined{Node: "a", Caps: testCaps(t), Fingerprint: "fp"}))
}

func TestManifestPartsAssemble(t *testing.T) {
	man := bigManifest(t, 2*MaxManifestLen+MaxManifestLen/2, 1)
	parts, err := SplitManifest("fp", man)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 3 {
		t.Fatalf("%d bytes split into %d parts, want 3", len(man), len(parts))
	}
	var joined []byte
	for i, p := range parts {
		if p.Index != i || p.Total != 3 || p.Digest != sha256.Sum256(man) || len(p.Bytes) == 0 {
			t.Fatalf("part %d: index %d total %d, %d bytes", i, p.Index, p.Total, len(p.Bytes))
		}
		joined = append(joined, p.Bytes...)
		// Each part is a record of its own, within the bound.
		b, err := MarshalRecord(rec(2, p))
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if len(b) > MaxRecordSize {
			t.Fatalf("part %d is a %d-byte record, above %d", i, len(b), MaxRecordSize)
		}
		r, err := UnmarshalRecord(b)
		if err != nil || !reflect.DeepEqual(r.Event, p) {
			t.Fatalf("part %d round trip: %v", i, err)
		}
	}
	if !bytes.Equal(joined, man) {
		t.Fatal("the parts do not join into the manifest")
	}

	// Parts may come in any order; the manifest shows only once whole.
	s := joinedState(t)
	for n, i := range []int{2, 0, 1} {
		if s.Manifest() != nil {
			t.Fatalf("manifest visible after %d of 3 parts", n)
		}
		if got, total := s.ManifestProgress(); got != n || (n > 0 && total != 3) {
			t.Fatalf("progress %d/%d after %d parts", got, total, n)
		}
		s = mustApply(t, s, rec(2+n, parts[i]))
	}
	if !bytes.Equal(s.Manifest(), man) {
		t.Fatal("assembled manifest differs")
	}
	if got, total := s.ManifestProgress(); got != 0 || total != 0 {
		t.Fatalf("progress %d/%d once whole", got, total)
	}
	if !s.HasManifestPart(parts[0].Digest, 1) {
		t.Fatal("a whole manifest does not count its parts as in")
	}
	// A part once whole: stale for the same manifest, refused for another.
	if _, err := s.Apply(rec(9, parts[1])); !errors.Is(err, ErrStale) {
		t.Fatalf("a part of the whole manifest again: %v", err)
	}
	other, _ := SplitManifest("fp", bigManifest(t, len(man), 2))
	if _, err := s.Apply(rec(9, other[0])); !errors.Is(err, ErrRejected) {
		t.Fatalf("a part of another manifest once one is whole: %v", err)
	}
	if _, err := s.Apply(rec(9, ManifestPublished{Fingerprint: "fp", Manifest: []byte("small")})); !errors.Is(err, ErrRejected) {
		t.Fatalf("a whole manifest after parts: %v", err)
	}
}

func TestManifestPartsRejected(t *testing.T) {
	man := bigManifest(t, MaxManifestLen+1000, 3)
	parts, err := SplitManifest("fp", man)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (State{}).Apply(rec(1, parts[0])); !errors.Is(err, ErrRejected) {
		t.Fatalf("a part before the swarm has a model: %v", err)
	}
	s := joinedState(t)
	foreign := parts[0]
	foreign.Fingerprint = "other"
	if _, err := s.Apply(rec(2, foreign)); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("a part of another model: %v", err)
	}
	s = mustApply(t, s, rec(2, parts[0]))

	with := func(f func(*ManifestPart)) ManifestPart {
		p := parts[1]
		p.Bytes = bytes.Clone(p.Bytes)
		f(&p)
		return p
	}
	bad := map[string]struct {
		p    ManifestPart
		want error
	}{
		"out of range":     {with(func(p *ManifestPart) { p.Index = 2 }), ErrRejected},
		"negative index":   {with(func(p *ManifestPart) { p.Index = -1 }), ErrRejected},
		"no total":         {with(func(p *ManifestPart) { p.Total, p.Index = 0, 0 }), ErrRejected},
		"empty":            {with(func(p *ManifestPart) { p.Bytes = nil }), ErrRejected},
		"oversized":        {with(func(p *ManifestPart) { p.Bytes = make([]byte, MaxManifestLen+1) }), ErrRejected},
		"other digest":     {with(func(p *ManifestPart) { p.Digest[0] ^= 1 }), ErrRejected},
		"other total":      {with(func(p *ManifestPart) { p.Total = 3 }), ErrRejected},
		"duplicate":        {parts[0], ErrStale},
		"conflicting":      {with(func(p *ManifestPart) { p.Index = 0 }), ErrRejected},
		"wrong last bytes": {with(func(p *ManifestPart) { p.Bytes[0] ^= 1 }), ErrRejected},
	}
	for name, c := range bad {
		next, err := s.Apply(rec(3, c.p))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if got, _ := next.ManifestProgress(); got != 1 || next.Manifest() != nil || next.Applied() != s.Applied() {
			t.Errorf("%s: the refused part changed the state", name)
		}
		if err != nil {
			t.Logf("%s: %v", name, err)
		}
	}
	// Malformed parts never make a record either.
	for _, name := range []string{"out of range", "no total", "empty", "oversized"} {
		if _, err := MarshalRecord(rec(3, bad[name].p)); !errors.Is(err, ErrBadEvent) {
			t.Errorf("record of a part %s: %v", name, err)
		}
	}
	// A whole manifest in one record: another one is refused while parts
	// are in; the same one ends the publication.
	if _, err := s.Apply(rec(3, ManifestPublished{Fingerprint: "fp", Manifest: []byte("another")})); !errors.Is(err, ErrRejected) {
		t.Fatalf("another whole manifest during a publication in parts: %v", err)
	}
	s = mustApply(t, s, rec(3, parts[1]))
	if !bytes.Equal(s.Manifest(), man) {
		t.Fatal("the manifest is not whole after its last part")
	}
}

func TestManifestWholeEndsParts(t *testing.T) {
	// A manifest that fits one record, split anyway (Total 2): its whole
	// record ends the publication in parts.
	man := []byte("a manifest of a few bytes")
	d := sha256.Sum256(man)
	s := mustApply(t, joinedState(t), rec(2, ManifestPart{Fingerprint: "fp", Digest: d, Index: 0, Total: 2, Bytes: man[:5]}))
	s = mustApply(t, s, rec(3, ManifestPublished{Fingerprint: "fp", Manifest: man}))
	if !bytes.Equal(s.Manifest(), man) {
		t.Fatalf("manifest %q", s.Manifest())
	}
	if got, total := s.ManifestProgress(); got != 0 || total != 0 {
		t.Fatalf("parts left under way: %d/%d", got, total)
	}
	if _, err := s.Apply(rec(4, ManifestPart{Fingerprint: "fp", Digest: d, Index: 1, Total: 2, Bytes: man[5:]})); !errors.Is(err, ErrStale) {
		t.Fatalf("the last part after the whole: %v", err)
	}
}

func TestManifestPartsSnapshot(t *testing.T) {
	man := bigManifest(t, 3*MaxManifestLen-7, 4)
	parts, err := SplitManifest("fp", man)
	if err != nil {
		t.Fatal(err)
	}
	// Mid-publication: parts 0 and 2 of 3 in.
	mid := mustApply(t, mustApply(t, joinedState(t), rec(2, parts[2])), rec(3, parts[0]))
	b, err := mid.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var r State
	if err := r.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	again, err := r.MarshalBinary()
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("mid-publication snapshot does not re-encode to the same bytes: %v", err)
	}
	if got, total := r.ManifestProgress(); got != 2 || total != 3 || r.Manifest() != nil {
		t.Fatalf("restored progress %d/%d", got, total)
	}
	if _, err := r.Apply(rec(4, parts[0])); !errors.Is(err, ErrStale) {
		t.Fatalf("a part the snapshot holds, again: %v", err)
	}
	done := mustApply(t, r, rec(4, parts[1]))
	if !bytes.Equal(done.Manifest(), man) {
		t.Fatal("the restored publication does not complete")
	}
	// The whole one, larger than a record, round-trips too.
	b, err = done.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var w State
	if err := w.UnmarshalBinary(b); err != nil || !bytes.Equal(w.Manifest(), man) {
		t.Fatalf("snapshot of a manifest of %d bytes: %v", len(man), err)
	}
	// Every cut of the mid-publication snapshot is refused, never a panic
	// (a sample of cuts: the snapshot is megabytes).
	mb, _ := mid.MarshalBinary()
	for _, cut := range []int{1, 2, 33, 40, MaxManifestLen, len(mb) - MaxManifestLen, len(mb) - 1} {
		if err := r.UnmarshalBinary(mb[:len(mb)-cut]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("snapshot cut by %d: %v", cut, err)
		}
	}
}

func TestManifestPartsSnapshotRefusals(t *testing.T) {
	base, err := joinedState(t).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	sectionAfter := func(base []byte, total, count uint64, idx ...uint64) []byte {
		b := binary.AppendUvarint(bytes.Clone(base), partsTag)
		b = append(b, make([]byte, sha256.Size)...)
		b = binary.AppendUvarint(b, total)
		b = binary.AppendUvarint(b, count)
		for _, i := range idx {
			b = binary.AppendUvarint(b, i)
			b = appendBytes(b, []byte("part"))
		}
		return b
	}
	section := func(total, count uint64, idx ...uint64) []byte { return sectionAfter(base, total, count, idx...) }
	bad := map[string][]byte{
		"no parts":          section(3, 0),
		"all parts":         section(2, 2, 0, 1),
		"out of order":      section(3, 2, 1, 0),
		"duplicate":         section(3, 2, 1, 1),
		"index beyond":      section(3, 1, 3),
		"total beyond":      section(MaxManifestParts+1, 1, 0),
		"empty manifest":    binary.AppendUvarint(bytes.Clone(base), 0),
		"oversize manifest": binary.AppendUvarint(bytes.Clone(base), MaxManifestSize+1),
		"past the tag":      binary.AppendUvarint(bytes.Clone(base), partsTag+1),
	}
	for name, b := range bad {
		var s State
		if err := s.UnmarshalBinary(b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
	var s State
	if err := s.UnmarshalBinary(section(3, 2, 0, 2)); err != nil {
		t.Fatalf("a well-formed section: %v", err)
	}
	if got, total := s.ManifestProgress(); got != 2 || total != 3 {
		t.Fatalf("progress %d/%d", got, total)
	}
	// Parts need a swarm with a model.
	empty, err := State{}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UnmarshalBinary(sectionAfter(empty, 3, 1, 0)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("parts without a fingerprint: %v", err)
	}
}

// TestManifestPartsDecide: a leader that holds a large manifest appends
// its parts one a decision; a new leader (a restart, or another holder)
// goes on from the state, restored from a snapshot, without appending a
// part again; a leader with another manifest appends none.
func TestManifestPartsDecide(t *testing.T) {
	man := bigManifest(t, 3*MaxManifestLen, 5)
	in := newWorld(t).in
	in.Self, in.State, in.Servers = "a", joinedState(t), []RaftServer{{ID: "a", Voter: true}}
	in.Manifest = ManifestPublished{Fingerprint: "fp", Manifest: man}
	step := func(in LeaderInput) Event {
		t.Helper()
		a, _, err := Decide(in, NewLeaderState(t0))
		if err != nil {
			t.Fatal(err)
		}
		ap, ok := a.(Append)
		if !ok {
			return nil
		}
		return ap.Event
	}
	// Two parts, then the leader stops (a crash, a lost election).
	for i := range 2 {
		ev := step(in)
		p, ok := ev.(ManifestPart)
		if !ok || p.Index != i || p.Total != 3 {
			t.Fatalf("step %d: %v, want part %d of 3", i, ev, i)
		}
		in.State = mustApply(t, in.State, rec(10+i, p))
	}
	b, err := in.State.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var restored State
	if err := restored.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	// Another holder of another manifest leads: it leaves the publication
	// under way be.
	other := in
	other.State = restored
	other.Manifest = ManifestPublished{Fingerprint: "fp", Manifest: bigManifest(t, 2*MaxManifestLen, 6)}
	if ev := step(other); ev != nil {
		if _, isPart := ev.(ManifestPart); isPart {
			t.Fatalf("a leader with another manifest appends %v", ev)
		}
	}
	other.Manifest = ManifestPublished{Fingerprint: "fp", Manifest: []byte("small")}
	if ev := step(other); ev != nil && ev.Kind() == KindManifestPublished {
		t.Fatalf("a leader with another small manifest appends %v", ev)
	}
	// The restarted holder, split beforehand as New does, goes on.
	next := in
	next.State = restored
	next.ManifestParts, err = SplitManifest("fp", man)
	if err != nil {
		t.Fatal(err)
	}
	ev := step(next)
	p, ok := ev.(ManifestPart)
	if !ok || p.Index != 2 {
		t.Fatalf("after the restart: %v, want the last part", ev)
	}
	next.State = mustApply(t, next.State, rec(20, p))
	if !bytes.Equal(next.State.Manifest(), man) {
		t.Fatal("manifest not whole")
	}
	if ev := step(next); ev != nil && (ev.Kind() == KindManifestPart || ev.Kind() == KindManifestPublished) {
		t.Fatalf("published again once whole: %v", ev)
	}
	// A manifest that fits a record still goes as one ManifestPublished.
	small := in
	small.State = joinedState(t)
	small.Manifest = ManifestPublished{Fingerprint: "fp", Manifest: man[:MaxManifestLen]}
	if ev := step(small); ev == nil || ev.Kind() != KindManifestPublished {
		t.Fatalf("a manifest of one record: %v", ev)
	}
}
