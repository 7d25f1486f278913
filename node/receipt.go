package node

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
)

// Receipts: a hop signs its session's chains (trust.Chains) on request,
// and the entry hands a receipt on to the check that waits for it
// (trust.Receipts). See docs/trust.md.

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
	r := hs.chain.Receipt(s.cfg.self, hs.key.sid, s.cfg.hash, hs.key.from, hs.to, hs.pos)
	if hs.logits && hs.to == s.cfg.model.Layers && len(hs.hist) == hs.pos {
		r.Logits = hs.chain.Logits(s.cfg.engine, hs.hist)
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

// onReceipt takes a receipt that its signer sent itself (the stream is
// authenticated), or that the hop after it relays (a frame receipt,
// sigframe.go), for a check that waits for that signer's.
func (e *entry) onReceipt(from peer.ID, m *ReceiptMsg) {
	e.rcpt.Deliver(from, m.Session, m.Receipt)
}
