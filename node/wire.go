package node

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/node/trust"
)

// The activation protocol (/strata/act/1) carries four messages in the
// swarm's length-prefixed frames. Version 1 encodes, little-endian:
//
//	u8  version (1)
//	u8  kind (1 step, 2 token, 3 error, 4 close, 5 audit, 6 receipt,
//	          7 upstream audit, 8 token with log-probabilities, 9 step
//	          with a grammar)
//	[16] session ID
//
// then, by kind:
//
//	step:  u8 flags (bit 0: open, bit 1: hidden states follow, bit 2:
//	           a check session (verify.go), bit 3: skip follows, bit 4: cold,
//	           bit 5: signed, bit 6: logits (a check session whose last
//	           hop puts its logits summary in its receipt); others 0;
//	           bits 3 and 4 only with open, bit 5 only with bit 1, bit 6
//	           only with bits 0 and 2)
//	       u32 position of the first input
//	       u8 len, bytes  entry peer ID (where tokens and errors go)
//	       u8 n (1..MaxHops), n × (u8 len, bytes peer ID; u32 from; u32 to)
//	           the remaining hops, the receiver first
//	       if open: u32 session capacity in positions, u64 model hash,
//	           f32 temperature, u32 top-k, f32 top-p, u32 min-keep,
//	           u64 seed, f32 repeat penalty, u32 repeat window
//	       if log-probabilities: u8 top count (0..MaxTopLogProbs)
//	       if a step with a grammar (kind 9, only with open): u32 the
//	           first constrained position, u32 len (1..MaxGrammar), bytes
//	           the grammar.Spec's wire form
//	       if skip: u32 positions skipped (1..n-1)
//	       if signed: u32 the sender's first layer (below the receiver's),
//	           [32] the sender's input chain, u8 len (1..), bytes the
//	           sender's signature (FrameSig)
//	       u32 n (1..MaxStepTokens), n × i32  the step's input tokens
//	       if hidden: u8 dtype (1 f32, 2 f16, 3 q8), u32 columns, then
//	           (n − skip) rows (one per input token after the skipped
//	           ones) of columns values each; a q8 row is
//	           ⌈columns/32⌉ blocks, each f32 scale (finite, ≥ 0) then
//	           up to 32 i8 values in −127..127 (the last block holds the
//	           remainder), value = scale × i8 (see q8.go)
//	token: u32 position of the sampled token, i32 token
//	token with log-probabilities (the answer to a session opened with
//	       them; a node that never asks never sees one): u32 position,
//	       i32 token, f32 the token's log-probability, u8 n
//	       (0..MaxTopLogProbs), n × (i32 token, f32 log-probability), the
//	       most likely first (every log-probability ≤ 0 and not NaN;
//	       -Inf allowed)
//	error: u8 code, u8 len, bytes peer ID at fault (may be empty),
//	       u16 len, bytes message (UTF-8, at most MaxErrorText)
//	close: nothing
//	audit: u32 first layer of the hop asked for its receipt
//	receipt: u16 len, bytes  a signed consensus.Receipt
//	upstream audit: u32 first layer of the hop asked for what its
//	       upstream signed
//
// Nothing may follow. Every count is checked against the bytes left
// before anything is allocated, so a decoder allocates in proportion to
// the frame, and the frame's size is bounded by the swarm.

// Wire limits.
const (
	wireVersion = 1
	// MaxHops bounds the hops a step may name.
	MaxHops = 64
	// MaxStepTokens bounds the positions one step may advance.
	MaxStepTokens = 1 << 20
	// MaxErrorText bounds an error message's text.
	MaxErrorText = 1024
	maxPeerIDLen = 64
	// MaxTopLogProbs bounds the alternatives a token frame carries.
	MaxTopLogProbs = engine.MaxTopLogProbs
)

// Kind is a message type on the activation protocol.
type Kind uint8

// The message kinds.
const (
	KindStep  Kind = 1
	KindToken Kind = 2
	KindError Kind = 3
	KindClose Kind = 4
	// KindAudit asks a hop for its signed receipt of a session.
	KindAudit Kind = 5
	// KindReceipt carries a hop's signed receipt to the entry.
	KindReceipt Kind = 6
	// KindUpAudit asks a hop for the receipt its upstream hop signed
	// over the frames it sent (FrameSig).
	KindUpAudit Kind = 7
	// KindTokenLP is a token with its log-probabilities (Token.LP).
	KindTokenLP Kind = 8
	// KindStepGrammar is a step whose open carries a grammar
	// (Open.Grammar): a kind of its own, so that a node that cannot
	// constrain its sampling refuses the frame instead of sampling
	// freely.
	KindStepGrammar Kind = 9
)

