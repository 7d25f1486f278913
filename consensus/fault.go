package consensus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Faults: a member that computed a wrong answer is evicted on evidence
// that the leader (and every member folding the log) checks itself. The
// evidence is three signed receipts from three distinct holders of the
// same layer range for the same input history: the accused's, and two
// that agree with each other and not with it. A receipt is a holder's
// signed claim "fed this input history, layers [From, To) produced these
// outputs"; the engine is bit-deterministic, so two honest holders can
// never sign different outputs for the same input chain. Nobody can make
// an honest node sign a wrong claim, and nobody can sign for another
// node, so the evidence cannot be forged against an honest node unless
// two of the three signers collude.

// ErrBadEvidence: fault evidence that does not prove a fault (a bad
// signature, receipts that do not match, no majority). The accuser is
// not believed.
var ErrBadEvidence = errors.New("consensus: fault evidence does not prove a fault")

// ErrBanned: the node was evicted for a fault and may not rejoin yet.
var ErrBanned = errors.New("consensus: node is banned")

// receiptDomain separates receipt signatures from anything else a host
// key signs.
const receiptDomain = "strata/receipt/1\x00"

// MaxReceiptSize bounds one encoded receipt (a signature included).
const MaxReceiptSize = 1024

// Receipt is a holder's signed claim about its work for one session:
// fed InChain (a running SHA-256 over every input row it took: token IDs
// on the first layer, hidden states after), its layers produced OutChain
// (a running SHA-256 over every hidden-state row it emitted; the empty
// hash on the last layer, which emits logits) and OutLast (SHA-256 of
// the output of the last position: the hidden row, or the logits on the
// last layer).
type Receipt struct {
	Signer    peer.ID
	Session   [16]byte
	Model     uint64
	From, To  int
	Positions int // rows folded into the chains
	InChain   [32]byte
	OutChain  [32]byte
	OutLast   [32]byte
	// Logits, on a last stage's receipt when asked for (tolerance.go):
	// the last logits row summarised, signed with the rest. Nil otherwise.
	Logits *Logits
	// Engine, on a receipt of a node whose engine is not bit-reproducible,
	// names it (signed): what lets a tolerance verdict accuse a hop that
	// carries no logits (tolerance.go, the mid-path kind). "" otherwise.
	Engine string
	Sig    []byte
}

// signedBytes is what the signature covers: everything but itself.
func (r Receipt) signedBytes() []byte {
	b := append([]byte(receiptDomain), r.Signer...)
	b = append(b, 0)
	b = append(b, r.Session[:]...)
	b = binary.BigEndian.AppendUint64(b, r.Model)
	b = binary.BigEndian.AppendUint32(b, uint32(r.From))
	b = binary.BigEndian.AppendUint32(b, uint32(r.To))
	b = binary.BigEndian.AppendUint32(b, uint32(r.Positions))
	b = append(b, r.InChain[:]...)
	b = append(b, r.OutChain[:]...)
	b = append(b, r.OutLast[:]...)
	if r.Logits != nil {
		// After the fixed-size fields, so a receipt without logits signs
		// the very bytes it signed before they existed.
		b = append(b, 1)
		b = appendLogits(b, r.Logits)
	}
	if r.Engine != "" {
		b = append(b, 2)
		b = appendStr(b, r.Engine)
	}
	return b
}

// Sign signs r with the signer's host key; r.Signer must be its peer ID.
func (r *Receipt) Sign(key crypto.PrivKey) error {
	if !r.Signer.MatchesPrivateKey(key) {
		return fmt.Errorf("%w: key is not %s's", ErrBadEvidence, r.Signer)
	}
	sig, err := key.Sign(r.signedBytes())
	if err != nil {
		return err
	}
	r.Sig = sig
	return nil
}

// Verify checks the signature against the public key the signer's peer
// ID embeds (Ed25519 and other inlined keys; hashed RSA IDs cannot be
// checked and are refused).
func (r Receipt) Verify() error {
	pub, err := r.Signer.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: no public key in %s: %w", ErrBadEvidence, r.Signer, err)
	}
	ok, err := pub.Verify(r.signedBytes(), r.Sig)
	if err != nil || !ok {
		return fmt.Errorf("%w: bad signature by %s", ErrBadEvidence, r.Signer)
	}
	return nil
}

