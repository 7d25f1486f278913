package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// q8Path is a Q8_0 kernel path: set selects it and returns what undoes it.
type q8Path struct {
	name string
	set  func() func()
}

// q8Paths are the Q8_0 kernels this machine can run: the portable one and
// q8SIMDPaths (per architecture).
func q8Paths() []q8Path {
	return append([]q8Path{{"portable", func() func() { useSIMD = false; return func() { useSIMD = true } }}}, q8SIMDPaths()...)
}

// q8Act is n input rows of quantised activations as given, packed as
// act.quantized packs them.
func q8Act(xq []int8, xd []float32, n, cols int) *act {
	a := &act{n: n, cols: cols, q: xq, d: xd, xil: make([]byte, len(xd)*q8ActBlock)}
	a.packIL(0, len(xd))
	return a
}

// q8Reference is dotQ8 of every plain row with every input row.
func q8Reference(wq []int8, wd []float32, rows, cols int, a *act) []float32 {
	nb := cols / 32
	out := make([]float32, a.n*rows)
	for t := 0; t < a.n; t++ {
		for r := 0; r < rows; r++ {
			out[t*rows+r] = dotQ8(wq[r*cols:(r+1)*cols], wd[r*nb:(r+1)*nb], a.q[t*cols:(t+1)*cols], a.d[t*nb:(t+1)*nb])
		}
	}
	return out
}

// q8Chunked is matmulQ8 over the interleaved matrix in chunks of chunk
// rows (a multiple of 16), as the pool hands them out.
func q8Chunked(m *matrix, a *act, chunk int) []float32 {
	out := make([]float32, a.n*m.rows)
	for i := range out {
		out[i] = float32(math.NaN()) // every output must be written
	}
	for r := 0; r < m.rows; r += chunk {
		matmulQ8(out, m, a, r, min(r+chunk, m.rows))
	}
	return out
}

func firstDiff(a, b []float32) string {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Sprintf("output %d: %v (%#08x) vs %v (%#08x)", i, a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
		}
	}
	return "lengths differ"
}

// TestQ8KernelsMatchPortable: every Q8_0 kernel path over the interleaved
// layout gives dotQ8's bits on the plain layout, on random matrices of
// rows that are not whole groups, 1 to 20 tokens (every tile size, more
// than one tile), chunked as the pool chunks, and on extremes: weights all
// -128 or 127, activations ±127, zero and non-finite scales.
func TestQ8KernelsMatchPortable(t *testing.T) {
	rng := uint64(31)
	type tc struct {
		rows, cols, n int
		kind          int
	}
	var cases []tc
	for _, cols := range []int{32, 64, 96, 256, 2048, 4096} {
		for _, rows := range []int{1, 13, 16, 17, 40} {
			if cols >= 2048 && rows > 17 {
				continue
			}
			for _, n := range []int{1, 2, 3, 5, 8, 9, 16, 20} {
				if cols >= 2048 && n > 9 {
					continue
				}
				cases = append(cases, tc{rows, cols, n, int(splitmix(&rng) % 6)})
			}
		}
	}
	cases = append(cases, tc{70, 64, 70, 0}, tc{33, 128, 130, 1}) // several 64-token passes
	for _, c := range cases {
		nb := c.cols / 32
		wq, wd := make([]int8, c.rows*c.cols), make([]float32, c.rows*nb)
		xq, xd := make([]int8, c.n*c.cols), make([]float32, c.n*nb)
		for i := range wq {
			wq[i] = int8(splitmix(&rng))
		}
		for i := range xq {
			xq[i] = int8(splitmix(&rng)%255) - 127
		}
		for i := range wd {
			wd[i] = f16ToF32(uint16(splitmix(&rng)) & 0x7bff)
		}
		for i := range xd {
			xd[i] = f16ToF32(uint16(splitmix(&rng)) & 0x7bff)
		}
		switch c.kind {
		case 1: // the largest integer sums
			for i := range wq {
				wq[i] = -128
			}
			for i := range xq {
				xq[i] = 127
				if (i/32)%2 == 1 {
					xq[i] = -127
				}
			}
		case 2:
			for i := range wq {
				wq[i] = 127
			}
			for i := range xq {
				xq[i] = -127
			}
		case 3: // zero scales, and subnormal ones
			for i := range wd {
				switch i % 3 {
				case 0:
					wd[i] = 0
				case 1:
					wd[i] = f16ToF32(1)
				}
			}
			for i := range xd {
				if i%4 == 1 {
					xd[i] = 0
				}
			}
		case 4: // non-finite weight scales
			for i := range wd {
				switch i % 7 {
				case 0:
					wd[i] = float32(math.Inf(1))
				case 3:
					wd[i] = float32(math.Inf(-1))
				case 5:
					wd[i] = f16ToF32(0x7e01) // NaN
				}
			}
		case 5: // non-finite activation scales
			for i := range xd {
				if i%5 == 2 {
					xd[i] = float32(math.Inf(1))
				}
			}
		}
		a := q8Act(xq, xd, c.n, c.cols)
		want := q8Reference(wq, wd, c.rows, c.cols, a)
		m := &matrix{rows: c.rows, cols: c.cols, q8: q8ilFromPlain(wq, wd, c.rows, c.cols)}
		for _, p := range q8Paths() {
			undo := p.set()
			for _, chunk := range []int{16, 32, 1 << 20} {
				if got := q8Chunked(m, a, chunk); !sameBits(got, want) {
					undo()
					t.Fatalf("%s: rows %d cols %d tokens %d kind %d chunk %d: %s (kernel vs dotQ8)", p.name, c.rows, c.cols, c.n, c.kind, chunk, firstDiff(got, want))
				}
			}
			undo()
		}
	}
}