// MaxGrammar bounds a grammar spec's bytes on the wire.
const MaxGrammar = 1 << 20

func (k Kind) String() string {
	switch k {
	case KindStep:
		return "step"
	case KindToken:
		return "token"
	case KindError:
		return "error"
	case KindClose:
		return "close"
	case KindAudit:
		return "audit"
	case KindReceipt:
		return "receipt"
	case KindUpAudit:
		return "upstream audit"
	case KindTokenLP:
		return "token with log-probabilities"
	case KindStepGrammar:
		return "step with a grammar"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// DType is the element type of hidden states on the wire.
type DType uint8

// The wire dtypes.
const (
	DTypeF32 DType = 1
	DTypeF16 DType = 2
	// DTypeQ8 is 8-bit block quantization (q8.go): about 1.1 bytes per
	// value.
	DTypeQ8 DType = 3
)

func (d DType) String() string {
	switch d {
	case 0, DTypeF32:
		return "f32"
	case DTypeF16:
		return "f16"
	case DTypeQ8:
		return "q8"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// rowBytes is the bytes one row of cols values takes as d; 0 for an
// unknown dtype.
func (d DType) rowBytes(cols int) uint64 {
	switch d {
	case DTypeF32:
		return 4 * uint64(cols)
	case DTypeF16:
		return 2 * uint64(cols)
	case DTypeQ8:
		return q8RowBytes(cols)
	}
	return 0
}

// SessionID names one attempt of one generation on every hop of its path.
// A replay on a new path is a new session. It is package trust's, whose
// receipts and check records name it.
type SessionID = trust.SessionID

// Hop is one remaining hop of a step's path: the peer runs layers
// [From, To).
type Hop struct {
	Peer     peer.ID
	From, To int
}

// Open carries what a hop needs to open a session: its capacity, the
// model it was routed for and, for the last hop, how to sample.
type Open struct {
	// MaxTokens is the session's capacity in positions: the prompt plus
	// the most tokens it may generate.
	MaxTokens int
	// Model is ModelHash of the fingerprint the entry routes for.
	Model    uint64
	Sampling engine.SamplingParams
	// Cold forbids resuming from a prefix cache: the entry's retry after
	// a hop answered CodePrefixMiss.
	Cold bool
	// LogProbs asks the last hop for each token's log-probability and
	// its TopLogProbs (0..MaxTopLogProbs) most likely alternatives
	// (engine.LogProbs), returned in the token frames.
	LogProbs    bool
	TopLogProbs int
	// Grammar, when set, constrains the last hop's sampling: the wire
	// form of a grammar.Spec, whose document starts at position
	// GrammarFrom (the prompt's end); the last hop feeds the tokens from
	// there to its matcher, replays included, and masks what the
	// grammar does not allow next.
	Grammar     []byte
	GrammarFrom int
}

// Step is one step of one session, as one hop receives it.
type Step struct {
	Session SessionID
	Open    *Open // the session's first step; nil after
	Entry   peer.ID
	Hops    []Hop // remaining, Hops[0] the receiver
	Pos     int
	// Tokens are the input tokens at positions Pos.. (every hop gets them:
	// the first embeds them, the last keeps them for sampling).
	Tokens []int32
	// Skip, on an open step after the first hop, is how many of Tokens
	// the previous hop resumed from its prefix cache: Hidden starts at
	// Tokens[Skip], and the receiver must hold them cached too.
	Skip int
	// Hidden holds (len(Tokens) − Skip) × Cols states for hops after the
	// first; nil on the first hop. DType is how they travel (0: DTypeF32).
	Hidden []float32
	Cols   int
	DType  DType
	// Check marks a check session (verify.go): its last hop answers the
	// entry with a signed receipt instead of forwarding or sampling, so
	// its path may end before the last layer.
	Check bool
	// Logits, on the open step of a check session, asks its last hop, if
	// it holds the model's last layer, for the summary of its last logits
	// row in its receipt (a tolerance check, verify.go).
	Logits bool
	// Sig binds the hidden states to the hop that sent them (nil:
	// unsigned; only with Hidden).
	Sig *FrameSig
}

// FrameSig is a sending hop's signature over what it sent (verify.go):
// the consensus.Receipt it would sign for the session after this step,
// with the output chain and last output of the rows on the wire. The
// receiver rebuilds that receipt from the frame and its own input chain
// (signer: the stream's authenticated peer; layers [From, its own
// first); positions: the step's end), so the frame carries only what the
// receiver cannot know.
type FrameSig struct {
	From    int      // the sender's first layer
	InChain [32]byte // the sender's input chain after this step
	Sig     []byte
}

// maxFrameSig bounds a frame signature (Ed25519: 64 bytes, ECDSA and
// secp256k1 about 72).
const maxFrameSig = 255

// Token is the last hop's sampled token, sent straight to the entry.
type Token struct {
	Session SessionID
	Pos     int // the position the token occupies
	Token   int32
	// LP: the token's log-probabilities, for a session opened with
	// Open.LogProbs; nil otherwise.
	LP *TokenLP
}

// TokenLP is a sampled token's log-probability and the most likely
// tokens at its position (engine.LogProbs of the last hop's logits).
type TokenLP struct {
	LogProb float32
	Top     []engine.TokenLogProb
}

// Message is one of *Step, *Token, *ErrorMsg, *Close, *Audit, *ReceiptMsg,
// *UpAudit.
type Message interface{ kind() Kind }

func (*Step) kind() Kind       { return KindStep }
func (*Token) kind() Kind      { return KindToken }
func (*ErrorMsg) kind() Kind   { return KindError }
func (*Close) kind() Kind      { return KindClose }
func (*Audit) kind() Kind      { return KindAudit }
func (*ReceiptMsg) kind() Kind { return KindReceipt }
func (*UpAudit) kind() Kind    { return KindUpAudit }

const (
	flagOpen   = 1 << 0
	flagHidden = 1 << 1
	flagCheck  = 1 << 2
	flagSkip   = 1 << 3
	flagCold   = 1 << 4
	flagSigned = 1 << 5
	flagLogits = 1 << 6
	flagLP     = 1 << 7
)

// Encode appends the encoding of m to b.
func Encode(b []byte, m Message) ([]byte, error) {
	switch m := m.(type) {
	case *Step:
		return encodeStep(b, m)
	case *Token:
		k := KindToken
		if m.LP != nil {
			k = KindTokenLP
		}
		b = header(b, k, m.Session)
		if m.Pos < 0 || m.Pos > math.MaxUint32 {
			return nil, fmt.Errorf("%w: token position %d", ErrBadFrame, m.Pos)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(m.Pos))
		b = binary.LittleEndian.AppendUint32(b, uint32(m.Token))
		if lp := m.LP; lp != nil {
			if err := checkLP(lp); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
			}
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(lp.LogProb))
			b = append(b, byte(len(lp.Top)))
			for _, t := range lp.Top {
				b = binary.LittleEndian.AppendUint32(b, uint32(t.Token))
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(t.LogProb))
			}
		}
		return b, nil
	case *ErrorMsg:
		if m.Code == 0 || m.Code > maxCode {
			return nil, fmt.Errorf("%w: error code %d", ErrBadFrame, m.Code)
		}
		b = header(b, KindError, m.Session)
		b = append(b, byte(m.Code))
		var err error
		if b, err = appendPeer(b, m.Peer, true); err != nil {
			return nil, err
		}
		t := m.Text
		if len(t) > MaxErrorText {
			t = t[:MaxErrorText]
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(t)))
		return append(b, t...), nil
	case *Close:
		return header(b, KindClose, m.Session), nil
	case *Audit:
		if m.From < 0 || m.From > math.MaxUint32 {
			return nil, fmt.Errorf("%w: audit of layer %d", ErrBadFrame, m.From)
		}
		b = header(b, KindAudit, m.Session)
		return binary.LittleEndian.AppendUint32(b, uint32(m.From)), nil
	case *UpAudit:
		if m.From <= 0 || m.From > math.MaxUint32 {
			return nil, fmt.Errorf("%w: upstream audit of layer %d", ErrBadFrame, m.From)
		}
		b = header(b, KindUpAudit, m.Session)
		return binary.LittleEndian.AppendUint32(b, uint32(m.From)), nil
	case *ReceiptMsg:
		rb, err := m.Receipt.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
		}
		b = header(b, KindReceipt, m.Session)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(rb)))
		return append(b, rb...), nil
	}
	return nil, fmt.Errorf("%w: unknown message %T", ErrBadFrame, m)
}

