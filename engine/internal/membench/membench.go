// Package membench measures memory read bandwidth for the engine's decode
// benchmarks (engine's and refcheck's), so that bytes read per token can be
// set against what a read of the same size achieves in the same run.
// It is test support: nothing in the engine's serving path imports it.
package membench

import (
	"sync"
	"unsafe"

	"github.com/stratanet/strata/engine/internal/hugepage"
)

// Buffer allocates words 8-byte words for Read on the kind of pages the
// engine's weights lie on (hugepage.Alloc), each word set to its index so
// that every page is written. On the Intel VM a 1 GiB read of huge pages
// was faster than of ordinary ones in each of 11 alternating pairs, by 2 to
// 74% (median 8%), quiet; a read of ordinary pages set against weights on
// huge ones made decode's fraction of bandwidth look that much higher.
func Buffer(words int) []uint64 {
	if words == 0 {
		return nil
	}
	b := hugepage.Alloc(8 * words)
	buf := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), words)
	for i := range buf {
		buf[i] = uint64(i)
	}
	return buf
}

// Sink keeps Read's sums live (exported so that no tool calls it unused).
var Sink uint64

// Read reads buf once, split in threads parts read at once, and returns
// the bytes read. Where the CPU has AVX2 it reads 32 bytes a load and
// prefetches each line 4 KB ahead (PREFETCHT0) and 12 KB ahead
// (PREFETCHT2), as the engine's decode kernels do on Intel. A far
// prefetch (12 or 16 KB) changed a 160 MB read by −4 to +9% (8
// alternating rounds, averages, the Emerald Rapids VM, 2026-12-01) where
// it made the K-quant kernels 7–18% faster; the read has it so as not to
// fall short of them.
// A loop of 8-byte loads read about half as fast as the decode kernels
// streamed an 8B file's weights on the Intel VM (their "fraction of
// bandwidth" came out near 2): 1 GiB at 1 thread, best of 5, 8.70 GB/s
// with 8-byte loads, 13.12 with 32-byte loads, 14.59 with the prefetch
// too (unmeasured on AMD, where the prefetch may cost a little). The
// figure is meant as what a read can get.
func Read(buf []uint64, threads int) int {
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	part := len(buf) / threads &^ 7
	for t := range threads {
		p := buf[t*part : (t+1)*part]
		wg.Go(func() { sums[t] = readPart(p) })
	}
	wg.Wait()
	for _, s := range sums {
		Sink ^= s
	}
	return 8 * part * threads
}

// readPortable sums p with eight independent sums, so that the loads, not
// the adds, bound it.
func readPortable(p []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	i := 0
	for ; i+8 <= len(p); i += 8 {
		q := p[i : i+8 : i+8]
		s0 += q[0]
		s1 += q[1]
		s2 += q[2]
		s3 += q[3]
		s4 += q[4]
		s5 += q[5]
		s6 += q[6]
		s7 += q[7]
	}
	for ; i < len(p); i++ {
		s0 += p[i]
	}
	return s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7
}
