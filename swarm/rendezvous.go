package swarm

import (
	"crypto/sha256"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// The domains of the public rendezvous keys: a version in each, so that a
// later derivation never collides with this one.
const (
	publicRendezvousDomain = "strata/public-swarm/1"
	swarmIndexDomain       = "strata/public-swarm-index/1"
)

// PublicRendezvous is the key under which the members of the public swarm
// called name, serving the model with the given fingerprint, provide
// themselves on the public (Amino) DHT, and which a joiner looks up. It
// is a raw CIDv1 of the SHA-256 of the domain, the name and the
// fingerprint, each length-prefixed so that no two (name, fingerprint)
// pairs hash the same bytes. The key is public: anyone who knows the name
// and the model can find (and provide under) it; it grants nothing.
func PublicRendezvous(name, fingerprint string) cid.Cid {
	return keyCID(publicRendezvousDomain, name, fingerprint)
}

// SwarmIndexKey is the key every member of every public swarm also
// provides, so that a monitor can list the public swarms' members without
// knowing their names.
func SwarmIndexKey() cid.Cid { return keyCID(swarmIndexDomain) }

func keyCID(parts ...string) cid.Cid {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		l := uint64(len(p))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(p))
	}
	sum, err := mh.Encode(h.Sum(nil), mh.SHA2_256)
	if err != nil { // only for an unknown code or a wrong length: never here
		panic(err)
	}
	return cid.NewCidV1(cid.Raw, sum)
}
