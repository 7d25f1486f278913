package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/node/trust"
)

// Signed hops (docs/trust.md). Every frame of hidden states a hop sends
// carries its signature over the consensus.Receipt it would sign for the
// session at the end of that step, with the output chain and last output
// of the rows actually on the wire: (signer, session, model, its layers,
// positions so far, its input chain, the running SHA-256 of every row it
// sent, the hash of the last one). The receiver folds the rows into its
// own input chain, which for an honest sender on the float32 wire is the
// sender's output chain, rebuilds that receipt with the signer taken
// from the authenticated stream, and checks the signature before it
// computes anything: a frame whose signature does not verify is refused
// (ErrFrameSignature) and reported as its sender's fault. The receiver
// keeps the latest verified receipt; a spot check of a hop that has a
// next hop takes the hop's receipt from there (UpAudit), so the evidence
// rests on what the hop sent, in its own signature, not on what it says
// it computed. A hop cannot sign one thing and send another, and nobody
// can present a frame an honest node did not send.
//
// Signatures never touch the activations: they travel beside them.
// Frames on the float16 wire are not signed (the rows on the wire are
// rounded, so no receipt over them is comparable with a checker's), and
// neither are tokens sent back to the entry.

// Frame signature errors: both wrap ErrBadFrame.
var (
	// ErrFrameSignature: a frame's signature does not verify against the
	// sender's peer ID and the rows received.
	ErrFrameSignature = fmt.Errorf("%w: the frame's signature does not verify", ErrBadFrame)
	// ErrUnsignedFrame: a float32 frame of hidden states came unsigned
	// to a node that requires signed hops.
	ErrUnsignedFrame = fmt.Errorf("%w: unsigned frame of hidden states", ErrBadFrame)
)

// sentLie is what a faulty hop sends instead of what it computed, and
// its own chains over it (the fault injector's; see sendFault).
type sentLie struct {
	rows  []float32
	chain [32]byte // the output chain over everything sent so far
}

// sendFault makes a hop send rows other than those it computed and
// recorded: the test-only fault injector (faultinject.go). It is called
// before the step's rows are folded into the hop's chains.
type sendFault interface {
	lieSent(w *work, hs *hopSession) *sentLie
}

// signing reports whether this hop signs what it sends and requires
// signed frames from others.
func (s *scheduler) signing() bool {
	return s.signFrames.Load() && s.cfg.sign != nil && !s.cfg.wireLossy
}

// signFrame signs hs's receipt as of now over what it sends: its output
// chain, or a lie's.
func (s *scheduler) signFrame(hs *hopSession, lie *sentLie) *FrameSig {
	var rows []float32
	var chain [32]byte
	if lie != nil {
		rows, chain = lie.rows, lie.chain
	}
	r := hs.chain.FrameReceipt(s.cfg.self, hs.key.sid, s.cfg.hash, hs.key.from, hs.to, hs.pos, rows, chain, s.cfg.model.Hidden)
	if err := s.cfg.sign(&r); err != nil {
		s.cfg.log.Warn("cannot sign a frame", zap.Error(err))
		return nil
	}
	return &FrameSig{From: r.From, InChain: r.InChain, Sig: r.Sig}
}

// checkFrame checks a step's signature before it is computed, and keeps
// the receipt it proves as hs's latest from upstream.
func (s *scheduler) checkFrame(in *stepIn, hs *hopSession) error {
	m := in.m
	if m.Sig == nil {
		if m.Hidden != nil && (m.DType == 0 || m.DType == DTypeF32) && in.from != s.cfg.self && s.signing() {
			return ErrUnsignedFrame
		}
		return nil
	}
	if m.Hidden == nil || m.Sig.From >= hs.key.from {
		return fmt.Errorf("%w: a signature from layer %d on a frame for layer %d", ErrFrameSignature, m.Sig.From, hs.key.from)
	}
	r := consensus.Receipt{Signer: in.from, Session: m.Session, Model: s.cfg.hash, From: m.Sig.From, To: hs.key.from,
		Positions: m.Pos + len(m.Tokens), InChain: m.Sig.InChain, Sig: m.Sig.Sig}
	// Checked against what this hop's input chain will be once it folds
	// the rows: the sender's output chain, if it signed what it sent.
	r, err := hs.chain.VerifyFrame(r, m.Hidden, m.Cols)
	if errors.Is(err, trust.ErrSignature) {
		return fmt.Errorf("%w: sender %s, positions %d..%d", ErrFrameSignature, shortID(in.from), m.Pos, r.Positions)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFrameSignature, err)
	}
	hs.up = r
	return nil
}

// onUpAudit answers the session's entry, and only it, with the receipt
// its upstream signed over the last frame it sent here.
func (s *scheduler) onUpAudit(a upAuditIn) {
	hs := s.sessions[hopKey{a.m.Session, a.m.From}]
	if hs == nil || hs.entry != a.from || hs.up.Sig == nil {
		s.cfg.log.Debug("upstream audit of no signed session of the asker's", zap.Stringer("session", a.m.Session),
			zap.Stringer("from", a.from))
		return
	}
	s.out.receipt(hs.entry, &ReceiptMsg{Session: hs.key.sid, Receipt: hs.up})
}

// upAuditIn asks for the receipt a session's upstream signed.
type upAuditIn struct {
	from peer.ID
	m    *UpAudit
}

func (upAuditIn) inbox() {}

// askSent asks for hop i's receipt over what it sent: from the next hop,
// which checked the hop's signature on every frame, when frames are
// signed and there is one (the last hop sends tokens, which are not
// signed: it is asked itself, as then are all hops on unsigned swarms).
func (e *entry) askSent(ctx context.Context, sid SessionID, hops []Hop, i int, areg *attemptReg) (consensus.Receipt, error) {
	x := hops[i]
	if !e.cfg.signedFrames || i+1 >= len(hops) {
		return e.askReceipt(ctx, sid, x, areg)
	}
	y := hops[i+1]
	return e.askVia(ctx, sid, x, y.Peer, &UpAudit{Session: sid, From: y.From}, areg)
}