// SameInput reports whether two receipts cover the same work: the same
// model, range, positions and input chain.
func (r Receipt) SameInput(o Receipt) bool {
	return r.Model == o.Model && r.From == o.From && r.To == o.To && r.Positions == o.Positions && r.InChain == o.InChain
}

// SameOutput reports whether two receipts claim the same outputs.
func (r Receipt) SameOutput(o Receipt) bool {
	return r.OutChain == o.OutChain && r.OutLast == o.OutLast
}

// MarshalBinary encodes a receipt: a length-prefixed signer, the
// session, then the numbers as uvarints, the three hashes and the
// length-prefixed signature; then, only when it has logits, a byte 1
// and the logits summary (older receipts end at the signature).
func (r Receipt) MarshalBinary() ([]byte, error) {
	if r.From < 0 || r.To <= r.From || r.Positions <= 0 || r.Positions > math.MaxUint32 || r.To > math.MaxUint32 {
		return nil, fmt.Errorf("%w: receipt range [%d, %d) over %d positions", ErrBadEvent, r.From, r.To, r.Positions)
	}
	b := appendStr(nil, string(r.Signer))
	b = append(b, r.Session[:]...)
	b = binary.AppendUvarint(b, r.Model)
	b = binary.AppendUvarint(b, uint64(r.From))
	b = binary.AppendUvarint(b, uint64(r.To))
	b = binary.AppendUvarint(b, uint64(r.Positions))
	b = append(b, r.InChain[:]...)
	b = append(b, r.OutChain[:]...)
	b = append(b, r.OutLast[:]...)
	b = appendBytes(b, r.Sig)
	if r.Logits != nil {
		if err := r.Logits.valid(); err != nil {
			return nil, fmt.Errorf("%w: receipt logits: %v", ErrBadEvent, err)
		}
		b = append(b, 1)
		b = appendLogits(b, r.Logits)
	}
	if r.Engine != "" {
		if len(r.Engine) > maxEngineLen || !utf8.ValidString(r.Engine) {
			return nil, fmt.Errorf("%w: receipt engine label of %d bytes", ErrBadEvent, len(r.Engine))
		}
		b = append(b, 2)
		b = appendStr(b, r.Engine)
	}
	if len(b) > MaxReceiptSize {
		return nil, fmt.Errorf("%w: receipt of %d bytes", ErrBadEvent, len(b))
	}
	return b, nil
}

// UnmarshalBinary decodes what MarshalBinary wrote; malformed input
// gives an error wrapping ErrBadEvent.
func (r *Receipt) UnmarshalBinary(b []byte) error {
	if len(b) > MaxReceiptSize {
		return fmt.Errorf("%w: receipt of %d bytes", ErrBadEvent, len(b))
	}
	d := newDecoder(b, ErrBadEvent)
	out := d.receipt()
	d.End()
	if d.Err() != nil {
		return d.Err()
	}
	*r = out
	return nil
}

func (d decoder) receipt() Receipt {
	var r Receipt
	id := d.bytes("signer", 64)
	if d.Err() == nil {
		p, err := peer.IDFromBytes(id)
		if err != nil {
			d.Fail("signer: %v", err)
			return r
		}
		r.Signer = p
	}
	copy(r.Session[:], d.Take(16, "session"))
	r.Model = d.Uvarint("model", math.MaxUint64)
	r.From = int(d.Uvarint("from", math.MaxUint32))
	r.To = int(d.Uvarint("to", math.MaxUint32))
	r.Positions = int(d.Uvarint("positions", math.MaxUint32))
	copy(r.InChain[:], d.Take(32, "input chain"))
	copy(r.OutChain[:], d.Take(32, "output chain"))
	copy(r.OutLast[:], d.Take(32, "last output"))
	r.Sig = bytes.Clone(d.bytes("signature", 512))
	// Optional sections, in order: 1 logits, 2 engine label.
	last := uint8(0)
	for d.Err() == nil && d.Len() > 0 {
		tag := d.U8("receipt section")
		switch {
		case d.Err() != nil:
		case tag <= last || tag > 2:
			d.Fail("receipt section %d", tag)
		case tag == 1:
			r.Logits = d.logits()
		case tag == 2:
			r.Engine = d.str("engine", maxEngineLen)
			if d.Err() == nil && (r.Engine == "" || !utf8.ValidString(r.Engine)) {
				d.Fail("receipt engine label %q", r.Engine)
			}
		}
		last = tag
	}
	if d.Err() == nil && (r.To <= r.From || r.Positions == 0) {
		d.Fail("receipt range [%d, %d) over %d positions", r.From, r.To, r.Positions)
	}
	return r
}

