package consensus

import (
	"bytes"
	"fmt"
)

// The model's manifest in the replicated state: the chunk table (tensor
// names, offsets and a hash per chunk) of the file the swarm serves,
// published once by a member that holds the file, so that a node that
// joins with the model's identity only can fetch its layers from peers
// and check every chunk. Consensus keeps the manifest as opaque bytes
// (package chunks encodes and checks it); it only ties it to the swarm's
// fingerprint and commits it once.

// KindManifestPublished is the kind of ManifestPublished. It stands apart
// from the kinds of events.go so that other new kinds can take the next
// numbers.
const KindManifestPublished Kind = 12

// MaxManifestLen bounds an encoded manifest: it must fit one record
// (about 30,000 chunks: a 120 GB file at 4 MiB chunks).
const MaxManifestLen = MaxRecordSize - 1024

// ManifestPublished: the manifest of the swarm's model file. The first
// one committed stays; the fingerprint must be the swarm's.
type ManifestPublished struct {
	Fingerprint string
	Manifest    []byte
}

// Kind implements Event.
func (ManifestPublished) Kind() Kind { return KindManifestPublished }

func (e ManifestPublished) appendTo(b []byte) []byte {
	b = appendStr(b, e.Fingerprint)
	return appendBytes(b, e.Manifest)
}

func decodeManifestPublished(d decoder) ManifestPublished {
	e := ManifestPublished{Fingerprint: d.str("fingerprint", MaxFingerprintLen)}
	e.Manifest = d.bytes("manifest", MaxManifestLen)
	if d.Err() == nil && (e.Fingerprint == "" || len(e.Manifest) == 0) {
		d.Fail("manifest without fingerprint or bytes")
	}
	return e
}

// Manifest returns the model's manifest as published (nil: none yet).
// The bytes are the caller's.
func (s State) Manifest() []byte { return bytes.Clone(s.manifest) }

func (s *State) manifestPublished(e ManifestPublished) error {
	switch {
	case e.Fingerprint == "" || len(e.Manifest) == 0 || len(e.Manifest) > MaxManifestLen:
		return fmt.Errorf("%w: manifest of %d bytes for %q", ErrRejected, len(e.Manifest), e.Fingerprint)
	case s.fingerprint == "":
		return fmt.Errorf("%w: manifest before the swarm has a model", ErrRejected)
	case e.Fingerprint != s.fingerprint:
		return fmt.Errorf("%w: manifest of %q, swarm has %q", ErrFingerprint, e.Fingerprint, s.fingerprint)
	case s.manifest != nil && bytes.Equal(s.manifest, e.Manifest):
		return fmt.Errorf("%w: manifest already published", ErrStale)
	case s.manifest != nil:
		return fmt.Errorf("%w: a different manifest is already published", ErrRejected)
	}
	s.manifest = bytes.Clone(e.Manifest)
	return nil
}

// appendManifest ends a snapshot with the manifest, when there is one,
// or an empty byte string in its place when sections follow
// (swarmconfig.go).
func appendManifest(b []byte, s State) []byte {
	if s.manifest == nil {
		if s.hasConfig {
			return appendBytes(b, nil)
		}
		return b
	}
	return appendBytes(b, s.manifest)
}

// decodeManifest reads the snapshot's optional manifest (absent in
// snapshots written before it existed).
func decodeManifest(d decoder, s *State) {
	if d.Err() != nil || d.Len() == 0 {
		return
	}
	m := d.bytes("manifest", MaxManifestLen)
	if d.Err() == nil && len(m) == 0 && d.Len() > 0 {
		return // no manifest, and sections follow
	}
	if d.Err() == nil && (len(m) == 0 || s.fingerprint == "") {
		d.Fail("empty manifest, or one without a fingerprint")
	}
	s.manifest = m
}
