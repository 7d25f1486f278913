package node

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"math"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
)

// Receipts: what every hop keeps of a session (its input and output
// chains) and signs on request, and how a receipt reaches the check
// that waits for it (docs/trust.md).

// chains is one hop session's record of what it took and gave. It keeps
// the hashes' states at every whole block of positions, so that a session
// resumed from a prefix (prefixcache.go) continues the very chains a cold
// run would have: its receipts stay comparable with a check session's.
type chains struct {
	in, out hash.Hash
	outLast [32]byte
	// top and maxAbs summarise the last logits row, on a last hop whose
	// receipts carry it (a tolerance check); nil otherwise.
	top    []consensus.TopLogit
	maxAbs float32
	rows   []byte      // scratch
	pos    int         // rows folded
	marks  []chainMark // marks[i]: the states after (i+1)·prefixBlock rows
}

// chainMark is the chains' hash states at a block boundary.
type chainMark struct{ in, out []byte }

func newChains() chains { return chains{in: sha256.New(), out: sha256.New()} }

// chainsAt continues marks' chains at position n (a whole number of
// blocks they cover); false when they do not.
func chainsAt(marks []chainMark, n int) (chains, bool) {
	c := newChains()
	if n == 0 {
		return c, true
	}
	if n%prefixBlock != 0 || n/prefixBlock > len(marks) {
		return c, false
	}
	m := marks[n/prefixBlock-1]
	if c.in.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.in) != nil ||
		c.out.(encoding.BinaryUnmarshaler).UnmarshalBinary(m.out) != nil {
		return c, false
	}
	c.pos, c.marks = n, slices.Clone(marks[:n/prefixBlock])
	return c, true
}

// add folds one step: its input rows after the skip positions resumed
// from a prefix, and the outputs that go out.
func (c *chains) add(m *Step, skip int, x, logits []float32, last bool) {
	var in []byte
	if m.Hidden == nil {
		for _, t := range m.Tokens[skip:] {
			in = binary.LittleEndian.AppendUint32(in, uint32(t))
		}
	} else {
		in = slices.Clone(c.floats(m.Hidden))
	}
	var out []byte
	if !last {
		out = slices.Clone(c.floats(x))
	}
	n := len(m.Tokens) - skip
	if n <= 0 {
		return
	}
	inRow, outRow := len(in)/n, len(out)/n
	for done := 0; done < n; {
		k := min(n-done, prefixBlock-c.pos%prefixBlock)
		c.in.Write(in[done*inRow : (done+k)*inRow])
		if !last {
			c.out.Write(out[done*outRow : (done+k)*outRow])
		}
		done += k
		c.pos += k
		if c.pos%prefixBlock == 0 && c.pos/prefixBlock == len(c.marks)+1 {
			mi, _ := c.in.(encoding.BinaryMarshaler).MarshalBinary()
			mo, _ := c.out.(encoding.BinaryMarshaler).MarshalBinary()
			c.marks = append(c.marks, chainMark{in: mi, out: mo})
		}
	}
	if last {
		c.outLast = sha256.Sum256(c.floats(logits))
		return
	}
	c.outLast = sha256.Sum256(out[len(out)-outRow:])
}

func (c *chains) floats(v []float32) []byte {
	c.rows = c.rows[:0]
	for _, f := range v {
		c.rows = binary.LittleEndian.AppendUint32(c.rows, math.Float32bits(f))
	}
	return c.rows
}

// outputFault corrupts a step's outputs: the test-only fault injector
// (faultinject.go, build tag faultinject).
type outputFault interface {
	corrupt(w *work, last bool)
}

// engineFault makes a node sign another engine label than its own (the
// fault injector's, test builds only).
type engineFault interface {
	receiptEngine(label string) string
}

