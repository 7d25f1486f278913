package routing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ErrBadSummary reports an encoded prefix summary that cannot be decoded.
var ErrBadSummary = errors.New("routing: bad prefix summary")

// Bounds on a prefix summary's size: small enough to ride in every
// heartbeat, large enough that a node's few hundred cached blocks do not
// saturate it.
const (
	MinSummaryBits     = 64
	MaxSummaryBits     = 1 << 16
	DefaultSummaryBits = 2048
	summaryProbes      = 3
)

// PrefixBlock is the block, in tokens, that prefix caches keep and
// Request.Prefix hashes by: every node must use the same.
const PrefixBlock = 16

// BlockHashes is the hash chain of a token sequence in blocks of
// blockSize: hash i covers tokens [0, (i+1)·blockSize), so two sequences
// share hash i exactly when they share that whole prefix (barring
// collisions). Only full blocks count: a partial last block is not
// cacheable. It returns nil when blockSize < 1.
//
// The hash is fixed (FNV-1a over the previous hash and the block's tokens,
// then a 64-bit finaliser), so that every node computes the same chain.
func BlockHashes(tokens []int32, blockSize int) []uint64 {
	if blockSize < 1 || len(tokens) < blockSize {
		return nil
	}
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	out := make([]uint64, 0, len(tokens)/blockSize)
	prev := uint64(0)
	for at := 0; at+blockSize <= len(tokens); at += blockSize {
		h := uint64(offset)
		for i := range 8 {
			h = (h ^ (prev >> (8 * i) & 0xff)) * prime
		}
		for _, t := range tokens[at : at+blockSize] {
			u := uint32(t)
			for i := range 4 {
				h = (h ^ uint64(u>>(8*i)&0xff)) * prime
			}
		}
		prev = mix64(h)
		out = append(out, prev)
	}
	return out
}

// mix64 is the splitmix64 finaliser: FNV's low bits are weak, and the
// bloom filter indexes by them.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// PrefixSummary is a small bloom filter of the block hashes a node holds in
// its prefix cache, as its heartbeat carries it. It answers "maybe held"
// or "not held"; a false "maybe" only costs a prefill the router hoped to
// skip. A summary in a NodeState is treated as immutable: a node builds a
// new one per heartbeat rather than changing one a view may share.
type PrefixSummary struct {
	words []uint64 // len a power of two
}

// NewPrefixSummary returns an empty summary of the given size in bits,
// rounded up to a power of two within [MinSummaryBits, MaxSummaryBits].
func NewPrefixSummary(nbits int) *PrefixSummary {
	nbits = min(max(nbits, MinSummaryBits), MaxSummaryBits)
	n := 1 << bits.Len(uint(nbits-1))
	return &PrefixSummary{words: make([]uint64, n/64)}
}

// Bits is the filter's size in bits.
func (s *PrefixSummary) Bits() int {
	if s == nil {
		return 0
	}
	return 64 * len(s.words)
}

// probe is the i-th bit of h by double hashing; the step is odd so that it
// visits distinct bits of a power-of-two table.
func (s *PrefixSummary) probe(h uint64, i int) (int, uint64) {
	step := mix64(h^0x9e3779b97f4a7c15) | 1
	b := (h + uint64(i)*step) & uint64(64*len(s.words)-1)
	return int(b / 64), 1 << (b % 64)
}

// Add records a block hash.
func (s *PrefixSummary) Add(hashes ...uint64) {
	for _, h := range hashes {
		for i := range summaryProbes {
			w, m := s.probe(h, i)
			s.words[w] |= m
		}
	}
}

// Has reports whether h may be held: false is certain, true may be a false
// positive. A nil summary holds nothing.
func (s *PrefixSummary) Has(h uint64) bool {
	if s == nil || len(s.words) == 0 {
		return false
	}
	for i := range summaryProbes {
		w, m := s.probe(h, i)
		if s.words[w]&m == 0 {
			return false
		}
	}
	return true
}

// Match is how many of the leading hashes the summary may hold: the
// longest cached prefix, in blocks. It stops at the first miss, since a
// chained hash past a missing block cannot be a real hit.
func (s *PrefixSummary) Match(hashes []uint64) int {
	for i, h := range hashes {
		if !s.Has(h) {
			return i
		}
	}
	return len(hashes)
}

// Clone returns an independent copy.
func (s *PrefixSummary) Clone() *PrefixSummary {
	if s == nil {
		return nil
	}
	return &PrefixSummary{words: append([]uint64(nil), s.words...)}
}

// MarshalBinary encodes the summary for a heartbeat: its size in words as
// a uvarint, then the words, little endian.
func (s *PrefixSummary) MarshalBinary() ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: nil summary", ErrBadSummary)
	}
	out := binary.AppendUvarint(make([]byte, 0, 3+8*len(s.words)), uint64(len(s.words)))
	for _, w := range s.words {
		out = binary.LittleEndian.AppendUint64(out, w)
	}
	return out, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. The size must be a
// power of two within the bounds and the data exactly that long; on error
// the summary is left unchanged.
// The size must be minimally encoded.
func (s *PrefixSummary) UnmarshalBinary(b []byte) error {
	n, k := binary.Uvarint(b)
	switch {
	case k <= 0:
		return fmt.Errorf("%w: no size", ErrBadSummary)
	case k != len(binary.AppendUvarint(nil, n)):
		// One encoding per summary, so that equal summaries compare equal
		// as bytes.
		return fmt.Errorf("%w: size not minimally encoded", ErrBadSummary)
	case n < MinSummaryBits/64 || n > MaxSummaryBits/64 || n&(n-1) != 0:
		return fmt.Errorf("%w: %d words (want a power of two in [%d, %d])", ErrBadSummary, n, MinSummaryBits/64, MaxSummaryBits/64)
	case uint64(len(b)-k) != 8*n:
		return fmt.Errorf("%w: %d bytes of words, want %d", ErrBadSummary, len(b)-k, 8*n)
	}
	words := make([]uint64, n)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(b[k+8*i:])
	}
	s.words = words
	return nil
}
