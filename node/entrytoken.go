package node

import (
	"fmt"

	"github.com/stratanet/strata/engine/grammar"
)

// The entry's own checks of what a token frame carries (its grammar, its
// log-probabilities), which node/entry's Gen hears of as Rejected, and
// the conversion of log-probabilities for the caller.

// gramSync brings the entry's matcher to out (from the start after a
// rewind); "" when out fits the grammar.
func (g *generation) gramSync() string {
	if g.gramM != nil && g.gramLen == len(g.out) {
		return ""
	}
	g.gramM, g.gramLen = grammar.NewConstraint(g.gramG, g.gramV), 0
	for _, t := range g.out {
		if err := g.gramM.Accept(t); err != nil {
			g.gramM = nil
			return err.Error()
		}
		g.gramLen++
	}
	return ""
}

// gramCheck checks a token the last hop sampled for a constrained
// generation: the grammar must allow it after out ("" when it does).
func (g *generation) gramCheck(id int32) string {
	if g.gramG == nil {
		return ""
	}
	if why := g.gramSync(); why != "" {
		return why
	}
	if err := g.gramM.Accept(id); err != nil {
		g.gramM = nil
		return fmt.Sprintf("a token the grammar does not allow: %v", err)
	}
	g.gramLen++
	return ""
}

// gramStuck says why the grammar cannot go on after out, as the entry's
// own matcher finds it ("" when it can: a hop that said otherwise lied).
func (g *generation) gramStuck() string {
	if g.gramG == nil {
		return ""
	}
	if why := g.gramSync(); why != "" {
		return why
	}
	if _, err := g.gramM.Apply(make([]float32, g.gramV.Size())); err != nil {
		return err.Error()
	}
	return ""
}

// checkLP says what is wrong with a token's log-probabilities for this
// generation ("" when nothing): the decoder checked their form, this
// their count and IDs.
func (g *generation) checkLP(lp *TokenLP) string {
	vocab := g.e.cfg.model.info.Vocab
	switch {
	case lp == nil:
		return "a token without the log-probabilities asked for"
	case len(lp.Top) != min(g.topLP, vocab):
		return fmt.Sprintf("%d top log-probabilities, asked for %d", len(lp.Top), g.topLP)
	}
	for _, t := range lp.Top {
		if int(t.Token) >= vocab {
			return fmt.Sprintf("top log-probability of token %d, outside the vocabulary", t.Token)
		}
	}
	return ""
}

// logProbs turns a token frame's log-probabilities into the caller's.
func (g *generation) logProbs(id int32, lp *TokenLP) TokenLogProbs {
	tok := g.e.cfg.model.tok
	text := func(id int32) []byte {
		if b := tok.Piece(id); len(b) > 0 {
			return b
		}
		return []byte(tok.Token(id))
	}
	out := TokenLogProbs{Token: id, Text: text(id), LogProb: lp.LogProb}
	if len(lp.Top) > 0 {
		out.Top = make([]LogProb, len(lp.Top))
		for i, t := range lp.Top {
			out.Top[i] = LogProb{Token: t.Token, Text: text(t.Token), LogProb: t.LogProb}
		}
	}
	return out
}
