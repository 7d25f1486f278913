package consensus

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The model's manifest in the replicated state: the chunk table (tensor
// names, offsets and a hash per chunk) of the file the swarm serves,
// published once by a member that holds the file, so that a node that
// joins with the model's identity only can fetch its layers from peers
// and check every chunk. Consensus keeps the manifest as opaque bytes
// (package chunks encodes and checks it); it only ties it to the swarm's
// fingerprint and commits it once.
//
// A manifest that fits one record is published as one ManifestPublished
// (kind 12). A larger one (big files, small chunks) is published as
// ManifestParts (kind 14), appended in order by the leader that holds it;
// the state gathers them and shows the manifest only once every part is
// there and the whole matches the parts' digest. Parts received so far
// are part of the state (and of its snapshots), so a new leader that
// holds the same manifest goes on where the last one stopped.

// KindManifestPublished is the kind of ManifestPublished. It stands apart
// from the kinds of events.go so that other new kinds can take the next
// numbers.
const KindManifestPublished Kind = 12

// KindManifestPart is the kind of ManifestPart.
const KindManifestPart Kind = 14

// Manifest bounds.
const (
	// MaxManifestLen bounds a manifest published in one record, and one
	// part of a larger one: it fits a record with room for the rest of
	// the event (about 32,000 chunks: a 128 GiB file at 4 MiB chunks).
	MaxManifestLen = MaxRecordSize - 1024
	// MaxManifestSize bounds a whole manifest, published in parts: half a
	// snapshot, which carries it (about a million chunks: a 4 TiB file
	// at 4 MiB chunks, a 64 GiB one at the smallest, 64 KiB).
	MaxManifestSize = MaxSnapshotSize / 2
	// MaxManifestParts bounds the parts of one manifest.
	MaxManifestParts = 1024
)

// ManifestPublished: the manifest of the swarm's model file. The first
// one committed stays; the fingerprint must be the swarm's.
type ManifestPublished struct {
	Fingerprint string
	Manifest    []byte
}

// ManifestPart: part Index of Total of a manifest too large for one
// record. The manifest is the parts' Bytes in index order; Digest is its
// SHA-256. Every part of one publication names the same Fingerprint (the
// swarm's), Digest and Total.
type ManifestPart struct {
	Fingerprint string
	Digest      [sha256.Size]byte
	Index       int
	Total       int
	Bytes       []byte
}

// Kind implements Event.
func (ManifestPublished) Kind() Kind { return KindManifestPublished }

// Kind implements Event.
func (ManifestPart) Kind() Kind { return KindManifestPart }

func (e ManifestPublished) appendTo(b []byte) []byte {
	b = appendStr(b, e.Fingerprint)
	return appendBytes(b, e.Manifest)
}

func (e ManifestPart) appendTo(b []byte) []byte {
	b = appendStr(b, e.Fingerprint)
	b = append(b, e.Digest[:]...)
	b = binary.AppendUvarint(b, uint64(max(e.Index, 0)))
	b = binary.AppendUvarint(b, uint64(max(e.Total, 0)))
	return appendBytes(b, e.Bytes)
}

func decodeManifestPublished(d decoder) ManifestPublished {
	e := ManifestPublished{Fingerprint: d.str("fingerprint", MaxFingerprintLen)}
	e.Manifest = d.bytes("manifest", MaxManifestLen)
	if d.Err() == nil && (e.Fingerprint == "" || len(e.Manifest) == 0) {
		d.Fail("manifest without fingerprint or bytes")
	}
	return e
}

func decodeManifestPart(d decoder) ManifestPart {
	e := ManifestPart{Fingerprint: d.str("fingerprint", MaxFingerprintLen)}
	if p := d.Take(sha256.Size, "manifest digest"); p != nil {
		e.Digest = [sha256.Size]byte(p)
	}
	e.Index = int(d.Uvarint("part index", MaxManifestParts-1))
	e.Total = int(d.Uvarint("part total", MaxManifestParts))
	e.Bytes = d.bytes("manifest part", MaxManifestLen)
	if d.Err() == nil {
		if err := e.check(); err != nil {
			d.Fail("%v", err)
		}
	}
	return e
}

// check reports what makes a part malformed on its own.
func (e ManifestPart) check() error {
	switch {
	case e.Fingerprint == "" || len(e.Fingerprint) > MaxFingerprintLen:
		return errors.New("manifest part without a fingerprint")
	case e.Total < 1 || e.Total > MaxManifestParts || e.Index < 0 || e.Index >= e.Total:
		return fmt.Errorf("manifest part %d of %d out of range", e.Index, e.Total)
	case len(e.Bytes) == 0 || len(e.Bytes) > MaxManifestLen:
		return fmt.Errorf("manifest part %d of %d holds %d bytes (want 1..%d)", e.Index, e.Total, len(e.Bytes), MaxManifestLen)
	}
	return nil
}

