package engine

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// TestGemmaFileErrors: a gemma file without attention.sliding_window, or
// with a window of 0, a negative or non-finite soft cap, is ErrCorrupt;
// gemma-only generator settings on other architectures, and other
// architectures' settings on gemma, are ErrShape.
func TestGemmaFileErrors(t *testing.T) {
	c := Gemma3Config{Arch: "gemma2", Layers: 2, Dim: 64, Heads: 2, HeadDim: 32, FFN: 128, Vocab: 300, Seed: 1, SlidingWindow: 4}
	kvs, ts, err := gemmaParts(c)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(key string, v any) []KV {
		var out []KV
		for _, kv := range kvs {
			if kv.Key == key {
				if v == nil {
					continue
				}
				kv.Value = v
			}
			out = append(out, kv)
		}
		return out
	}
	for name, k := range map[string][]KV{
		"no window":        edit("gemma2.attention.sliding_window", nil),
		"zero window":      edit("gemma2.attention.sliding_window", uint32(0)),
		"negative cap":     edit("gemma2.attn_logit_softcapping", float32(-1)),
		"infinite cap":     edit("gemma2.final_logit_softcapping", float32(math.Inf(1))),
		"string as window": edit("gemma2.attention.sliding_window", "4"),
	} {
		var b bytes.Buffer
		if err := WriteGGUF(&b, k, ts); err != nil {
			t.Fatal(err)
		}
		if _, err := openBytes(t, b.Bytes()); err == nil {
			t.Errorf("%s: opened", name)
		} else if name != "string as window" && !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	// The unedited file opens, with gemma2's caps read back.
	var b bytes.Buffer
	if err := WriteGGUF(&b, kvs, ts); err != nil {
		t.Fatal(err)
	}
	s, err := openBytes(t, b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if h := s.hp; h.SlidingWindow != 4 || h.AttnSoftCap != 50 || h.FinalSoftCap != 30 || !h.NeoxRope {
		t.Errorf("read window %d, caps %g/%g, neox %v; want 4, 50/30, true", h.SlidingWindow, h.AttnSoftCap, h.FinalSoftCap, h.NeoxRope)
	}

	gen := DefaultGenConfig()
	for name, tc := range map[string]struct {
		mod  func(*GenConfig)
		want error
	}{
		"window on llama":  {func(g *GenConfig) { g.SlidingWindow = 8 }, ErrShape},
		"tied gemma":       {func(g *GenConfig) { g.Arch, g.Tied = "gemma3", true }, ErrShape},
		"gemma experts":    {func(g *GenConfig) { g.Arch, g.Experts, g.ExpertsUsed = "gemma3", 4, 2 }, ErrShape},
		"gemma mix width":  {func(g *GenConfig) { g.Arch, g.Mix = "gemma3", "q4_k_m" }, ErrShape},
		"gemma mxfp4 mix":  {func(g *GenConfig) { g.Arch, g.Mix = "gemma3", "mxfp4_moe" }, ErrUnsupportedType},
		"gemma negative w": {func(g *GenConfig) { g.Arch, g.SlidingWindow = "gemma2", -1 }, ErrShape},
	} {
		g := gen
		tc.mod(&g)
		if err := Generate(&bytes.Buffer{}, g); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if err := GenerateGemma3(&bytes.Buffer{}, Gemma3Config{Arch: "gemma4", Layers: 1, Dim: 64, Heads: 2, FFN: 128, Vocab: 300}); !errors.Is(err, ErrUnsupportedArch) {
		t.Errorf("gemma4: %v, want ErrUnsupportedArch", err)
	}
}