// checkLP refuses log-probabilities no log-softmax gives: NaN or
// positive values, more than MaxTopLogProbs alternatives, negative
// token IDs, alternatives out of order.
func checkLP(lp *TokenLP) error {
	bad := func(v float32) bool { return v != v || v > 0 }
	if bad(lp.LogProb) || len(lp.Top) > MaxTopLogProbs {
		return fmt.Errorf("log-probability %v with %d alternatives (at most %d)", lp.LogProb, len(lp.Top), MaxTopLogProbs)
	}
	for i, t := range lp.Top {
		if bad(t.LogProb) || t.Token < 0 || i > 0 && t.LogProb > lp.Top[i-1].LogProb {
			return fmt.Errorf("alternative %d: token %d, log-probability %v", i, t.Token, t.LogProb)
		}
	}
	return nil
}

func header(b []byte, k Kind, s SessionID) []byte {
	b = append(b, wireVersion, byte(k))
	return append(b, s[:]...)
}

func appendPeer(b []byte, p peer.ID, mayBeEmpty bool) ([]byte, error) {
	if (p == "" && !mayBeEmpty) || len(p) > maxPeerIDLen {
		return nil, fmt.Errorf("%w: peer ID of %d bytes", ErrBadFrame, len(p))
	}
	b = append(b, byte(len(p)))
	return append(b, p...), nil
}

