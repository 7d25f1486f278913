package swarm

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// TestPublicRendezvousKeys: the keys are raw CIDv1 over SHA-256 of the
// length-prefixed parts (recomputed here with encoding/binary), stable,
// and distinct for distinct names, fingerprints and splits of one string.
func TestPublicRendezvousKeys(t *testing.T) {
	want := func(parts ...string) []byte {
		h := sha256.New()
		for _, p := range parts {
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(p))))
			h.Write([]byte(p))
		}
		return h.Sum(nil)
	}
	k := PublicRendezvous("petals", "abc123")
	if k.Version() != 1 || k.Type() != cid.Raw {
		t.Fatalf("key %v: version %d codec %x", k, k.Version(), k.Type())
	}
	dec, err := mh.Decode(k.Hash())
	if err != nil || dec.Code != mh.SHA2_256 || string(dec.Digest) != string(want(publicRendezvousDomain, "petals", "abc123")) {
		t.Fatalf("digest of %v: %x (%v), want %x", k, dec.Digest, err, want(publicRendezvousDomain, "petals", "abc123"))
	}
	if !k.Equals(PublicRendezvous("petals", "abc123")) {
		t.Fatal("key not stable")
	}
	seen := map[string]string{k.KeyString(): "petals/abc123"}
	for _, c := range [][2]string{{"petals", "abc124"}, {"petalz", "abc123"}, {"petalsa", "bc123"}, {"", "petalsabc123"}} {
		s := PublicRendezvous(c[0], c[1]).KeyString()
		if prev, dup := seen[s]; dup {
			t.Fatalf("%q/%q collides with %s", c[0], c[1], prev)
		}
		seen[s] = c[0] + "/" + c[1]
	}
	idx := SwarmIndexKey()
	if _, dup := seen[idx.KeyString()]; dup || !idx.Equals(SwarmIndexKey()) {
		t.Fatalf("index key %v collides or is unstable", idx)
	}
	if dec, _ := mh.Decode(idx.Hash()); string(dec.Digest) != string(want(swarmIndexDomain)) {
		t.Fatalf("index digest %x", dec.Digest)
	}
}
