// Package membench measures memory read bandwidth for the engine's decode
// benchmarks (engine's and refcheck's), so that bytes read per token can be
// set against what a plain read of the same size achieves in the same run.
// It is test support: nothing in the engine's serving path imports it.
package membench

import "sync"

// Sink keeps Read's sums live (exported so that no tool calls it unused).
var Sink uint64

// Read reads buf once, split in threads parts read at once, with eight
// independent sums so that the loads, not the adds, bound it, and returns
// the bytes read.
func Read(buf []uint64, threads int) int {
	sums := make([]uint64, threads)
	var wg sync.WaitGroup
	part := len(buf) / threads &^ 7
	for t := range threads {
		p := buf[t*part : (t+1)*part]
		wg.Go(func() {
			var s0, s1, s2, s3, s4, s5, s6, s7 uint64
			for i := 0; i+8 <= len(p); i += 8 {
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
			sums[t] = s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7
		})
	}
	wg.Wait()
	for _, s := range sums {
		Sink ^= s
	}
	return 8 * part * threads
}