func encodeStep(b []byte, m *Step) ([]byte, error) {
	n := len(m.Tokens)
	switch {
	case len(m.Hops) == 0 || len(m.Hops) > MaxHops:
		return nil, fmt.Errorf("%w: %d hops", ErrBadFrame, len(m.Hops))
	case n == 0 || n > MaxStepTokens:
		return nil, fmt.Errorf("%w: %d tokens", ErrBadFrame, n)
	case m.Pos < 0 || m.Pos > math.MaxUint32:
		return nil, fmt.Errorf("%w: position %d", ErrBadFrame, m.Pos)
	case m.Skip != 0 && (m.Open == nil || m.Skip < 0 || m.Skip >= n):
		return nil, fmt.Errorf("%w: skip %d of %d tokens", ErrBadFrame, m.Skip, n)
	case m.Hidden != nil && (m.Cols <= 0 || len(m.Hidden) != (n-m.Skip)*m.Cols):
		return nil, fmt.Errorf("%w: %d hidden values for %d tokens of %d columns", ErrBadFrame, len(m.Hidden), n-m.Skip, m.Cols)
	case m.Logits && (m.Open == nil || !m.Check):
		return nil, fmt.Errorf("%w: logits asked of a step that opens no check session", ErrBadFrame)
	case m.Open != nil && (m.Open.TopLogProbs < 0 || m.Open.TopLogProbs > MaxTopLogProbs || m.Open.TopLogProbs > 0 && !m.Open.LogProbs):
		return nil, fmt.Errorf("%w: %d top log-probabilities", ErrBadFrame, m.Open.TopLogProbs)
	case m.Sig != nil && (m.Hidden == nil || m.Sig.From < 0 || m.Sig.From >= m.Hops[0].From ||
		len(m.Sig.Sig) == 0 || len(m.Sig.Sig) > maxFrameSig):
		return nil, fmt.Errorf("%w: frame signature from layer %d of %d bytes", ErrBadFrame, m.Sig.From, len(m.Sig.Sig))
	}
	dt := m.DType
	if dt == 0 {
		dt = DTypeF32
	}
	if m.Hidden != nil && dt.rowBytes(1) == 0 {
		return nil, fmt.Errorf("%w: dtype %d", ErrBadFrame, dt)
	}
	if m.Hidden != nil && dt == DTypeQ8 {
		if err := q8Check(m.Hidden); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
		}
	}
	kind := KindStep
	if m.Open != nil && m.Open.Grammar != nil {
		if len(m.Open.Grammar) == 0 || len(m.Open.Grammar) > MaxGrammar || m.Open.GrammarFrom < 0 || m.Open.GrammarFrom > math.MaxUint32 {
			return nil, fmt.Errorf("%w: a grammar of %d bytes from position %d", ErrBadFrame, len(m.Open.Grammar), m.Open.GrammarFrom)
		}
		kind = KindStepGrammar
	}
	b = header(b, kind, m.Session)
	flags := byte(0)
	if m.Open != nil {
		flags |= flagOpen
	}
	if m.Hidden != nil {
		flags |= flagHidden
	}
	if m.Check {
		flags |= flagCheck
	}
	if m.Skip != 0 {
		flags |= flagSkip
	}
	if m.Open != nil && m.Open.Cold {
		flags |= flagCold
	}
	if m.Sig != nil {
		flags |= flagSigned
	}
	if m.Logits {
		flags |= flagLogits
	}
	if m.Open != nil && m.Open.LogProbs {
		flags |= flagLP
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Pos))
	var err error
	if b, err = appendPeer(b, m.Entry, false); err != nil {
		return nil, err
	}
	b = append(b, byte(len(m.Hops)))
	for _, h := range m.Hops {
		if b, err = appendPeer(b, h.Peer, false); err != nil {
			return nil, err
		}
		if h.From < 0 || h.To <= h.From || h.To > math.MaxUint32 {
			return nil, fmt.Errorf("%w: hop [%d, %d)", ErrBadFrame, h.From, h.To)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(h.From))
		b = binary.LittleEndian.AppendUint32(b, uint32(h.To))
	}
	if o := m.Open; o != nil {
		sp := o.Sampling
		if o.MaxTokens <= 0 || o.MaxTokens > math.MaxUint32 || sp.TopK < 0 || sp.MinKeep < 0 || sp.RepeatLastN < 0 ||
			sp.TopK > math.MaxUint32 || sp.MinKeep > math.MaxUint32 || sp.RepeatLastN > math.MaxUint32 {
			return nil, fmt.Errorf("%w: open parameters %+v", ErrBadFrame, *o)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(o.MaxTokens))
		b = binary.LittleEndian.AppendUint64(b, o.Model)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sp.Temperature))
		b = binary.LittleEndian.AppendUint32(b, uint32(sp.TopK))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sp.TopP))
		b = binary.LittleEndian.AppendUint32(b, uint32(sp.MinKeep))
		b = binary.LittleEndian.AppendUint64(b, sp.Seed)
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sp.RepeatPenalty))
		b = binary.LittleEndian.AppendUint32(b, uint32(sp.RepeatLastN))
		if o.LogProbs {
			b = append(b, byte(o.TopLogProbs))
		}
		if kind == KindStepGrammar {
			b = binary.LittleEndian.AppendUint32(b, uint32(o.GrammarFrom))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(o.Grammar)))
			b = append(b, o.Grammar...)
		}
	}
	if m.Skip != 0 {
		b = binary.LittleEndian.AppendUint32(b, uint32(m.Skip))
	}
	if g := m.Sig; g != nil {
		b = binary.LittleEndian.AppendUint32(b, uint32(g.From))
		b = append(b, g.InChain[:]...)
		b = append(b, byte(len(g.Sig)))
		b = append(b, g.Sig...)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	for _, t := range m.Tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	if m.Hidden != nil {
		b = append(b, byte(dt))
		b = binary.LittleEndian.AppendUint32(b, uint32(m.Cols))
		switch dt {
		case DTypeF32:
			for _, v := range m.Hidden {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		case DTypeF16:
			for _, v := range m.Hidden {
				b = binary.LittleEndian.AppendUint16(b, engine.F32ToF16(v))
			}
		case DTypeQ8:
			for r := 0; r < len(m.Hidden); r += m.Cols {
				b = q8AppendRow(b, m.Hidden[r:r+m.Cols])
			}
		}
	}
	return b, nil
}

// Decode decodes one frame. It never panics, and every malformation is
// an error wrapping ErrBadFrame. The result does not alias frame.
func Decode(frame []byte) (Message, error) {
	d := codec.NewReader(frame, binary.LittleEndian, ErrBadFrame)
	if v := d.U8("version"); d.Err() == nil && v != wireVersion {
		d.Fail("version %d", v)
	}
	k := Kind(d.U8("kind"))
	var sid SessionID
	copy(sid[:], d.Take(len(sid), "session"))
	if d.Err() != nil {
		return nil, d.Err()
	}
	var m Message
	switch k {
	case KindStep, KindStepGrammar:
		m = decodeStep(d, sid, k == KindStepGrammar)
	case KindToken, KindTokenLP:
		t := &Token{Session: sid}
		t.Pos = int(d.U32("position"))
		t.Token = int32(d.U32("token"))
		if k == KindTokenLP {
			t.LP = decodeLP(d)
		}
		m = t
	case KindError:
		e := &ErrorMsg{Session: sid}
		e.Code = ErrorCode(d.U8("code"))
		if d.Err() == nil && (e.Code == 0 || e.Code > maxCode) {
			d.Fail("error code %d", e.Code)
		}
		e.Peer = d.PeerID("peer at fault", maxPeerIDLen, true)
		n := int(d.U16("text length"))
		if d.Err() == nil && n > MaxErrorText {
			d.Fail("error text of %d bytes", n)
		}
		e.Text = string(d.Take(n, "text"))
		m = e
	case KindClose:
		m = &Close{Session: sid}
	case KindAudit:
		m = &Audit{Session: sid, From: int(d.U32("audited layer"))}
	case KindUpAudit:
		u := &UpAudit{Session: sid, From: int(d.U32("audited layer"))}
		if d.Err() == nil && u.From == 0 {
			d.Fail("upstream audit of layer 0, which has no upstream hop")
		}
		m = u
	case KindReceipt:
		r := &ReceiptMsg{Session: sid}
		n := int(d.U16("receipt length"))
		if d.Err() == nil && n > consensus.MaxReceiptSize {
			d.Fail("receipt of %d bytes", n)
		}
		raw := d.Take(n, "receipt")
		if d.Err() == nil {
			if err := r.Receipt.UnmarshalBinary(raw); err != nil {
				d.Fail("receipt: %v", err)
			}
		}
		m = r
	default:
		d.Fail("kind %d", k)
	}
	d.End()
	if d.Err() != nil {
		return nil, d.Err()
	}
	return m, nil
}

// decodeLP reads a token frame's log-probabilities.
func decodeLP(d *codec.Reader) *TokenLP {
	lp := &TokenLP{LogProb: d.F32("log-probability")}
	n := int(d.U8("alternatives"))
	if d.Err() == nil && (n > MaxTopLogProbs || 8*n != d.Len()) {
		d.Fail("%d alternatives (at most %d) in %d bytes", n, MaxTopLogProbs, d.Len())
	}
	if d.Err() != nil {
		return nil
	}
	if n > 0 {
		lp.Top = make([]engine.TokenLogProb, n)
	}
	for i := range lp.Top {
		lp.Top[i].Token = int32(d.U32("alternative"))
		lp.Top[i].LogProb = d.F32("alternative's log-probability")
	}
	if err := checkLP(lp); err != nil && d.Err() == nil {
		d.Fail("%v", err)
	}
	return lp
}

func decodeStep(d *codec.Reader, sid SessionID, gram bool) *Step {
	s := &Step{Session: sid}
	flags := d.U8("flags")
	if d.Err() == nil && gram && flags&flagOpen == 0 {
		d.Fail("a grammar on a step that opens nothing")
	}
	if d.Err() == nil && (flags&^(flagOpen|flagHidden|flagCheck|flagSkip|flagCold|flagSigned|flagLogits|flagLP) != 0 ||
		flags&flagOpen == 0 && flags&(flagSkip|flagCold|flagLP) != 0 ||
		flags&flagHidden == 0 && flags&flagSigned != 0 ||
		flags&flagLogits != 0 && flags&(flagOpen|flagCheck) != flagOpen|flagCheck) {
		d.Fail("flags %#x", flags)
	}
	s.Check = flags&flagCheck != 0
	s.Logits = flags&flagLogits != 0
	s.Pos = int(d.U32("position"))
	s.Entry = d.PeerID("entry", maxPeerIDLen, false)
	nh := int(d.U8("hop count"))
	if d.Err() == nil && (nh == 0 || nh > MaxHops) {
		d.Fail("%d hops", nh)
	}
	if d.Err() != nil {
		return nil
	}
	s.Hops = make([]Hop, 0, min(nh, d.Len()/10+1))
	for i := 0; i < nh && d.Err() == nil; i++ {
		h := Hop{Peer: d.PeerID("hop", maxPeerIDLen, false)}
		h.From, h.To = int(d.U32("hop from")), int(d.U32("hop to"))
		if d.Err() == nil && h.To <= h.From {
			d.Fail("hop %d range [%d, %d)", i, h.From, h.To)
		}
		s.Hops = append(s.Hops, h)
	}
	if flags&flagOpen != 0 {
		o := &Open{}
		o.MaxTokens = int(d.U32("capacity"))
		o.Model = d.U64("model")
		o.Sampling.Temperature = d.F32("temperature")
		o.Sampling.TopK = int(d.U32("top-k"))
		o.Sampling.TopP = d.F32("top-p")
		o.Sampling.MinKeep = int(d.U32("min-keep"))
		o.Sampling.Seed = d.U64("seed")
		o.Sampling.RepeatPenalty = d.F32("repeat penalty")
		o.Sampling.RepeatLastN = int(d.U32("repeat window"))
		if d.Err() == nil && o.MaxTokens == 0 {
			d.Fail("zero capacity")
		}
		if flags&flagLP != 0 {
			o.LogProbs = true
			o.TopLogProbs = int(d.U8("top log-probabilities"))
			if d.Err() == nil && o.TopLogProbs > MaxTopLogProbs {
				d.Fail("%d top log-probabilities (at most %d)", o.TopLogProbs, MaxTopLogProbs)
			}
		}
		if gram {
			o.GrammarFrom = int(d.U32("grammar start"))
			n := int(d.U32("grammar length"))
			if d.Err() == nil && (n == 0 || n > MaxGrammar || n > d.Len()) {
				d.Fail("a grammar of %d bytes in %d", n, d.Len())
			}
			if d.Err() == nil {
				o.Grammar = slices.Clone(d.Take(n, "grammar"))
			}
		}
		o.Cold = flags&flagCold != 0
		s.Open = o
	}
	if flags&flagSkip != 0 {
		s.Skip = int(d.U32("skip"))
	}
	if flags&flagSigned != 0 {
		g := &FrameSig{From: int(d.U32("signer's layer"))}
		copy(g.InChain[:], d.Take(len(g.InChain), "signer's input chain"))
		n := int(d.U8("signature length"))
		if d.Err() == nil && (n == 0 || g.From >= s.Hops[0].From) {
			d.Fail("signature of %d bytes from layer %d", n, g.From)
		}
		g.Sig = slices.Clone(d.Take(n, "signature"))
		s.Sig = g
	}
	n := int(d.U32("token count"))
	if d.Err() == nil && (n == 0 || n > MaxStepTokens || n > d.Len()/4) {
		d.Fail("%d tokens in %d bytes", n, d.Len())
	}
	if d.Err() == nil && flags&flagSkip != 0 && (s.Skip == 0 || s.Skip >= n) {
		d.Fail("skip %d of %d tokens", s.Skip, n)
	}
	if d.Err() != nil {
		return nil
	}
	raw := d.Take(4*n, "tokens")
	s.Tokens = make([]int32, n)
	for i := range s.Tokens {
		s.Tokens[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	if flags&flagHidden != 0 {
		s.DType = DType(d.U8("dtype"))
		s.Cols = int(d.U32("columns"))
		rb := s.DType.rowBytes(s.Cols)
		if d.Err() == nil && s.DType.rowBytes(1) == 0 {
			d.Fail("dtype %d", s.DType)
		}
		rows := n - s.Skip
		if d.Err() == nil && (s.Cols == 0 || rb*uint64(rows) != uint64(d.Len())) {
			d.Fail("%d bytes of hidden states for %d rows of %d %s values", d.Len(), rows, s.Cols, s.DType)
		}
		if d.Err() != nil {
			return nil
		}
		raw := d.Take(d.Len(), "hidden")
		s.Hidden = make([]float32, rows*s.Cols)
		switch s.DType {
		case DTypeF32:
			for i := range s.Hidden {
				s.Hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case DTypeF16:
			for i := range s.Hidden {
				s.Hidden[i] = engine.F16ToF32(binary.LittleEndian.Uint16(raw[2*i:]))
			}
		case DTypeQ8:
			for r := 0; r < rows; r++ {
				if err := q8DecodeRow(s.Hidden[r*s.Cols:(r+1)*s.Cols], raw[uint64(r)*rb:uint64(r+1)*rb]); err != nil {
					d.Fail("row %d: %v", r, err)
					return nil
				}
			}
		}
	}
	return s
}