// receiptOf is hs's receipt as of now, signed.
func (s *scheduler) receiptOf(hs *hopSession) (*ReceiptMsg, bool) {
	if s.cfg.sign == nil || hs.pos == 0 {
		return nil, false
	}
	r := consensus.Receipt{Signer: s.cfg.self, Session: hs.key.sid, Model: s.cfg.hash, From: hs.key.from, To: hs.to,
		Positions: hs.pos, OutLast: hs.chain.outLast}
	hs.chain.in.Sum(r.InChain[:0])
	hs.chain.out.Sum(r.OutChain[:0])
	if hs.logits && hs.to == s.cfg.model.Layers && len(hs.chain.top) > 0 && len(hs.hist) == hs.pos {
		r.Logits = &consensus.Logits{Engine: s.cfg.engine, Tokens: consensus.TokenHash(hs.hist), MaxAbs: hs.chain.maxAbs,
			Top: slices.Clone(hs.chain.top)}
	}
	if s.cfg.tolerant {
		// Signed, so that a tolerance verdict may accuse this node where it
		// carries no logits (a hop before the last), and never a go node.
		r.Engine = s.cfg.engine
	}
	if f, ok := s.cfg.fault.(engineFault); ok {
		r.Engine = f.receiptEngine(r.Engine)
		if r.Logits != nil {
			r.Logits.Engine = f.receiptEngine(r.Logits.Engine)
		}
	}
	if err := s.cfg.sign(&r); err != nil {
		s.cfg.log.Warn("cannot sign a receipt", zap.Error(err))
		return nil, false
	}
	return &ReceiptMsg{Session: hs.key.sid, Receipt: r}, true
}

func (s *scheduler) sendReceipt(hs *hopSession) {
	if r, ok := s.receiptOf(hs); ok {
		s.out.receipt(hs.entry, r)
	}
}

// onAudit answers the session's entry, and only it, with a receipt.
func (s *scheduler) onAudit(a auditIn) {
	hs := s.sessions[hopKey{a.m.Session, a.m.From}]
	if hs == nil || hs.entry != a.from {
		s.cfg.log.Debug("audit of no session of the asker's", zap.Stringer("session", a.m.Session), zap.Stringer("from", a.from))
		return
	}
	s.sendReceipt(hs)
}

// receiptKey names the receipt an entry waits for.
type receiptKey struct {
	sid  SessionID
	from int
}

type receiptWait struct {
	signer peer.ID
	via    peer.ID // the hop that relays the signer's frame receipt (sigframe.go); "" for none
	ch     chan consensus.Receipt
}

// receipts routes receipts to the checks waiting for them.
type receipts struct {
	mu    sync.Mutex
	waits map[receiptKey]receiptWait
}

func (r *receipts) wait(k receiptKey, signer, via peer.ID) (<-chan consensus.Receipt, func()) {
	ch := make(chan consensus.Receipt, 1)
	r.mu.Lock()
	if r.waits == nil {
		r.waits = map[receiptKey]receiptWait{}
	}
	r.waits[k] = receiptWait{signer: signer, via: via, ch: ch}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.waits, k)
		r.mu.Unlock()
	}
}

// onReceipt takes a receipt that its signer sent itself (the stream is
// authenticated), or that the hop after it relays (a frame receipt,
// sigframe.go), for a check that waits for that signer's.
func (e *entry) onReceipt(from peer.ID, m *ReceiptMsg) {
	r := m.Receipt
	if r.Session != m.Session {
		return
	}
	e.rcpt.mu.Lock()
	w, ok := e.rcpt.waits[receiptKey{m.Session, r.From}]
	e.rcpt.mu.Unlock()
	if !ok || w.signer != r.Signer || (from != w.signer && (w.via == "" || from != w.via)) || r.Verify() != nil {
		return
	}
	select {
	case w.ch <- r:
	default:
	}
}

// receiptSigner signs receipts with the host key; nil without one.
func receiptSigner(key crypto.PrivKey) func(*consensus.Receipt) error {
	if key == nil {
		return nil
	}
	return func(r *consensus.Receipt) error { return r.Sign(key) }
}
