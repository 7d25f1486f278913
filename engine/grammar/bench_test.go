package grammar

import (
	"os"
	"testing"

	"github.com/stratanet/strata/engine"
)

const tinyModel = "/work/models/tiny-q4_k_m.gguf"

func tinyVocab(b *testing.B) *Vocab {
	path := os.Getenv("STRATA_TINY_MODEL")
	if path == "" {
		path = tinyModel
	}
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		b.Skipf("no TinyLlama tokenizer (%v): set STRATA_TINY_MODEL", err)
	}
	return TokenizerVocab(tok, nil)
}

// BenchmarkMask: one mask over TinyLlama's 32000 tokens, in a string
// (most tokens allowed) and between members (few).
func BenchmarkMask(b *testing.B) {
	v := tinyVocab(b)
	g := mustCompile(b, personSchema)
	allowed := make([]uint64, (v.Size()+63)/64)
	for _, tc := range []struct{ name, prefix string }{
		{"start", ""},
		{"in-string", `{"name":"Ab`},
		{"after-value", `{"name":"Ab","age":12`},
		{"in-free-string", `{"name":"Ab","age":12,"tags":[],"kind":null,"score":1,"nick":"x`},
	} {
		m := g.NewMatcher()
		if err := m.Advance([]byte(tc.prefix)); err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				n = m.Mask(v, allowed)
			}
			b.ReportMetric(float64(n), "allowed")
		})
	}
}