// TestQ8ActPacking: the activations quantised by act match quantizeQ8 and
// their packed tiles hold -128·Σx, the scale and the values where the
// kernels read them.
func TestQ8ActPacking(t *testing.T) {
	const cols = 96
	nb := cols / 32
	for _, n := range []int{1, 7, 8, 9, 17} {
		x := make([]float32, n*cols)
		rng := uint64(n)
		for i := range x {
			x[i] = unitFloat(&rng)
		}
		a := newAct(x, n, cols)
		a.quantized(nil)
		for tok := 0; tok < n; tok++ {
			j, tt := tok/q8TokTile, tok%q8TokTile
			T := min(q8TokTile, n-j*q8TokTile)
			for b := 0; b < nb; b++ {
				p := a.xil[(j*q8TokTile*nb+b*T)*q8ActBlock:]
				x := a.q[(tok*nb+b)*32:]
				sum := int32(0)
				for i := 0; i < 32; i++ {
					sum += int32(x[i])
				}
				if got := int32(binary.LittleEndian.Uint32(p[4*tt:])); got != -128*sum {
					t.Fatalf("n %d token %d block %d: sum %d, want %d", n, tok, b, got, -128*sum)
				}
				if got := math.Float32frombits(binary.LittleEndian.Uint32(p[4*T+4*tt:])); got != a.d[tok*nb+b] {
					t.Fatalf("n %d token %d block %d: scale %v, want %v", n, tok, b, got, a.d[tok*nb+b])
				}
				for i := 0; i < 32; i++ {
					if got := int8(p[8*T+4*((i/4)*T+tt)+i%4]); got != x[i] {
						t.Fatalf("n %d token %d block %d value %d: %d, want %d", n, tok, b, i, got, x[i])
					}
				}
			}
		}
	}
}

// TestQ8RowUnchanged: the interleaved matrix (and its row views) gives each
// row's values as float32(q)·d from the file's blocks, and reports the
// bytes it holds.
func TestQ8RowUnchanged(t *testing.T) {
	const rows, cols = 37, 96
	nb := cols / 32
	raw := make([]byte, rows*nb*34)
	rng := uint64(5)
	for i := range raw {
		raw[i] = byte(splitmix(&rng))
	}
	for blk := 0; blk < rows*nb; blk++ {
		binary.LittleEndian.PutUint16(raw[34*blk:], uint16(splitmix(&rng))&0x7bff)
	}
	want := func(r int) []float32 {
		out := make([]float32, cols)
		for b := 0; b < nb; b++ {
			p := raw[34*(r*nb+b):]
			d := f16ToF32(binary.LittleEndian.Uint16(p))
			for i := 0; i < 32; i++ {
				out[b*32+i] = float32(int8(p[2+i])) * d
			}
		}
		return out
	}
	m := &matrix{rows: rows, cols: cols, q8: q8ilFromGGUF(raw, rows, cols)}
	if got, w := m.bytes(), int64((rows+15)/16*16*nb*34); got != w { // the file's 34 a block, padded to 16 rows
		t.Fatalf("bytes %d, want %d", got, w)
	}
	got := make([]float32, cols)
	for r := 0; r < rows; r++ {
		m.row(r, got)
		if w := want(r); !sameBits(got, w) {
			t.Fatalf("row %d: %s", r, firstDiff(got, w))
		}
	}
	for _, v := range [][2]int{{0, 16}, {16, 37}, {0, 5}, {5, 21}, {32, 37}, {3, 37}} {
		view := m.rowsView(v[0], v[1])
		for r := v[0]; r < v[1]; r++ {
			view.row(r-v[0], got)
			if w := want(r); !sameBits(got, w) {
				t.Fatalf("view %v row %d: %s", v, r, firstDiff(got, w))
			}
		}
		// The view's products are the rows' own.
		n := 3
		xq, xd := make([]int8, n*cols), make([]float32, n*nb)
		for i := range xq {
			xq[i] = int8(splitmix(&rng)%255) - 127
		}
		for i := range xd {
			xd[i] = f16ToF32(uint16(splitmix(&rng)) & 0x7bff)
		}
		a := q8Act(xq, xd, n, cols)
		all := q8Chunked(m, a, 1<<20)
		part := q8Chunked(view, a, 1<<20)
		for tok := 0; tok < n; tok++ {
			if w := all[tok*rows+v[0] : tok*rows+v[1]]; !sameBits(part[tok*(v[1]-v[0]):(tok+1)*(v[1]-v[0])], w) {
				t.Fatalf("view %v token %d: products differ from the whole matrix's", v, tok)
			}
		}
	}
}

