package refcheck

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// mxfp4Blocks are blocks of 32 that probe ggml's MXFP4 quantizer where it
// could differ from ours: random weights, max|x| just under, at and just
// over every power of two from 2^-125 to 2^127 (where log2f rounds up),
// values on the midpoints between grid points (ties go to the first grid
// index), signed zeros, all-zero and tiny blocks.
func mxfp4Blocks() []float32 {
	x := randomValues(64*32, 39)
	block := func(amax float32, fill func(j int) float32) {
		b := make([]float32, 32)
		for j := range b {
			b[j] = fill(j)
		}
		b[5] = amax
		x = append(x, b...)
	}
	for e := -125; e <= 127; e++ {
		p := float32(math.Ldexp(1, e))
		for _, amax := range []float32{math.Nextafter32(p, 0), p, math.Nextafter32(p, float32(math.Inf(1))),
			math.Float32frombits(math.Float32bits(p) - 3), p * 0.75, -p * 1.5} {
			block(amax, func(j int) float32 { return amax * float32(j-16) / 16 })
		}
	}
	// amax 6 gives exponent 127 and step 0.5 (doubled grid 0..12 × 0.5):
	// midpoints between grid values, and -0.
	mid := []float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5, float32(math.Copysign(0, -1))}
	block(6, func(j int) float32 { return mid[j%len(mid)] })
	block(0, func(int) float32 { return 0 })
	block(1e-38, func(j int) float32 { return float32(j) * 1e-40 })
	return x
}

// TestMXFP4QuantizeMatchesGGML: our quantizer (model gen's) writes ggml's
// quantize_row_mxfp4_ref bytes, bit for bit.
func TestMXFP4QuantizeMatchesGGML(t *testing.T) {
	x := mxfp4Blocks()
	want := ggmlQuantize(engine.MXFP4, x, 1, len(x))
	got, err := engine.Quantize(engine.MXFP4, x)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	bad := 0
	for b := 0; b < len(x)/32; b++ {
		if !bytes.Equal(got[17*b:17*b+17], want[17*b:17*b+17]) {
			if bad < 3 {
				t.Errorf("block %d (max %g): engine % x, ggml % x", b, x[32*b+5], got[17*b:17*b+17], want[17*b:17*b+17])
			}
			bad++
		}
	}
	t.Errorf("%d of %d blocks differ from ggml's", bad, len(x)/32)
}

// TestMXFP4DotMatchesGGML: the engine's MXFP4 row dot product (its decode
// kernel, activations quantised to Q8_0) agrees with ggml-cpu's
// vec_dot_mxfp4_q8_0 up to float32 summation order: both are the same
// exact per-block integer sums times the same scales, added in a different
// order (ggml: FMAs into 8 lanes, two accumulators), so they may differ by
// a few roundings of the partial sums, 2^-20 of Σ|terms| at most for
// these lengths. The exact float64 dot of the unpacked values bounds both.
func TestMXFP4DotMatchesGGML(t *testing.T) {
	for _, cols := range []int{32, 64, 96, 512, 2048} {
		w := randomValues(cols, uint64(cols))
		x := randomValues(cols, uint64(cols)+7)
		raw := ggmlQuantize(engine.MXFP4, w, 1, cols)
		ours, err := engine.DotRow(engine.MXFP4, raw, x)
		if err != nil {
			t.Fatal(err)
		}
		theirs := ggmlVecDot(engine.MXFP4, raw, x)
		mag := 0.0
		wd := ggmlDequantize(engine.MXFP4, raw, cols)
		for i := range wd {
			mag += math.Abs(float64(wd[i]) * float64(x[i]))
		}
		d := math.Abs(float64(ours) - float64(theirs))
		t.Logf("cols %d: engine %.9g, ggml %.9g, |Δ| %.3g of Σ|w·x| %.3g", cols, ours, theirs, d, mag)
		if d > mag/(1<<20) {
			t.Errorf("cols %d: engine %g, ggml %g: |Δ| %.3g over 2^-20·%.3g", cols, ours, theirs, d, mag)
		}
		if ours == 0 {
			t.Errorf("cols %d: dot is 0", cols)
		}
	}
}

// TestMXFP4FFNLogits: a llama file whose FFN weights ggml quantised to
// MXFP4 (the rest Q8_0, as llama.cpp's MXFP4_MOE writes a model's experts
// and other weights) gives logits as close to ggml's F32 graph on the
// dequantised weights as ggml's own quantized kernels do (the bound of
// TestQuantizedLogits).
func TestMXFP4FFNLogits(t *testing.T) {
	tokens := []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}
	for name, c := range map[string]engine.GenConfig{
		"llama-gqa-256": {Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 31, RopeBase: 10000, NormEps: 1e-5},
		"qwen3-256":     {Arch: "qwen3", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 128, FFN: 768, Vocab: 640, Seed: 32, RopeBase: 1e6, NormEps: 1e-6},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			src, qp, dp := filepath.Join(dir, "f32.gguf"), filepath.Join(dir, "q.gguf"), filepath.Join(dir, "deq.gguf")
			if err := engine.GenerateFile(src, c); err != nil {
				t.Fatal(err)
			}
			pick := func(name string, _ int) engine.DType {
				if strings.Contains(name, ".ffn_") {
					return engine.MXFP4
				}
				return engine.Q8_0
			}
			if err := quantizeModel(src, qp, dp, pick); err != nil {
				t.Fatal(err)
			}
			ref, err := ggmlLogits(dp, c, tokens)
			if err != nil {
				t.Fatal(err)
			}
			gq, err := ggmlLogits(qp, c, tokens)
			if err != nil {
				t.Fatal(err)
			}
			ours := engineLogits(t, qp, tokens)
			dOurs, dGGML := relDist(ours, ref), relDist(gq, ref)
			t.Logf("%s mxfp4 FFN: engine %.3g, ggml quantized %.3g from the dequantized-F32 reference", name, dOurs, dGGML)
			if dOurs > max(1.25*dGGML, 1e-4) {
				t.Errorf("engine is %.3g from the reference, ggml's quantized kernels %.3g", dOurs, dGGML)
			}
		})
	}
}
