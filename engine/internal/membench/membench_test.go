package membench

import "testing"

// TestReadPart: the AVX2 loop reads every word once (its lanes' sums,
// modelled here, XOR to the same value), and Read reports the bytes of
// the whole parts it read.
func TestReadPart(t *testing.T) {
	for _, n := range []int{0, 7, 31, 32, 33, 64, 1000, 4096 + 5} {
		p := make([]uint64, n)
		for i := range p {
			p[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
		}
		want := readPortable(p)
		if n >= 32 {
			m := n &^ 31
			var lanes [16]uint64 // Y8..Y11, four words each
			for b := 0; b < m; b += 32 {
				for k := 0; k < 16; k++ {
					lanes[k] += p[b+k] + p[b+16+k]
				}
			}
			want = readPortable(p[m:])
			for _, l := range lanes {
				want ^= l
			}
		}
		if got := readPart(p); got != want {
			t.Errorf("%d words: %#x, want %#x", n, got, want)
		}
	}
	buf := make([]uint64, 1000)
	if got := Read(buf, 3); got != 8*(1000/3&^7)*3 {
		t.Errorf("Read: %d bytes", got)
	}
}