// Evidence accuses Receipts[0]'s signer: Receipts[1] and [2], from two
// other holders, were fed the same input and agree with each other and
// not with it. Either witness may be a chain of holders that together
// cover the accused's layers (when no single other holder exists):
// Chain holds the second witness's earlier links in layer order, each
// fed what the one before emitted, and Receipts[2] is its last;
// FirstChain does the same for the first witness, whose last link is
// Receipts[1]. Every signer, links included, is a distinct node, so two
// witnesses outvote the accused only if they share no node.
//
// Tolerance marks evidence of the tolerance kind (tolerance.go): the
// receipts' logits, not their hashes, disagree beyond LogitsTolerance;
// a judgement that bans for a shorter time.
//
// Tails, on tolerance evidence against a hop that is not the last one
// (the mid-path kind), holds for each of the three Receipts the last
// hop's logits receipt of the same check session: Receipts are then the
// three holders' receipts of the checked layers, run in turn between the
// same upstream and downstream hops, and the logits compared are the
// tails'. Nil otherwise.
type Evidence struct {
	Receipts   [3]Receipt
	Chain      []Receipt
	FirstChain []Receipt
	Tolerance  bool
	Tails      []Receipt
}

// MaxChain bounds the earlier links of a chained witness.
const MaxChain = 3

// Check verifies the evidence and returns the accused. It is a pure
// function of the evidence (signatures included), so every member that
// folds a NodeFaulted record reaches the same verdict.
func (e Evidence) Check() (peer.ID, error) {
	if e.Tolerance && len(e.FirstChain) != 0 {
		return "", fmt.Errorf("%w: a tolerance verdict takes single witnesses", ErrBadEvidence)
	}
	if e.Tolerance && e.Tails != nil {
		return e.checkToleranceMid()
	}
	if e.Tolerance {
		return e.checkTolerance()
	}
	if e.Tails != nil {
		return "", fmt.Errorf("%w: tails on exact evidence", ErrBadEvidence)
	}
	rs := e.Receipts
	if n := max(len(e.Chain), len(e.FirstChain)); n > MaxChain {
		return "", fmt.Errorf("%w: a witness chain of %d links", ErrBadEvidence, n+1)
	}
	all := append(append(append([]Receipt(nil), rs[:]...), e.Chain...), e.FirstChain...)
	for i, r := range all {
		for _, o := range all[:i] {
			if o.Signer == r.Signer {
				return "", fmt.Errorf("%w: %s signs twice; the accused and the witnesses must be distinct", ErrBadEvidence, r.Signer)
			}
		}
		if err := r.Verify(); err != nil {
			return "", fmt.Errorf("receipt %d: %w", i, err)
		}
	}
	if err := witness(rs[0], e.FirstChain, rs[1]); err != nil {
		return "", fmt.Errorf("the first witness: %w", err)
	}
	if err := witness(rs[0], e.Chain, rs[2]); err != nil {
		return "", fmt.Errorf("the second witness: %w", err)
	}
	if !rs[1].SameOutput(rs[2]) {
		return "", fmt.Errorf("%w: the witnesses disagree with each other", ErrBadEvidence)
	}
	if rs[0].SameOutput(rs[1]) {
		return "", fmt.Errorf("%w: the accused agrees with the witnesses", ErrBadEvidence)
	}
	return rs[0].Signer, nil
}

// witness checks one witness of a's work, link by link (earlier, then
// last): it starts where the accused started, on the same input, each
// link takes what the one before it gave, and it ends where the accused
// ended. A single holder is a chain of one link.
func witness(a Receipt, earlier []Receipt, last Receipt) error {
	links := append(append([]Receipt(nil), earlier...), last)
	for k, l := range links {
		ok := l.Model == a.Model && l.Positions == a.Positions
		if k == 0 {
			ok = ok && l.From == a.From && l.InChain == a.InChain
		} else {
			ok = ok && l.From == links[k-1].To && l.InChain == links[k-1].OutChain
		}
		if !ok {
			return fmt.Errorf("%w: link %d does not continue the accused's input", ErrBadEvidence, k)
		}
	}
	if last.To != a.To {
		return fmt.Errorf("%w: it ends at layer %d, the accused at %d", ErrBadEvidence, last.To, a.To)
	}
	return nil
}

