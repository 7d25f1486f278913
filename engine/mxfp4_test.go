package engine

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

// TestMXFP4Scale: the E8M0 half-scale is 2^(e−128) for every byte, the
// two smallest as subnormals (OCP MX v1.0: E8M0 is 2^(e−127); ggml halves
// it because its E2M1 grid is doubled).
func TestMXFP4Scale(t *testing.T) {
	for e := 0; e < 256; e++ {
		want := float32(math.Ldexp(1, e-128))
		if got := e8m0Half(byte(e)); got != want || e8m0HalfTable[e] != want {
			t.Fatalf("e8m0Half(%d) = %g (table %g), want %g", e, got, e8m0HalfTable[e], want)
		}
	}
}

// TestMXFP4Block: a block whose values are E2M1 values times a power of
// two (OCP MX v1.0's FP4: ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}) round-trips
// exactly, its exponent is the one that puts max|x| in [4, 8) grid steps,
// and the nibbles are in ggml's order (value j low, j+16 high).
func TestMXFP4Block(t *testing.T) {
	e2m1 := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	x := make([]float32, 32)
	for i := range x {
		v := e2m1[i%8] * 0.25 // scale 2^-2: E8M0 byte 125
		if i >= 16 {
			v = -v
		}
		x[i] = v
	}
	b := quantizeBlock(nil, x, MXFP4)
	if len(b) != 17 {
		t.Fatalf("block of %d bytes, want 17", len(b))
	}
	// max|x| = 1.5 = 6·2^-2: floor(log2 1.5) − 2 + 127 = 125.
	if b[0] != 125 {
		t.Errorf("exponent byte %d, want 125", b[0])
	}
	// x[1] = 0.125 = E2M1 0.5 (index 1), x[17] = -0.125 (index 9).
	if b[2] != 1|9<<4 {
		t.Errorf("byte 1 of the quants %#x, want %#x", b[2], 1|9<<4)
	}
	got, err := Dequantize(MXFP4, b, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if got[i] != x[i] {
			t.Fatalf("value %d: %g, want %g", i, got[i], x[i])
		}
	}
	// An all-zero block has exponent byte 0 and unpacks to zeros.
	z := quantizeBlock(nil, make([]float32, 32), MXFP4)
	if z[0] != 0 {
		t.Errorf("zero block: exponent byte %d", z[0])
	}
	if _, err := Dequantize(MXFP4, b[:16], 32); err == nil {
		t.Error("16 bytes read as a 17-byte block")
	}
}

// TestGenMXFP4MoE: the mxfp4_moe mix writes the FFN weights (a MoE
// file's experts) in MXFP4 and the rest in Q8_0 (llama.cpp's MXFP4_MOE
// file type, 38), and the file runs: a prompt's last logits are finite and
// the same bits whether the prompt goes in at once or a token a step (the
// decode path: packedRowsKernel).
func TestGenMXFP4MoE(t *testing.T) {
	for name, c := range map[string]GenConfig{
		"llama":    {Arch: "llama", Layers: 2, Dim: 64, Heads: 2, FFN: 96, Vocab: 300, Mix: "mxfp4_moe"},
		"qwen3moe": {Arch: "qwen3moe", Layers: 2, Dim: 64, Heads: 2, FFN: 96, Vocab: 300, Mix: "mxfp4_moe", Experts: 4, ExpertsUsed: 2, ExpertFFN: 96},
	} {
		t.Run(name, func(t *testing.T) {
			b := ropeScalingFile(t, c)
			f, err := ReadFile(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			if ft, _ := f.Uint("general.file_type"); ft != 38 {
				t.Errorf("file_type %d, want 38", ft)
			}
			for _, ti := range f.Tensors {
				want := F32
				switch {
				case strings.Contains(ti.Name, "ffn_gate_inp"):
				case strings.Contains(ti.Name, ".ffn_") && len(ti.Dims) >= 2:
					want = MXFP4
				case len(ti.Dims) >= 2:
					want = Q8_0
				}
				if ti.Type != want {
					t.Errorf("%s: %s, want %s", ti.Name, ti.Type, want)
				}
			}
			s, err := openBytes(t, b)
			if err != nil {
				t.Fatal(err)
			}
			prompt := []int32{1, 2, 3, 40, 7}
			whole, err := s.NewSession(8)
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Close()
			want, err := s.Forward(context.Background(), Step{Session: whole, Tokens: prompt})
			if err != nil {
				t.Fatal(err)
			}
			steps, err := s.NewSession(8)
			if err != nil {
				t.Fatal(err)
			}
			defer steps.Close()
			var got Output
			for i, tok := range prompt {
				if got, err = s.Forward(context.Background(), Step{Session: steps, Tokens: []int32{tok}, Pos: i}); err != nil {
					t.Fatal(err)
				}
			}
			for i, v := range want.Logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("logit %d is %v", i, v)
				}
			}
			if !sameBits(got.Logits, want.Logits) {
				t.Errorf("token by token %v…, whole prompt %v…", got.Logits[:4], want.Logits[:4])
			}
		})
	}
}

// TestMXFP4KernelsSmallScales: the SIMD kernels give the portable bits on
// rows whose every exponent byte is 0, 1 or 2 (the subnormal scales
// 2^-128 and 2^-127, and the smallest normal one), where no larger block
// hides an error in them, for 1 to 5 blocks and 1 or 3 activation rows.
func TestMXFP4KernelsSmallScales(t *testing.T) {
	forEachPackedPath(t, func(t *testing.T) {
		rng := uint64(17)
		f := quantFormats[MXFP4]
		for nb := 1; nb <= 5; nb++ {
			cols, rows := 32*nb, 9
			raw := make([]byte, rows*nb*17)
			for i := range raw {
				raw[i] = byte(splitmix(&rng))
			}
			for b := 0; b < rows*nb; b++ {
				raw[17*b] = byte(b % 3)
			}
			for _, n := range []int{1, 3} {
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(int64(splitmix(&rng)>>40)-1<<23) / (1 << 10)
				}
				w := &matrix{rows: rows, cols: cols, raw: raw, qf: f, typ: MXFP4}
				fast, slow := simdAndPortable(w, x, n)
				if !sameBits(fast, slow) {
					t.Fatalf("%d blocks, %d activation rows: SIMD %v, portable %v", nb, n, fast, slow)
				}
				nonzero := false
				for _, v := range slow {
					nonzero = nonzero || v != 0
				}
				if !nonzero {
					t.Fatalf("%d blocks: all zero", nb)
				}
			}
		}
	})
}