// TestQ8BatchThreadInvariance: a session's logits have the same bits
// alone at 1 thread, at 2 and 3 threads, and in a ForwardBatch of 16
// sessions whose prompts put its positions at other places in the
// kernels' token tiles (a prefill crossing the 8-token tiles and the 64
// token passes, then decode steps: alone a 1-token tile, in the batch an
// 8-token one), on a Q8_0 model whose K, V and head are not whole 16-row
// groups.
func TestQ8BatchThreadInvariance(t *testing.T) {
	c := GenConfig{Arch: "llama", Layers: 2, Dim: 96, Heads: 4, KVHeads: 1, FFN: 224, Vocab: 500, Seed: 21, DType: Q8_0}
	path := genModel(t, c)
	prompt := make([]int32, 70)
	for i := range prompt {
		prompt[i] = int32(i*37%400 + 3)
	}
	const decode = 3
	// run returns the session's logits after the prompt and each decode
	// step, with others sessions batched before it (their prompts 1 to
	// 15 tokens long).
	run := func(threads, others int) [][]float32 {
		s, err := Open(path, WithThreads(threads))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		var steps []Step
		for i := 0; i < others; i++ {
			ss, _ := s.NewSession(128)
			toks := make([]int32, 1+i%15)
			for j := range toks {
				toks[j] = int32((i*11+j*5)%490 + 2)
			}
			steps = append(steps, Step{Session: ss, Tokens: toks})
		}
		mine, _ := s.NewSession(128)
		steps = append(steps, Step{Session: mine, Tokens: prompt})
		var logits [][]float32
		for k := 0; k <= decode; k++ {
			outs, err := s.ForwardBatch(ctx, steps)
			if err != nil {
				t.Fatal(err)
			}
			last := outs[len(outs)-1].Logits
			logits = append(logits, last)
			for i := range steps {
				steps[i].Pos += len(steps[i].Tokens)
				steps[i].Tokens = []int32{Sample(outs[i].Logits, SamplingParams{}, 0, nil)}
			}
		}
		return logits
	}
	want := run(1, 0)
	for _, v := range []struct{ threads, others int }{{2, 0}, {3, 0}, {1, 15}, {2, 15}, {3, 7}} {
		got := run(v.threads, v.others)
		for k := range want {
			if !sameBits(got[k], want[k]) {
				t.Fatalf("%d threads, %d other sessions, step %d: %s", v.threads, v.others, k, firstDiff(got[k], want[k]))
			}
		}
	}
}

// TestQuantizeQ8SIMD: the SIMD activation quantiser gives the portable
// one's values and scales, on random blocks of many magnitudes, blocks
// whose products land on halves, zeros, subnormals, scales that overflow
// a half, and infinities and NaNs.
func TestQuantizeQ8SIMD(t *testing.T) {
	rng := uint64(77)
	const nb = 64
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(1), 1e-39, 3e38, -3e38, 65504 * 127, 65520 * 127, 127, -127, 63.5, -63.5, 0.5, -0.5, 2.5, -2.5}
	for trial := 0; trial < 200; trial++ {
		x := make([]float32, nb*32)
		for b := 0; b < nb; b++ {
			blk := x[b*32 : b*32+32]
			scale := float32(math.Ldexp(1, int(splitmix(&rng)%80)-60))
			for i := range blk {
				blk[i] = unitFloat(&rng) * scale
			}
			switch (trial + b) % 5 {
			case 1: // amax 127: s = 1, so x·id is x, halves included
				for i := range blk {
					blk[i] = float32(int(splitmix(&rng)%255)-127) + float32(splitmix(&rng)%2)/2
				}
				blk[0] = 127
			case 2:
				for i := 0; i < 3; i++ {
					blk[splitmix(&rng)%32] = specials[splitmix(&rng)%uint64(len(specials))]
				}
			case 3:
				for i := range blk {
					blk[i] = 0
				}
			}
		}
		q1, d1 := make([]int8, len(x)), make([]float32, nb)
		q2, d2 := make([]int8, len(x)), make([]float32, nb)
		useSIMD = false
		quantizeQ8(x, q1, d1)
		useSIMD = true
		quantizeQ8(x, q2, d2)
		for b := 0; b < nb; b++ {
			if math.Float32bits(d1[b]) != math.Float32bits(d2[b]) {
				t.Fatalf("trial %d block %d %v: scale %v, SIMD %v", trial, b, x[b*32:b*32+32], d1[b], d2[b])
			}
			for i := b * 32; i < b*32+32; i++ {
				if q1[i] != q2[i] {
					t.Fatalf("trial %d block %d value %d (%v, scale %v): %d, SIMD %d", trial, b, i%32, x[i], d1[b], q1[i], q2[i])
				}
			}
		}
	}
}