// NodeFaulted: a member was proven to compute wrong answers. It is
// removed from the members (the leader repairs the map as after a death)
// and may not rejoin before Until.
type NodeFaulted struct {
	Node     string
	Accuser  string
	Until    time.Time
	Evidence Evidence
}

// KindNodeFaulted is NodeFaulted's kind.
const KindNodeFaulted Kind = 8

// Kind implements Event.
func (NodeFaulted) Kind() Kind { return KindNodeFaulted }

func (e NodeFaulted) appendTo(b []byte) []byte {
	b = appendStr(b, e.Node)
	b = appendStr(b, e.Accuser)
	b = binary.AppendVarint(b, unixNano(e.Until))
	appendReceipt := func(b []byte, r Receipt) []byte {
		rb, err := r.MarshalBinary()
		if err != nil {
			rb = nil // an empty receipt fails to decode: MarshalRecord reports it
		}
		return appendBytes(b, rb)
	}
	for _, r := range e.Evidence.Receipts {
		b = appendReceipt(b, r)
	}
	n := uint64(len(e.Evidence.Chain))
	if len(e.Evidence.FirstChain) > 0 && !e.Evidence.Tolerance {
		// Two chained witnesses: both chains follow, each with its count.
		b = binary.AppendUvarint(b, evidenceTwoChains)
		for _, c := range [][]Receipt{e.Evidence.FirstChain, e.Evidence.Chain} {
			b = binary.AppendUvarint(b, uint64(len(c)))
			for _, r := range c {
				b = appendReceipt(b, r)
			}
		}
		return b
	}
	if e.Evidence.Tolerance {
		// Tolerance evidence has no chain: its count field says the kind,
		// and exact evidence encodes as before.
		n = evidenceTolerance
		if e.Evidence.Tails != nil {
			n = evidenceToleranceMid
		}
	}
	b = binary.AppendUvarint(b, n)
	for _, r := range e.Evidence.Chain {
		b = appendReceipt(b, r)
	}
	if n == evidenceToleranceMid {
		for _, r := range e.Evidence.Tails {
			b = appendReceipt(b, r)
		}
	}
	return b
}

// evidenceTolerance, in the witness chain's count field, marks evidence
// of the tolerance kind (which has no chain).
const evidenceTolerance = 64

// evidenceToleranceMid marks tolerance evidence against a hop before the
// last (three tail receipts follow). Nodes older than it refuse the
// record as a witness chain too long, rather than misread it.
const evidenceToleranceMid = 65

// evidenceTwoChains marks exact evidence whose two witnesses are both
// chains (Evidence.FirstChain): two counted chains follow. Older nodes
// refuse it as a witness chain too long.
const evidenceTwoChains = 66

func decodeNodeFaulted(d decoder) NodeFaulted {
	e := NodeFaulted{Node: d.id("node"), Accuser: d.id("accuser")}
	e.Until = d.time("until")
	receipt := func(r *Receipt) bool {
		rb := d.bytes("receipt", MaxReceiptSize)
		if d.Err() != nil {
			return false
		}
		if err := r.UnmarshalBinary(rb); err != nil {
			d.Fail("receipt: %v", err)
			return false
		}
		return true
	}
	for i := range e.Evidence.Receipts {
		if !receipt(&e.Evidence.Receipts[i]) {
			return e
		}
	}
	chain := func(n uint64) []Receipt {
		var c []Receipt
		for range n {
			var r Receipt
			if !receipt(&r) {
				return c
			}
			c = append(c, r)
		}
		return c
	}
	n := d.Uvarint("witness chain", evidenceTwoChains)
	switch {
	case n == evidenceTwoChains:
		n1 := d.Uvarint("first witness chain", MaxChain)
		if e.Evidence.FirstChain = chain(n1); d.Err() != nil {
			return e
		}
		if n1 == 0 && d.Err() == nil {
			d.Fail("two chained witnesses with an empty first chain")
			return e
		}
		n = d.Uvarint("witness chain", MaxChain)
	case n == evidenceToleranceMid:
		e.Evidence.Tolerance, n = true, 0
		e.Evidence.Tails = make([]Receipt, 3)
		for i := range e.Evidence.Tails {
			if !receipt(&e.Evidence.Tails[i]) {
				return e
			}
		}
	case n == evidenceTolerance:
		e.Evidence.Tolerance, n = true, 0
	case n > MaxChain && d.Err() == nil:
		d.Fail("witness chain of %d links", n)
	}
	e.Evidence.Chain = chain(n)
	return e
}

