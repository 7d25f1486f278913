package grammar

import (
	"testing"
	"github.com/stratanet/strata/engine"
)

func BenchmarkDbg(b *testing.B) {
	tok, _ := engine.LoadTokenizer(tinyModel)
	empty := 0
	for id := 0; id < tok.Vocab(); id++ {
		if len(tok.Piece(int32(id))) == 0 { empty++ ; if empty < 5 {println(id, tok.Token(int32(id)))}}
	}
	println(tok.Vocab(), empty)
	v := TokenizerVocab(tok, nil)
	println(len(v.order), len(v.ends))
}
