package refcheck

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stratanet/strata/engine"
)

// TestSplitPartsReadByGGML: each part of a split model written by
// engine.GenerateFiles (as llama-gguf-split lays them out) is a GGUF file
// that ggml's own gguf reader parses, with llama.cpp's key types (split.no
// and split.count uint16, split.tensors.count int32, as its model loader
// requires) and the engine's offsets and bytes for every tensor, at the
// default alignment and at general.alignment 64 and 256.
func TestSplitPartsReadByGGML(t *testing.T) {
	c := engine.GenConfig{Arch: "llama", Layers: 3, Dim: 256, Heads: 4, KVHeads: 2, FFN: 512, Vocab: 512, Seed: 31,
		RopeBase: 10000, NormEps: 1e-5, Mix: "q4_k_m"}
	for _, l := range []engine.FileLayout{{SplitMaxTensors: 7}, {Alignment: 64, SplitMaxTensors: 11}, {Alignment: 256}} {
		t.Run(fmt.Sprintf("align%d-split%d", l.Alignment, l.SplitMaxTensors), func(t *testing.T) {
			paths, err := engine.GenerateFiles(filepath.Join(t.TempDir(), "m.gguf"), c, l)
			if err != nil {
				t.Fatal(err)
			}
			f, fh, err := engine.OpenFile(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			if len(f.Parts) != len(paths) {
				t.Fatalf("%d parts, %d paths", len(f.Parts), len(paths))
			}
			seen := 0
			for i, p := range paths {
				g, err := readGGUF(p, "split.no", "split.count", "split.tensors.count")
				if err != nil {
					t.Fatal(err)
				}
				part := f.Parts[i]
				if g.Alignment != part.Alignment || g.DataOffset != part.DataOffset || len(g.Tensors) != part.Tensors {
					t.Errorf("part %d: ggml alignment %d, data at %d, %d tensors; engine %+v", i+1, g.Alignment, g.DataOffset, len(g.Tensors), part)
				}
				if l.SplitMaxTensors > 0 {
					want := map[string]ggufKV{"split.no": {2, int64(i)}, "split.count": {2, int64(len(paths))}, "split.tensors.count": {5, int64(len(f.Tensors))}}
					for k, w := range want {
						if g.KV[k] != w {
							t.Errorf("part %d: %s is %+v in ggml, want %+v", i+1, k, g.KV[k], w)
						}
					}
				}
				for _, gt := range g.Tensors {
					ti, ok := f.Tensor(gt.Name)
					if !ok || ti.Part != i || ti.Offset != gt.Offset {
						t.Fatalf("part %d: tensor %s at %d in ggml; engine %+v", i+1, gt.Name, gt.Offset, ti)
					}
					b := make([]byte, ti.Size)
					if err := f.ReadTensor(ti, b); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(b, gt.Data) {
						t.Fatalf("part %d: tensor %s: bytes differ from ggml's", i+1, gt.Name)
					}
					seen++
				}
			}
			if seen != len(f.Tensors) {
				t.Errorf("ggml read %d tensors in all parts, the engine %d", seen, len(f.Tensors))
			}
			t.Logf("%d parts, %d tensors, alignment %d: ggml and the engine agree", len(paths), seen, f.Alignment)
		})
	}
}