// Banned reports whether node is banned at t, and until when.
func (s State) Banned(node string, t time.Time) (time.Time, bool) {
	until, ok := s.bans[node]
	return until, ok && t.Before(until)
}

// Bans returns every ban, expired ones included, by node ID.
func (s State) Bans() map[string]time.Time { return maps.Clone(s.bans) }

func (f fold) nodeFaulted(at time.Time, e NodeFaulted) error {
	s := f.s
	accused, err := e.Evidence.Check()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if accused.String() != e.Node {
		return fmt.Errorf("%w: the evidence accuses %s, not %s", ErrRejected, accused, e.Node)
	}
	if e.Accuser == e.Node {
		return fmt.Errorf("%w: %s accuses itself", ErrRejected, e.Node)
	}
	if until, banned := s.Banned(e.Node, at); banned && !e.Until.After(until) {
		return fmt.Errorf("%w: %s is already banned until %v", ErrStale, e.Node, until)
	}
	bans := maps.Clone(s.bans)
	if bans == nil {
		bans = map[string]time.Time{}
	}
	// Expired bans are dropped here, so that the list stays bounded by
	// the faults of one ban period.
	for id, until := range bans {
		if !at.Before(until) {
			delete(bans, id)
		}
	}
	bans[e.Node] = e.Until
	s.bans = bans
	if _, ok := s.members[e.Node]; ok {
		ms := maps.Clone(s.members)
		delete(ms, e.Node)
		s.members = ms
	}
	return nil
}

func appendBans(b []byte, bans map[string]time.Time) []byte {
	ids := slices.Sorted(maps.Keys(bans))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = appendStr(b, id)
		b = binary.AppendVarint(b, unixNano(bans[id]))
	}
	return b
}

func (d decoder) bans() map[string]time.Time {
	n := d.count("bans", MaxMembers, 3)
	if n == 0 {
		return nil
	}
	out := make(map[string]time.Time, n)
	prev := ""
	for range n {
		id := d.id("banned node")
		until := d.time("banned until")
		if d.Err() != nil {
			return nil
		}
		if id <= prev {
			d.Fail("bans out of order at %q", id)
			return nil
		}
		prev = id
		out[id] = until
	}
	return out
}

// faultReport handles a member's accusation on the leader: the evidence
// is checked here before anything is appended, so forged evidence costs
// one refusal and no log entry.
func (l *leader) faultReport(e NodeFaulted) error {
	accused, err := e.Evidence.Check()
	if err != nil {
		l.log.Warnw("fault report refused", "accuser", e.Accuser, "accused", e.Node, "error", err)
		return err
	}
	if accused.String() != e.Node {
		return fmt.Errorf("%w: the evidence accuses %s, not %s", ErrBadEvidence, accused, e.Node)
	}
	now := time.Now()
	if _, banned := l.fsm.current().Banned(e.Node, now); banned {
		return nil // another entry proved it first
	}
	ban := l.cfg.banFor
	if e.Evidence.Tolerance {
		ban /= ToleranceBanDivisor
	}
	e.Until = now.Add(ban)
	if err := l.rn.apply(e); err != nil {
		return err
	}
	l.log.Warnw("node evicted for a fault", "node", e.Node, "accuser", e.Accuser, "until", e.Until)
	kick(l.kickL)
	return nil
}

// ReportFault accuses the signer of ev.Receipts[0] of a wrong answer.
// The leader checks the evidence and, when it proves the fault, appends
// NodeFaulted: the node leaves the map (a repair follows) and is banned.
// Refused evidence gives an error wrapping ErrBadEvidence.
func (c *Consensus) ReportFault(ctx context.Context, ev Evidence) error {
	accused, err := ev.Check()
	if err != nil {
		return err
	}
	return c.ctl.request(ctx, NodeFaulted{Node: accused.String(), Accuser: c.id.String(), Evidence: ev})
}
