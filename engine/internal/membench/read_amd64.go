package membench

import "golang.org/x/sys/cpu"

// prefetch is how far ahead the AVX2 loop prefetches, the distance the
// engine's F16 decode kernel uses on Intel (engine's hilPrefetch).
const prefetch = 4096

//go:noescape
func readAVX2(p *uint64, n int, pf int) uint64

// readPart sums p: 256 bytes a step with a software prefetch where the CPU
// has AVX2, the portable loop otherwise and for the tail.
func readPart(p []uint64) uint64 {
	if !cpu.X86.HasAVX2 || len(p) < 32 {
		return readPortable(p)
	}
	n := len(p) &^ 31
	return readAVX2(&p[0], n/32, prefetch) ^ readPortable(p[n:])
}
