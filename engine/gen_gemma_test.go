package engine

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestGenerateGemma3(t *testing.T) {
	c := Gemma3Config{Layers: 2, Dim: 64, Heads: 2, KVHeads: 1, HeadDim: 32, FFN: 128, Vocab: 300, Seed: 7, SlidingWindow: 8}
	path := filepath.Join(t.TempDir(), "g.gguf")
	if err := GenerateGemma3File(path, c); err != nil {
		t.Fatal(err)
	}
	f, fh, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if a, _ := f.String("general.architecture"); a != "gemma3" {
		t.Errorf("architecture %q", a)
	}
	for key, want := range map[string]uint64{"gemma3.block_count": 2, "gemma3.attention.key_length": 32,
		"gemma3.attention.head_count_kv": 1, "gemma3.attention.sliding_window": 8} {
		if got, err := f.Uint(key); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", key, got, err, want)
		}
	}
	if got, want := len(f.Tensors), 2+13*c.Layers; got != want {
		t.Errorf("%d tensors, want %d", got, want)
	}
	for _, ti := range f.Tensors {
		if ti.Name == "output.weight" {
			t.Error("output.weight written: gemma3's head is tied")
		}
	}
}

func TestGenerateGemma3Rejects(t *testing.T) {
	ok := Gemma3Config{Layers: 1, Dim: 64, Heads: 2, HeadDim: 32, FFN: 128, Vocab: 300}
	for name, tc := range map[string]struct {
		mod  func(*Gemma3Config)
		want error
	}{
		"no layers":     {func(c *Gemma3Config) { c.Layers = 0 }, ErrShape},
		"odd head dim":  {func(c *Gemma3Config) { c.HeadDim = 31 }, ErrShape},
		"kv heads":      {func(c *Gemma3Config) { c.KVHeads = 3 }, ErrShape},
		"small vocab":   {func(c *Gemma3Config) { c.Vocab = 10 }, ErrShape},
		"q8_0 ffn":      {func(c *Gemma3Config) { c.DType, c.FFN = Q8_0, 100 }, ErrShape},
		"negative swa":  {func(c *Gemma3Config) { c.SlidingWindow = -1 }, ErrShape},
		"unknown dtype": {func(c *Gemma3Config) { c.DType = DType(99) }, ErrUnsupportedType},
	} {
		c := ok
		tc.mod(&c)
		err := GenerateGemma3File(filepath.Join(t.TempDir(), "g.gguf"), c)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}