// SplitManifest cuts a manifest into the parts that publish it: as few as
// fit a record each, of nearly equal size. It refuses an empty manifest
// or one larger than MaxManifestSize.
func SplitManifest(fingerprint string, manifest []byte) ([]ManifestPart, error) {
	if fingerprint == "" || len(fingerprint) > MaxFingerprintLen || len(manifest) == 0 || len(manifest) > MaxManifestSize {
		return nil, fmt.Errorf("%w: manifest of %d bytes for %q (want 1..%d bytes and a fingerprint)", ErrRejected, len(manifest), fingerprint, MaxManifestSize)
	}
	total := (len(manifest) + MaxManifestLen - 1) / MaxManifestLen
	digest := sha256.Sum256(manifest)
	parts := make([]ManifestPart, total)
	for i := range parts {
		lo, hi := i*len(manifest)/total, (i+1)*len(manifest)/total
		parts[i] = ManifestPart{Fingerprint: fingerprint, Digest: digest, Index: i, Total: total, Bytes: manifest[lo:hi:hi]}
	}
	return parts, nil
}

// manifestParts are the parts of a manifest received so far. Never
// mutated once built: the state is a value (see State).
type manifestParts struct {
	digest [sha256.Size]byte
	total  int
	got    map[int][]byte
	size   int // bytes in got
}

// Manifest returns the model's manifest as published (nil: none yet, or
// not all of its parts yet). The bytes are the caller's.
func (s State) Manifest() []byte { return bytes.Clone(s.manifest) }

// ManifestProgress reports a publication in parts under way: the parts
// received and the total (0, 0: none under way).
func (s State) ManifestProgress() (got, total int) {
	if s.parts == nil {
		return 0, 0
	}
	return len(s.parts.got), s.parts.total
}

// HasManifestPart reports whether part index of the publication of
// digest is in the state (or the manifest of that digest is whole).
func (s State) HasManifestPart(digest [sha256.Size]byte, index int) bool {
	if s.manifest != nil {
		return sha256.Sum256(s.manifest) == digest
	}
	if s.parts == nil || s.parts.digest != digest {
		return false
	}
	_, ok := s.parts.got[index]
	return ok
}

// manifestBase checks what every manifest event needs: the swarm's model.
func (f fold) manifestBase(fp string) error {
	s := f.s
	switch {
	case s.fingerprint == "":
		return fmt.Errorf("%w: manifest before the swarm has a model", ErrRejected)
	case fp != s.fingerprint:
		return fmt.Errorf("%w: manifest of %q, swarm has %q", ErrFingerprint, fp, s.fingerprint)
	}
	return nil
}

func (f fold) manifestPublished(e ManifestPublished) error {
	s := f.s
	if e.Fingerprint == "" || len(e.Manifest) == 0 || len(e.Manifest) > MaxManifestLen {
		return fmt.Errorf("%w: manifest of %d bytes for %q", ErrRejected, len(e.Manifest), e.Fingerprint)
	}
	if err := f.manifestBase(e.Fingerprint); err != nil {
		return err
	}
	switch {
	case s.manifest != nil && bytes.Equal(s.manifest, e.Manifest):
		return fmt.Errorf("%w: manifest already published", ErrStale)
	case s.manifest != nil:
		return fmt.Errorf("%w: a different manifest is already published", ErrRejected)
	case s.parts != nil && s.parts.digest != sha256.Sum256(e.Manifest):
		return fmt.Errorf("%w: a different manifest is being published in parts (%d of %d in)", ErrRejected, len(s.parts.got), s.parts.total)
	}
	// The whole of a publication in parts under way ends it.
	s.manifest = bytes.Clone(e.Manifest)
	s.parts = nil
	return nil
}

