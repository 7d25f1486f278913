package trust

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"math"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/routing"
)

// Receipts' chains: what every hop keeps of a session (its input and
// output chains) and signs on request (docs/trust.md).

// block is the prefix cache's block of positions: the chains keep their
// states at each, so that a session resumed from a cached prefix goes on
// from the very states a cold run had there.
const block = routing.PrefixBlock

// Chains is one hop session's record of what it took and gave: running
// SHA-256 chains over every input row (token IDs on the first layer,
// hidden states after) and every hidden row emitted, and the hash of the
// last output (the logits row on the last layer). It keeps the hashes'
// states at every whole block of positions, so that a session resumed
// from a prefix continues the very chains a cold run would have: its
// receipts stay comparable with a check session's. Not safe for
// concurrent use (one hop session's, on the scheduler's loop).
type Chains struct {
	in, out hash.Hash
	outLast [32]byte
	// top and maxAbs summarise the last logits row, on a last hop whose
	// receipts carry it (a tolerance check); nil otherwise.
	top    []consensus.TopLogit
	maxAbs float32
	rows   []byte // scratch
	pos    int    // rows folded
	marks  []Mark // marks[i]: the states after (i+1)·block rows
}

// Mark is the chains' hash states at a block boundary, which a prefix
// cache keeps beside the block's KV.
type Mark struct{ in, out []byte }

// NewChains are the chains of a session at position 0.
func NewChains() Chains { return Chains{in: sha256.New(), out: sha256.New()} }

// ChainsAt continues marks' chains at position n (a whole number of
// blocks they cover); false when they do not.
func ChainsAt(marks []Mark, n int) (Chains, bool) {
	c := NewChains()
	if n == 0 {
		return c, true
	}
	if n%block != 0 || n/block > len(marks) {
		return c, false
	}
	m := marks[n/block-1]
	if c.in.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.in) != nil ||
		c.out.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.out) != nil {
		return c, false
	}
	c.pos, c.marks = n, slices.Clone(marks[:n/block])
	return c, true
}

// Add folds one step: its input (tokens, or, after the first hop, the
// hidden rows: hidden non-nil) after the skip positions resumed from a
// prefix, and the outputs that go out (x, or on the last hop the logits
// row: last).
func (c *Chains) Add(tokens []int32, hidden []float32, skip int, x, logits []float32, last bool) {
	var in []byte
	if hidden == nil {
		for _, t := range tokens[skip:] {
			in = binary.LittleEndian.AppendUint32(in, uint32(t))
		}
	} else {
		in = slices.Clone(c.floats(hidden))
	}
	var out []byte
	if !last {
		out = slices.Clone(c.floats(x))
	}
	n := len(tokens) - skip
	if n <= 0 {
		return
	}
	inRow, outRow := len(in)/n, len(out)/n
	for done := 0; done < n; {
		k := min(n-done, block-c.pos%block)
		c.in.Write(in[done*inRow : (done+k)*inRow])
		if !last {
			c.out.Write(out[done*outRow : (done+k)*outRow])
		}
		done += k
		c.pos += k
		if c.pos%block == 0 && c.pos/block == len(c.marks)+1 {
			mi, _ := c.in.(encoding.BinaryMarshaler).MarshalBinary()
			mo, _ := c.out.(encoding.BinaryMarshaler).MarshalBinary()
			c.marks = append(c.marks, Mark{in: mi, out: mo})
		}
	}
	if last {
		c.outLast = sha256.Sum256(c.floats(logits))
		return
	}
	c.outLast = sha256.Sum256(out[len(out)-outRow:])
}

// floats is v's bytes on the float32 wire (little-endian), in scratch
// space valid until the next call.
func (c *Chains) floats(v []float32) []byte {
	c.rows = c.rows[:0]
	for _, f := range v {
		c.rows = binary.LittleEndian.AppendUint32(c.rows, math.Float32bits(f))
	}
	return c.rows
}

// SetLogits keeps the summary of the last logits row (a last hop whose
// receipts carry it: consensus.SummarizeLogits).
func (c *Chains) SetLogits(top []consensus.TopLogit, maxAbs float32) { c.top, c.maxAbs = top, maxAbs }

// Pos is how many positions the chains cover.
func (c *Chains) Pos() int { return c.pos }

// Marks are the chains' states at each whole block so far.
func (c *Chains) Marks() []Mark { return c.marks }

// InChain and OutChain are the chains' hashes now; OutLast the hash of
// the last output row.
func (c *Chains) InChain() (h [32]byte) { c.in.Sum(h[:0]); return h }

// OutChain: see InChain.
func (c *Chains) OutChain() (h [32]byte) { c.out.Sum(h[:0]); return h }

// OutLast: see InChain.
func (c *Chains) OutLast() [32]byte { return c.outLast }

// CloneOut is a copy of the output chain's hash, to go on from (a fault
// injector that sends other rows than it computed).
func (c *Chains) CloneOut() (hash.Hash, error) { return c.out.(hash.Cloner).Clone() }

// Receipt is the unsigned receipt of signer's hop session sid of model,
// layers [from, to), at positions, over the chains as they stand.
func (c *Chains) Receipt(signer peer.ID, sid SessionID, model uint64, from, to, positions int) consensus.Receipt {
	return consensus.Receipt{Signer: signer, Session: sid, Model: model, From: from, To: to, Positions: positions,
		InChain: c.InChain(), OutChain: c.OutChain(), OutLast: c.outLast}
}

// Logits is the signed summary of the last logits row for a receipt, by
// engine, after the tokens hist; nil when the chains hold none.
func (c *Chains) Logits(engine string, hist []int32) *consensus.Logits {
	if len(c.top) == 0 {
		return nil
	}
	return &consensus.Logits{Engine: engine, Tokens: consensus.TokenHash(hist), MaxAbs: c.maxAbs, Top: slices.Clone(c.top)}
}
