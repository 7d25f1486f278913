package engine

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestKILMatchesRowKernels: the interleaved kernels give the portable row
// kernels' bits for Q4_K, Q5_K and Q6_K, on random blocks (finite halves,
// subnormals included) and on extreme ones, for row counts that leave a
// partial group, 1 to 35 activation rows (the 4-token and 1-token kernels
// and their mix, the one-token kernels with and without prefetch; 16 and
// more, the AMX kernels where the CPU has them),
// and the row slices the pool cuts (multiples of 16).
func TestKILMatchesRowKernels(t *testing.T) {
	rng := uint64(21)
	for _, typ := range []DType{Q4_K, Q5_K, Q6_K} {
		if !useKIL(typ) {
			t.Logf("%s: no AVX-512 VNNI (or GFNI): matrices keep the plain layout", typ)
			continue
		}
		f := quantFormats[typ]
		for _, tc := range []struct{ rows, nb int }{{16, 1}, {7, 2}, {37, 3}, {48, 8}, {33, 11}, {64, 2}} {
			raw := make([]byte, tc.rows*tc.nb*f.bytes)
			for i := range raw {
				raw[i] = byte(splitmix(&rng))
			}
			for b := 0; b < tc.rows*tc.nb; b++ {
				for _, o := range halfOffsets[typ] {
					binary.LittleEndian.PutUint16(raw[b*f.bytes+o:], uint16(splitmix(&rng))&0xbbff)
				}
			}
			if tc.rows > 16 {
				// Extremes: every bit set (largest quants, scales and
				// mins), every bit clear, Q6_K's most negative scale.
				for i := range raw[:tc.nb*f.bytes] {
					raw[i] = 0xff
					raw[tc.nb*f.bytes+i] = 0
					raw[2*tc.nb*f.bytes+i] = byte(0x80 >> (i % 2 * 7))
				}
			}
			cols := tc.nb * 256
			for _, n := range []int{1, 2, 4, 5, 9, 16, 35, 48, 150} {
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 21)
				}
				if n == 9 {
					for i := range x[:cols] {
						x[i] = float32(127 - 254*(i%2)) // ±127 after quantisation
					}
				}
				w := &matrix{rows: tc.rows, cols: cols, raw: raw, qf: f, typ: typ}
				want := make([]float32, n*tc.rows)
				useSIMD = false
				a := newAct(x, n, cols)
				a.prepare(w)
				matmulPacked(want, w, a, 0, tc.rows)
				useSIMD = true
				wi := *w
				wi.interleave()
				if wi.il == nil || wi.raw != nil {
					t.Fatalf("%s: not interleaved", typ)
				}
				a = newAct(x, n, cols)
				a.prepare(&wi)
				// One token: the kernels with and without prefetch.
				for _, pf := range []bool{kilPrefetch, !kilPrefetch} {
					saved := kilPrefetch
					kilPrefetch = pf
					got := make([]float32, n*tc.rows)
					// The pool's cuts (multiples of 16) and others.
					for _, cut := range [][2]int{{0, 5}, {5, 16}, {16, 21}, {21, 1 << 30}} {
						if lo, hi := cut[0], min(cut[1], tc.rows); lo < hi {
							matmulPacked(got, &wi, a, lo, hi)
						}
					}
					kilPrefetch = saved
					if !sameBits(got, want) {
						t.Fatalf("%s, %d rows, %d blocks, %d tokens, prefetch %v:\ninterleaved %v\nportable    %v", typ, tc.rows, tc.nb, n, pf, got, want)
					}
				}
			}
		}
	}
}

// TestKILGenerated: kil_amd64.s, q8il_amd64.s and gemm_amd64.s are what
// engine/internal/kilgen writes (run go generate ./engine after changing
// it).
func TestKILGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the generator")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	dir := t.TempDir()
	k, q, g := filepath.Join(dir, "kil.s"), filepath.Join(dir, "q8.s"), filepath.Join(dir, "gemm.s")
	if b, err := exec.Command(gobin, "run", "./internal/kilgen", "-out", k, "-q8", q, "-gemm", g).CombinedOutput(); err != nil {
		t.Fatalf("kilgen: %v\n%s", err, b)
	}
	for gen, file := range map[string]string{k: "kil_amd64.s", q: "q8il_amd64.s", g: "gemm_amd64.s"} {
		want, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s differs from kilgen's output: run go generate ./engine", file)
		}
	}
}