func (f fold) manifestPart(e ManifestPart) error {
	s := f.s
	if err := e.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if err := f.manifestBase(e.Fingerprint); err != nil {
		return err
	}
	if s.manifest != nil {
		if sha256.Sum256(s.manifest) == e.Digest {
			return fmt.Errorf("%w: manifest part %d of %d: the manifest is already whole", ErrStale, e.Index, e.Total)
		}
		return fmt.Errorf("%w: manifest part %d of %d: a different manifest is already published", ErrRejected, e.Index, e.Total)
	}
	p := s.parts
	if p == nil {
		p = &manifestParts{digest: e.Digest, total: e.Total}
	}
	switch have, ok := p.got[e.Index]; {
	case p.digest != e.Digest:
		return fmt.Errorf("%w: manifest part %d of %d has digest %x, the publication under way %x", ErrRejected, e.Index, e.Total, e.Digest[:6], p.digest[:6])
	case p.total != e.Total:
		return fmt.Errorf("%w: manifest part %d of %d, the publication under way has %d parts", ErrRejected, e.Index, e.Total, p.total)
	case ok && bytes.Equal(have, e.Bytes):
		return fmt.Errorf("%w: manifest part %d of %d already in", ErrStale, e.Index, e.Total)
	case ok:
		return fmt.Errorf("%w: manifest part %d of %d conflicts with the one already in", ErrRejected, e.Index, e.Total)
	case p.size+len(e.Bytes) > MaxManifestSize:
		return fmt.Errorf("%w: manifest parts exceed %d bytes", ErrRejected, MaxManifestSize)
	}
	got := maps.Clone(p.got)
	if got == nil {
		got = map[int][]byte{}
	}
	got[e.Index] = bytes.Clone(e.Bytes)
	next := &manifestParts{digest: p.digest, total: p.total, got: got, size: p.size + len(e.Bytes)}
	if len(got) < next.total {
		s.parts = next
		return nil
	}
	whole := make([]byte, 0, next.size)
	for i := range next.total {
		whole = append(whole, got[i]...)
	}
	if sha256.Sum256(whole) != next.digest {
		return fmt.Errorf("%w: the %d manifest parts do not hash to their digest %x", ErrRejected, next.total, next.digest[:6])
	}
	s.manifest, s.parts = whole, nil
	return nil
}

// The snapshot's manifest section is absent (no manifest, nothing under
// way; an empty byte string when trailing sections follow), the manifest as a byte string (as before parts existed), or, while
// a publication in parts is under way, partsTag in place of a length,
// then the digest, the total, the count of parts in, and each part in
// index order as its index and a byte string. partsTag is a length no
// byte string of a snapshot can have, so the three read apart, and the
// section ends where its last field does (another may follow).
const partsTag = MaxSnapshotSize + 1

// appendManifest ends a snapshot with the manifest section.
func appendManifest(b []byte, s State) []byte {
	switch {
	case s.manifest != nil:
		return appendBytes(b, s.manifest)
	case s.parts != nil:
		p := s.parts
		b = binary.AppendUvarint(b, partsTag)
		b = append(b, p.digest[:]...)
		b = binary.AppendUvarint(b, uint64(p.total))
		b = binary.AppendUvarint(b, uint64(len(p.got)))
		for _, i := range slices.Sorted(maps.Keys(p.got)) {
			b = binary.AppendUvarint(b, uint64(i))
			b = appendBytes(b, p.got[i])
		}
	case hasSections(s):
		// Sections follow: an empty byte string stands for no manifest.
		b = appendBytes(b, nil)
	}
	return b
}

// decodeManifest reads the snapshot's optional manifest section (absent
// in snapshots written before it existed).
func decodeManifest(d decoder, s *State) {
	if d.Err() != nil || d.Len() == 0 {
		return
	}
	n := d.Uvarint("manifest length", partsTag)
	if d.Err() == nil && s.fingerprint == "" {
		d.Fail("manifest without a fingerprint")
	}
	switch {
	case d.Err() != nil:
	case n == partsTag:
		s.parts = decodeParts(d)
	case n == 0 && d.Len() > 0:
		// No manifest, and sections follow (swarmconfig.go).
	case n == 0 || n > MaxManifestSize:
		d.Fail("manifest of %d bytes (want 1..%d)", n, MaxManifestSize)
	default:
		s.manifest = d.Take(int(n), "manifest")
	}
}

func decodeParts(d decoder) *manifestParts {
	p := &manifestParts{}
	if b := d.Take(sha256.Size, "manifest digest"); b != nil {
		p.digest = [sha256.Size]byte(b)
	}
	p.total = int(d.Uvarint("manifest parts total", MaxManifestParts))
	n := d.count("manifest parts", uint64(max(p.total-1, 0)), 2)
	if d.Err() == nil && n == 0 {
		d.Fail("manifest publication without parts")
	}
	p.got = make(map[int][]byte, n)
	prev := -1
	for range n {
		i := int(d.Uvarint("manifest part index", uint64(max(p.total-1, 0))))
		b := d.bytes("manifest part", MaxManifestLen)
		if d.Err() != nil {
			return nil
		}
		if i <= prev || len(b) == 0 || p.size+len(b) > MaxManifestSize {
			d.Fail("manifest part %d (after %d) of %d bytes", i, prev, len(b))
			return nil
		}
		prev = i
		p.got[i] = b
		p.size += len(b)
	}
	return p
}
