package grammar

import (
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/stratanet/strata/engine"
)

// vocabs caches each tokenizer's vocabulary as the mask sees it, per set
// of kept control tokens: sorting it costs milliseconds.
var vocabs sync.Map // vocabKey → *Vocab

type vocabKey struct {
	tok  *engine.Tokenizer
	keep string
}

// TokenizerVocab is tok's vocabulary as the output text spells it: each
// token's piece, a kept control token's text (keep, as
// engine.ChatSyntax.Keep), nothing for other control tokens; the
// tokenizer's end tokens end a document.
func TokenizerVocab(tok *engine.Tokenizer, keep []string) *Vocab {
	key := vocabKey{tok, strings.Join(keep, "\x00")}
	if v, ok := vocabs.Load(key); ok {
		return v.(*Vocab)
	}
	kept := map[int32]bool{}
	for _, s := range keep {
		if id, ok := tok.SpecialID(s); ok {
			kept[id] = true
		}
	}
	pieces := make([][]byte, tok.Vocab())
	var ends []int32
	for i := range pieces {
		id := int32(i)
		switch {
		case tok.IsEnd(id):
			ends = append(ends, id)
		case kept[id]:
			pieces[i] = []byte(tok.Token(id))
		default:
			pieces[i] = tok.Piece(id)
		}
	}
	v := NewVocab(pieces, ends)
	vocabs.Store(key, v)
	return v
}

// Constraint is one generation's grammar at the sampler: the matcher
// over the tokens generated so far.
type Constraint struct {
	v       *Vocab
	m       *Matcher
	allowed []uint64
	work    []float32
}

// NewConstraint starts a constrained document.
func NewConstraint(g *Grammar, v *Vocab) *Constraint {
	return &Constraint{v: v, m: g.NewMatcher(), allowed: make([]uint64, (v.Size()+63)/64)}
}

// Accept consumes a generated token.
func (c *Constraint) Accept(id int32) error { return c.m.Accept(c.v, id) }

// Done reports whether the document is complete.
func (c *Constraint) Done() bool { return c.m.Done() }

// Apply returns logits with every token the grammar does not allow next
// at -Inf (a copy: logits are not modified), ready for engine.Sample. A
// state that allows no token is ErrRejected.
func (c *Constraint) Apply(logits []float32) ([]float32, error) {
	if len(logits) != c.v.Size() {
		return nil, fmt.Errorf("%w: %d logits for a vocabulary of %d", ErrRejected, len(logits), c.v.Size())
	}
	n := c.m.Mask(c.v, c.allowed)
	switch {
	case c.m.ambiguous:
		return nil, errAmbiguous
	case n == 0:
		return nil, fmt.Errorf("%w: no token of the vocabulary continues the document", ErrRejected)
	}
	if cap(c.work) < len(logits) {
		c.work = make([]float32, len(logits))
	}
	w := c.work[:len(logits)]
	inf := float32(math.Inf(-1))
	for i, x := range logits {
		if c.allowed[i>>6]&(1<<(i&63)) != 0 {
			w[i] = x
		} else {
			w[i] = inf
		}
	}
	return w, nil
}
