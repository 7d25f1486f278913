package refcheck

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// packedTypes are the quantised weight types the engine computes with.
var packedTypes = []engine.DType{engine.Q4_0, engine.Q4_1, engine.Q5_0, engine.Q5_1, engine.Q8_0,
	engine.IQ4_NL, engine.Q4_K, engine.Q5_K, engine.Q6_K, engine.IQ4_XS, engine.MXFP4}

func randomValues(n int, seed uint64) []float32 {
	x := make([]float32, n)
	s := seed
	for i := range x {
		s = s*6364136223846793005 + 1442695040888963407
		u := float64(s>>11) / (1 << 53)
		x[i] = float32((u - 0.5) * 2 * (1 + float64(i%7)))
		if i%97 == 0 {
			x[i] *= 9 // outliers, as real weights have
		}
	}
	return x
}

// TestDequantizeMatchesGGML: the engine unpacks every block exactly as
// ggml's to_float does, bit for bit, on blocks ggml's quantizer wrote.
// With STRATA_WRITE_QUANT_VECTORS=1 it (re)writes the committed vectors in
// engine/testdata/quant, which the main module checks without cgo.
func TestDequantizeMatchesGGML(t *testing.T) {
	write := os.Getenv("STRATA_WRITE_QUANT_VECTORS") != ""
	for _, typ := range packedTypes {
		const rows, cols = 3, 512
		x := randomValues(rows*cols, uint64(typ)+1)
		raw := ggmlQuantize(typ, x, rows, cols)
		want := ggmlDequantize(typ, raw, rows*cols)
		got, err := engine.Dequantize(typ, raw, rows*cols)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		bad := 0
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if bad < 3 {
					t.Errorf("%s: value %d: engine %g, ggml %g", typ, i, got[i], want[i])
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from ggml", typ, bad, len(want))
		}
		if write {
			// Format: u32 type, u32 n, raw blocks, n float32 (ggml's values).
			var b []byte
			b = binary.LittleEndian.AppendUint32(b, uint32(typ))
			b = binary.LittleEndian.AppendUint32(b, uint32(rows*cols))
			b = append(b, raw...)
			b = append(b, f32Bytes(want)...)
			path := filepath.Join("..", "..", "testdata", "quant", typ.String()+".bin")
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fallback is llama.cpp's choice for a row length that is not a multiple
// of 256 (llama_tensor_get_type).
func fallback(t engine.DType, cols int) engine.DType {
	if cols%256 == 0 {
		return t
	}
	switch t {
	case engine.Q4_K:
		return engine.Q5_0
	case engine.Q5_K:
		return engine.Q5_1
	case engine.Q6_K:
		return engine.Q8_0
	case engine.IQ4_XS:
		return engine.IQ4_NL
	}
	return t
}

// q4KM follows llama.cpp's Q4_K_M choices for a small model: the head,
// attn_v and ffn_down in Q6_K, phi3's attn_qkv in Q5_K, the rest Q4_K,
// with row-length fallbacks.
func q4KM(name string, cols int) engine.DType {
	t := engine.Q4_K
	if name == "output.weight" || strings.Contains(name, "attn_v") || strings.Contains(name, "ffn_down") {
		t = engine.Q6_K
	}
	if strings.Contains(name, "attn_qkv") {
		t = engine.Q5_K
	}
	return fallback(t, cols)
}

// TestQuantizedLogits runs models whose weights ggml's quantizer wrote. The
// tight reference is ggml's F32 graph on the same weights dequantised by
// ggml: the engine's logits must be about as close to it as ggml's own
// quantized kernels are. Both quantise activations, and two equally valid
// roundings of them move a random model's logits by a few tens of percent
// of this distance, so the bound is 1.25× ggml's (seen: equal to three
// digits for most types, 0.88–1.13× for Q4_1 and Q5_1).
func TestQuantizedLogits(t *testing.T) {
	tokens := []int32{1, 40, 300, 7, 99, 260, 5, 120, 33, 444, 17, 2, 301, 302, 303, 500}
	shapes := map[string]engine.GenConfig{
		"llama-gqa-256": {Arch: "llama", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 21, RopeBase: 10000, NormEps: 1e-5},
		"qwen2-256":     {Arch: "qwen2", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, FFN: 768, Vocab: 640, Seed: 22, RopeBase: 1e6, NormEps: 1e-6},
		// Rows of 128 and 320: every K type falls back as llama.cpp does.
		"llama-fallback": {Arch: "llama", Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, FFN: 320, Vocab: 512, Seed: 23, RopeBase: 10000, NormEps: 1e-5},
		// qwen3's per-head Q/K norms, with a head size (128) of its own.
		"qwen3-256": {Arch: "qwen3", Layers: 2, Dim: 256, Heads: 4, KVHeads: 2, HeadDim: 128, FFN: 768, Vocab: 640, Seed: 25, RopeBase: 1e6, NormEps: 1e-6},
		// phi3's fused attn_qkv and gate+up, quantised whole as
		// llama.cpp does; LongRoPE factors stay F32.
		"phi3-256": {Arch: "phi3", Layers: 2, Dim: 256, Heads: 4, KVHeads: 4, FFN: 512, Vocab: 512, Seed: 24, RopeBase: 10000, NormEps: 1e-5, LongRoPE: true},
	}
	type mix struct {
		name string
		pick func(string, int) engine.DType
	}
	var mixes []mix
	for _, typ := range packedTypes {
		mixes = append(mixes, mix{typ.String(), func(_ string, cols int) engine.DType { return fallback(typ, cols) }})
	}
	mixes = append(mixes, mix{"q4_k_m", q4KM})
	dir := t.TempDir()
	for sname, c := range shapes {
		src := filepath.Join(dir, sname+".gguf")
		if err := engine.GenerateFile(src, c); err != nil {
			t.Fatal(err)
		}
		for _, m := range mixes {
			t.Run(sname+"/"+m.name, func(t *testing.T) {
				qp, dp := filepath.Join(dir, sname+"-"+m.name+".gguf"), filepath.Join(dir, sname+"-"+m.name+"-deq.gguf")
				if err := quantizeModel(src, qp, dp, m.pick); err != nil {
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
				t.Logf("%s %s: engine %.3g, ggml quantized %.3g from the dequantized-F32 reference", sname, m.name, dOurs, dGGML)
				if dOurs > max(1.25*dGGML, 1e-4) {
					t.Errorf("engine is %.3g from the reference, ggml's quantized kernels %.3g", dOurs, dGGML)
				}
			})
		}
	}
}

// relDist is max |a−b| over max |b|.
func relDist(a, b []float32) float64 {
	scale, diff := 0.0, 0.0
	for i := range b {
		scale = math.Max(scale, math.Abs(float64(b[i])))
		diff = math.Max(diff, math.Abs(float64(a[i]-b[i])))
	}
	return diff / scale
}
