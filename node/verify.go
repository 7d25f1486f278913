package node

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	ecore "github.com/stratanet/strata/node/entry"
	"github.com/stratanet/strata/node/trust"
)

// Spot checks (see docs/trust.md). Every hop keeps, per session, two
// running SHA-256 chains: over every input row it took (token IDs on the
// first layer, hidden states after) and over every hidden row it emitted,
// plus the hash of its last output (the logits on the last layer). The
// engine is bit-deterministic and a prefill of n positions equals n
// decode steps, so any holder of the same layers, fed the same inputs
// from position 0 in one stateless prefill, must end with the same
// chains. At a token boundary, with probability verify-rate, the entry
// asks one hop X of the path for its signed receipt, then runs a check
// session: the session's tokens so far through the same upstream hops
// and a second holder V of X's layers, whose signed receipt comes back
// instead of a token. Same input chain and same outputs: X's work so far
// is verified. Different outputs: a third holder W breaks the tie, and
// the three signed receipts go to the leader as evidence against the odd
// one out (consensus.Evidence), who is evicted and banned. The session
// replays without it from the last verified point; tokens already sent
// are compared with the replay's, and a difference ends the generation
// with ErrWrongTokens rather than leaving wrong text standing.
//
// A last hop on an engine that is not bit-reproducible (ggml) is checked
// by tolerance instead (tolAudit): its receipt carries a signed summary
// of its last logits row, compared with a checker's within
// consensus.LogitsTolerance. Such a node before the last hop is checked
// by tolerance too (midAudit): the last hop's logits after it are
// compared with those after a second holder of its layers.

// ErrWrongTokens: tokens already delivered were computed by a node later
// proven faulty, and the replay without it produced different ones.
var ErrWrongTokens = errors.New("node: tokens already sent were wrong (a faulty node was evicted)")

// DefaultVerifyRate is the share of token boundaries at which an entry
// spot-checks one hop.
const DefaultVerifyRate = 0.01

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

// VerifyStats are an entry's spot-check counts.
type VerifyStats struct {
	// Rate is the share of token boundaries the entry checks now; the
	// swarm's replicated rate is SwarmRate, when HasSwarmRate.
	Rate         float64
	SwarmRate    float64
	HasSwarmRate bool
	Audits       uint64 // spot checks started
	Verified     uint64 // checks whose outputs agreed
	Positions    uint64 // positions covered by the agreeing checks
	Inconclusive uint64 // no receipt, no check answer, or other inputs
	Mismatches   uint64 // checks whose outputs differed
	Reported     uint64 // faults reported to the leader and accepted
	Unresolved   uint64 // mismatches no third holder could settle
	// Tolerance counts the conclusive tolerance checks (of hops on other
	// engines, by logits), ToleranceMismatches those beyond
	// consensus.LogitsTolerance, and MaxAgreeingDelta the largest relative
	// difference (max |Δlogit| / max |logit|) among the agreeing ones.
	Tolerance           uint64
	ToleranceMismatches uint64
	MaxAgreeingDelta    float64
	// Checked is the positions covered by conclusive checks (agreeing or
	// not): the steps verified.
	Checked uint64
	// FirstMismatch is when a check first found different outputs (zero:
	// never), and CheckedAtFirstMismatch the positions Checked held then,
	// that check's included: the steps verified until detection.
	FirstMismatch          time.Time
	CheckedAtFirstMismatch uint64
	// Log is every conclusive check up to the first mismatch, in order
	// (at most maxCheckLog): the raw record from which a swarm-wide
	// "steps until detection" is summed over entries.
	Log []CheckRecord
}

// CheckRecord is one conclusive spot check of Hop's work, compared with
// Checker's answer: a check covers the checker's work on those positions
// too (a lying single checker is caught by a third opinion).
type CheckRecord struct {
	At        time.Time
	Hop       peer.ID
	Checker   peer.ID
	Session   SessionID // positions re-checked in one session are the same steps
	Positions int
	// Steps are the forward steps of the checked hop's work that the
	// check covered: the prompt's prefill and each decode step after it
	// (a fault injector's "1 output in N" counts these).
	Steps    int
	Mismatch bool
	// Tolerance: a check of a hop on another engine by logits (its own
	// on the last hop, the last hop's after it otherwise), not hashes; it
	// covers the last position only.
	Tolerance bool
	// Links is how many nodes the checker is: 1 for a single holder, more
	// for a chain that covers the hop's layers together (Checker is then
	// its last link).
	Links int
}

// maxCheckLog bounds VerifyStats.Log: a swarm with no liar checks
// forever, and past a few thousand checks the log says nothing new.
const maxCheckLog = 4096

type verifyCounters struct {
	audits, verified, positions, inconclusive, mismatches, reported, unresolved, checked atomic.Uint64

	mu            sync.Mutex
	tolerance     uint64
	tolMismatches uint64
	maxAgreeing   float64
	firstMismatch time.Time
	checkedAt     uint64
	log           []CheckRecord
}

// conclusive counts a check of hop's positions against checker's that
// agreed or, mismatch, did not, at now.
func (c *verifyCounters) conclusive(now time.Time, sid SessionID, hop, checker peer.ID, positions, steps int, mismatch, tol bool, links int) {
	if mismatch {
		c.mismatches.Add(1)
	} else {
		c.verified.Add(1)
		c.positions.Add(uint64(positions))
	}
	n := c.checked.Add(uint64(positions))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.firstMismatch.IsZero() {
		return
	}
	if len(c.log) < maxCheckLog {
		c.log = append(c.log, CheckRecord{At: now, Hop: hop, Checker: checker, Session: sid, Positions: positions, Steps: steps, Mismatch: mismatch,
			Tolerance: tol, Links: links})
	}
	if mismatch {
		c.firstMismatch, c.checkedAt = now, n
	}
}

// toleranceSeen counts a conclusive tolerance check whose relative
// difference was rel.
func (c *verifyCounters) toleranceSeen(rel float64, mismatch bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tolerance++
	if mismatch {
		c.tolMismatches++
	} else {
		c.maxAgreeing = max(c.maxAgreeing, rel)
	}
}

func (c *verifyCounters) stats() VerifyStats {
	s := VerifyStats{Audits: c.audits.Load(), Verified: c.verified.Load(), Positions: c.positions.Load(),
		Inconclusive: c.inconclusive.Load(), Mismatches: c.mismatches.Load(), Reported: c.reported.Load(),
		Unresolved: c.unresolved.Load(), Checked: c.checked.Load()}
	c.mu.Lock()
	s.FirstMismatch, s.CheckedAtFirstMismatch, s.Log = c.firstMismatch, c.checkedAt, slices.Clone(c.log)
	s.Tolerance, s.ToleranceMismatches, s.MaxAgreeingDelta = c.tolerance, c.tolMismatches, c.maxAgreeing
	c.mu.Unlock()
	return s
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

// verifyRate is the entry's rate now: its own when set (an explicit
// --verify-rate), else the swarm's replicated one, else the default.
func (e *entry) verifyRate() float64 {
	if e.cfg.verifyRate >= 0 {
		return e.cfg.verifyRate
	}
	if e.swarmRate != nil {
		if r, ok := e.swarmRate(); ok {
			return r
		}
	}
	return DefaultVerifyRate
}

// shouldAudit draws whether this token boundary gets a spot check.
func (e *entry) shouldAudit() bool {
	return ecore.ShouldAudit(e.verifyRate(), e.holders != nil, rand.Float64())
}

// errInconclusive: a check that proves nothing either way;
// errAttemptFailing: one cut short because the session's attempt fails.
var (
	errInconclusive   = errors.New("check inconclusive")
	errAttemptFailing = fmt.Errorf("%w: the session's attempt is failing", errInconclusive)
)

// audit spot-checks one hop of the attempt's path at a token boundary;
// the attempt started at start tokens.
// It returns an attempt end when the attempt must stop (a hop proven or
// suspected faulty), nil otherwise.
func (g *generation) audit(ctx context.Context, sid SessionID, areg *attemptReg, start int) *attemptEnd {
	hops := areg.hops
	e := g.e
	// The hops with a second holder; the entry does not check itself.
	// Only a bit-reproducible hop, fed by bit-reproducible hops, can be
	// checked: the check session reruns its upstream cold.
	var cand []int
	for i, h := range hops {
		if !e.reproducible(h.Peer) {
			break
		}
		if h.Peer != e.cfg.self && len(g.checkers(hops, i, 1)) > 0 {
			cand = append(cand, i)
		}
	}
	// A last hop on another engine is checked by tolerance on its logits
	// (tolerance.go in consensus), whatever engines feed it.
	tol := len(hops) - 1
	if x := hops[tol]; x.Peer == e.cfg.self || x.To != e.cfg.model.info.Layers || e.reproducible(x.Peer) ||
		len(g.tolCheckers(hops, tol)) == 0 {
		tol = -1
	} else {
		cand = append(cand, tol)
	}
	// A hop before the last on another engine (or one not heard yet) is
	// checked by tolerance too, on the last hop's logits through the same
	// downstream (midAudit): an engine label opts no hop out of checks.
	var mid []int
	if hops[len(hops)-1].To == e.cfg.model.info.Layers {
		for i, h := range hops[:len(hops)-1] {
			if h.Peer != e.cfg.self && !e.reproducible(h.Peer) && len(g.midCheckers(hops, i)) > 0 {
				mid = append(mid, i)
			}
		}
	}
	cand = append(cand, mid...)
	if len(cand) == 0 {
		return nil
	}
	e.vc.audits.Add(1)
	i := pickAudit(hops, cand, e.work.unverified, rand.IntN)
	if i == tol {
		return g.tolAudit(ctx, sid, areg, i)
	}
	if slices.Contains(mid, i) {
		return g.midAudit(ctx, sid, areg, i)
	}
	x := hops[i]
	rx, err := e.askSent(ctx, sid, hops, i, areg)
	if err != nil {
		e.vc.inconclusive.Add(1)
		e.cfg.log.Debug("spot check: no receipt", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	all := append(slices.Clone(g.prompt), g.out...)
	if rx.Positions > len(all) || rx.From != x.From || rx.To != x.To {
		e.vc.inconclusive.Add(1)
		return nil
	}
	tokens := all[:rx.Positions]
	steps := max(rx.Positions-len(g.prompt), 0) + 1 // the prefill, then one per decode step
	// Checkers: single second holders, else chains that cover the layers
	// together (trust.Checkers); each re-runs X's input cold.
	alts := g.checkers(hops, i, maxCheckers)
	run := func(links []Hop) ([]consensus.Receipt, error) {
		return e.checkRun(ctx, g, hops[:i], links, tokens, rx, areg, false)
	}
	rvs, v, end, err := firstCheck(ctx, alts, run)
	if v < 0 {
		if end == nil && !errors.Is(err, errAttemptFailing) {
			e.vc.inconclusive.Add(1)
			e.cfg.log.Debug("spot check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		}
		return end
	}
	ch := alts[v]
	rv, checker := rvs[len(rvs)-1], ch[len(ch)-1].Peer
	if rv.SameOutput(rx) {
		e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, checker, rx.Positions, steps, false, false, len(ch))
		e.work.passed(x.Peer)
		g.verified(x.Peer, rx.Positions, start)
		return nil
	}
	e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, checker, rx.Positions, steps, true, false, len(ch))
	e.cfg.log.Warn("spot check mismatch; asking a third opinion", zap.Stringer("hop", x.Peer), zap.Stringer("checker", checker),
		zap.Int("links", len(ch)), zap.Int("positions", rx.Positions), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
	// A third opinion: the next checkers, single holders first, that share
	// no node with the first (a node in both would vote twice).
	for _, links := range alts[v+1:] {
		if sharesPeer(links, ch) {
			continue
		}
		rws, err := run(links)
		if errors.Is(err, errAttemptFailing) || ctx.Err() != nil {
			return nil // the attempt ends on its own event; nobody is blamed
		}
		if err != nil {
			continue
		}
		rw := rws[len(rws)-1]
		switch {
		case rw.SameOutput(rv):
			e.fault(ctx, exactEvidence(rx, rvs, rws))
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
				reason: fmt.Sprintf("hop %s failed a spot check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case rw.SameOutput(rx):
			// The checker was wrong; the session's hop was right. A single
			// checker is proven faulty; a chain is, as one witness, but no
			// one link of it: its inner rows have no second opinion, so
			// nobody is accused (docs/trust.md).
			if len(ch) == 1 {
				e.fault(ctx, exactEvidence(rv, []consensus.Receipt{rx}, rws))
			} else {
				e.cfg.log.Warn("spot check: a chained checker was outvoted; no single link of it can be blamed",
					zap.Stringers("chain", hopPeers(ch)), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
			}
			e.work.passed(x.Peer)
			g.verified(x.Peer, rx.Positions, start)
			return nil
		}
		break // three answers: nothing to prove
	}
	// No majority: replay without the hop or any node of its checker, and
	// prove nothing.
	e.vc.unresolved.Add(1)
	return &attemptEnd{kind: endFault, blame: append([]peer.ID{x.Peer}, hopPeers(ch)...),
		reason: fmt.Sprintf("hop %s and checker %s disagree on layers [%d, %d), no third opinion settled it", shortID(x.Peer),
			chainName(ch), x.From, x.To)}
}

// exactEvidence is the evidence against accused's signer, whose two
// witnesses (each its receipts in layer order: one for a single holder,
// the links' for a chain) agree with each other: a single witness goes
// first, as the evidence's format wants one there where it has one.
func exactEvidence(accused consensus.Receipt, w1, w2 []consensus.Receipt) consensus.Evidence {
	if len(w1) > 1 && len(w2) == 1 {
		w1, w2 = w2, w1
	}
	ev := consensus.Evidence{Receipts: [3]consensus.Receipt{accused, w1[len(w1)-1], w2[len(w2)-1]}, Chain: w2[:len(w2)-1]}
	if len(w1) > 1 {
		ev.FirstChain = w1[:len(w1)-1]
	}
	return ev
}

// sharesPeer reports whether two checkers have a node in common.
func sharesPeer(a, b []Hop) bool {
	return slices.ContainsFunc(a, func(h Hop) bool { return slices.ContainsFunc(b, func(o Hop) bool { return o.Peer == h.Peer }) })
}

func hopPeers(hops []Hop) []peer.ID {
	out := make([]peer.ID, len(hops))
	for k, h := range hops {
		out[k] = h.Peer
	}
	return out
}

// chainName names a checker in a reason: its nodes, in layer order.
func chainName(links []Hop) string {
	var b strings.Builder
	for k, l := range links {
		if k > 0 {
			b.WriteString("+")
		}
		b.WriteString(shortID(l.Peer))
	}
	return b.String()
}

// firstCheck runs a check on each of alts in turn until one answers: its
// receipt and index. v < 0 when none did: end is set when ctx ended the
// generation; err is the last failure (errAttemptFailing: the session's
// own path is failing, so the check says nothing of the hop).
func firstCheck[T, R any](ctx context.Context, alts []T, run func(T) (R, error)) (rv R, v int, end *attemptEnd, err error) {
	for k, p := range alts {
		if rv, err = run(p); err == nil {
			return rv, k, nil, nil
		}
		if ctx.Err() != nil {
			return rv, -1, &attemptEnd{}, err
		}
		if errors.Is(err, errAttemptFailing) {
			break
		}
	}
	return rv, -1, nil, err
}

// tolAudit checks the last hop i, on an engine that is not
// bit-reproducible, by tolerance: its receipt carries a summary of its
// last logits row, a holder V of its layers (any engine) computes the
// same position from the same tokens in a check session, and the two
// must agree within consensus.LogitsTolerance. On a disagreement a
// third holder W settles it; if W sides with V, the receipts go to the
// leader as tolerance evidence (a shorter ban). An agreeing check vouches
// for the last position's logits only, not for the session's earlier
// work, so it marks no token safe for a replay.
func (g *generation) tolAudit(ctx context.Context, sid SessionID, areg *attemptReg, i int) *attemptEnd {
	e := g.e
	hops := areg.hops
	x := hops[i]
	rx, err := e.askSent(ctx, sid, hops, i, areg)
	if err != nil {
		e.vc.inconclusive.Add(1)
		e.cfg.log.Debug("tolerance check: no receipt", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	all := append(slices.Clone(g.prompt), g.out...)
	if rx.Logits == nil || rx.Positions > len(all) || rx.From != x.From || rx.To != x.To ||
		rx.Logits.Tokens != consensus.TokenHash(all[:rx.Positions]) {
		// No logits, or logits of tokens this entry did not send: nothing
		// comparable (an upstream may have altered the tokens it relayed).
		e.vc.inconclusive.Add(1)
		return nil
	}
	tokens := all[:rx.Positions]
	steps := max(rx.Positions-len(g.prompt), 0) + 1
	alts := g.tolCheckers(hops, i)
	rand.Shuffle(len(alts), func(a, b int) { alts[a], alts[b] = alts[b], alts[a] })
	// Go checkers first: they add no noise of their own, and only they can
	// hold a hop that signs as go to an exact check (exactSettle).
	slices.SortStableFunc(alts, func(a, b peer.ID) int {
		ra, rb := e.reproducible(a), e.reproducible(b)
		switch {
		case ra == rb:
			return 0
		case ra:
			return -1
		}
		return 1
	})
	run := func(p peer.ID) (consensus.Receipt, error) {
		rs, err := e.checkRun(ctx, g, hops[:i], []Hop{{Peer: p, From: x.From, To: x.To}}, tokens, rx, areg, true)
		if err != nil {
			return consensus.Receipt{}, err
		}
		return rs[0], nil
	}
	rv, v, end, err := firstCheck(ctx, alts, run)
	if v < 0 {
		if end == nil && !errors.Is(err, errAttemptFailing) {
			e.vc.inconclusive.Add(1)
			e.cfg.log.Debug("tolerance check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		}
		return end
	}
	rel, _ := rx.Logits.Compare(rv.Logits, consensus.LogitsTolerance)
	if rx.Logits.Agrees(rv.Logits, consensus.LogitsTolerance) {
		e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, alts[v], rx.Positions, steps, false, true, 1)
		e.vc.toleranceSeen(rel, false)
		e.work.passed(x.Peer)
		return nil
	}
	e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, alts[v], rx.Positions, steps, true, true, 1)
	e.vc.toleranceSeen(rel, true)
	e.cfg.log.Warn("tolerance check: logits differ; asking a third holder", zap.Stringer("hop", x.Peer),
		zap.Stringer("checker", alts[v]), zap.Float64("rel", rel), zap.Int("positions", rx.Positions))
	if eng := rx.Logits.Engine; eng == "" || eng == engine.EngineGo {
		// X signs as go whatever its heartbeat says: held to exact checks.
		return g.exactSettle(ctx, x, rx, rv, alts, v, run, func(why string) *attemptEnd {
			e.vc.unresolved.Add(1)
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer, alts[v]},
				reason: fmt.Sprintf("hop %s and checker %s disagree on the logits of layers [%d, %d): %s",
					shortID(x.Peer), shortID(alts[v]), x.From, x.To, why)}
		})
	}
	for _, p := range alts[v+1:] {
		rw, err := run(p)
		if errors.Is(err, errAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			continue
		}
		wv, wx := rw.Logits.Agrees(rv.Logits, consensus.LogitsTolerance), rw.Logits.Agrees(rx.Logits, consensus.LogitsTolerance)
		switch {
		case wv && !wx:
			e.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rx, rv, rw}, Tolerance: true})
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
				reason: fmt.Sprintf("hop %s failed a tolerance check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case wx && !wv:
			// The checker was off. A go checker is never accused by a
			// tolerance verdict (the leader would refuse it anyway).
			if rv.Logits.Engine != engine.EngineGo {
				e.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rv, rx, rw}, Tolerance: true})
			}
			e.work.passed(x.Peer)
			return nil
		}
		break
	}
	e.vc.unresolved.Add(1)
	return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer, alts[v]},
		reason: fmt.Sprintf("hop %s and checker %s disagree on the logits of layers [%d, %d), no third holder settled it",
			shortID(x.Peer), shortID(alts[v]), x.From, x.To)}
}

// tolCheckers are the holders that can check last hop i by tolerance:
// any engine, but neither the hop, the hop before it, nor avoided.
func (g *generation) tolCheckers(hops []Hop, i int) []peer.ID {
	h := hops[i]
	var out []peer.ID
	for _, p := range g.e.holders(h.From, h.To) {
		if p == h.Peer || (i > 0 && hops[i-1].Peer == p) || slices.Contains(g.gen.Avoid, p.String()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// reproducible: whether p's outputs can be compared bit for bit (see
// entryDeps.isReproducible).
func (e *entry) reproducible(p peer.ID) bool {
	return e.isReproducible == nil || e.isReproducible(p)
}

// pickAudit chooses which of the candidate hops (indexes into hops) a
// spot check takes: the one whose peer has the most work unverified by
// this entry, ties drawn by intn. A uniform draw would keep checking the
// peers that most paths cross and leave a rarely routed liar unchecked;
// this way the peer nobody checked lately comes first. intn(n) returns a
// number in [0, n).
func pickAudit(hops []Hop, cand []int, unverified func(peer.ID) int, intn func(int) int) int {
	var best []int
	most := -1
	for _, i := range cand {
		switch u := unverified(hops[i].Peer); {
		case u > most:
			best, most = append(best[:0], i), u
		case u == most:
			best = append(best, i)
		}
	}
	return best[intn(len(best))]
}

// unverifiedWork counts, per peer, the steps it served for this entry's
// generations since a spot check of this entry last found its work
// right: what a check of it now would newly cover.
type unverifiedWork struct {
	mu    sync.Mutex
	steps map[peer.ID]int
	// checks counts the checks each peer passed, for good: what this
	// entry vouches in its heartbeats (vouch.go).
	checks map[peer.ID]uint32
}

// served adds n steps for every hop of a path that just produced a token.
func (w *unverifiedWork) served(hops []Hop, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.steps == nil {
		w.steps = map[peer.ID]int{}
	}
	for _, h := range hops {
		w.steps[h.Peer] += n
	}
}

// passed: a check found p's work right; its count starts again.
func (w *unverifiedWork) passed(p peer.ID) {
	w.mu.Lock()
	delete(w.steps, p)
	if w.checks == nil {
		w.checks = map[peer.ID]uint32{}
	}
	if w.checks[p] < math.MaxUint32 {
		w.checks[p]++
	}
	w.mu.Unlock()
}

func (w *unverifiedWork) unverified(p peer.ID) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.steps[p]
}

// maxCheckers bounds the checkers an exact check tries for one hop
// (each that does not answer costs a step timeout) and among which it
// seeks a third opinion.
const maxCheckers = 16

// checkers are the checkers of hop i, by trust.Checkers: single holders
// of its layers, then chains of holders that cover them together, each
// on the bit-reproducible engine, neither the hop nor avoided by this
// generation, and the first link not the hop before it (hops must
// alternate). The holders are shuffled first: that draws the tie-break
// among checkers of as many links, spreading checks over them.
func (g *generation) checkers(hops []Hop, i, limit int) [][]Hop {
	h := hops[i]
	var hs []trust.Holder
	at := map[peer.ID]int{}
	ok := map[peer.ID]bool{}
	for l := h.From; l < h.To; l++ {
		for _, p := range g.e.holders(l, l+1) {
			good, seen := ok[p]
			if !seen {
				good = p != h.Peer && !slices.Contains(g.gen.Avoid, p.String()) && g.e.reproducible(p)
				ok[p] = good
			}
			if !good {
				continue
			}
			// A committed range is one run of layers: the first run found
			// is the holder's part of [From, To).
			switch k, found := at[p]; {
			case !found:
				at[p] = len(hs)
				hs = append(hs, trust.Holder{ID: string(p), From: l, To: l + 1})
			case hs[k].To == l:
				hs[k].To = l + 1
			}
		}
	}
	rand.Shuffle(len(hs), func(a, b int) { hs[a], hs[b] = hs[b], hs[a] })
	var prev string
	if i > 0 {
		prev = string(hops[i-1].Peer)
	}
	var out [][]Hop
	for _, c := range trust.Checkers(h.From, h.To, hs, prev, consensus.MaxChain+1, limit) {
		links := make([]Hop, len(c))
		for k, l := range c {
			links[k] = Hop{Peer: peer.ID(l.ID), From: l.From, To: l.To}
		}
		out = append(out, links)
	}
	return out
}

// askReceipt asks hop h for its receipt of the session. An event of the
// session's attempt (a failed peer) ends the wait at once and is left
// for the attempt.
func (e *entry) askReceipt(ctx context.Context, sid SessionID, h Hop, areg *attemptReg) (consensus.Receipt, error) {
	return e.askVia(ctx, sid, h, "", &Audit{Session: sid, From: h.From}, areg)
}

// askVia sends ask to via (to h itself when via is "") and waits for h's
// receipt from either.
func (e *entry) askVia(ctx context.Context, sid SessionID, h Hop, via peer.ID, ask Message, areg *attemptReg) (consensus.Receipt, error) {
	ch, done := e.rcpt.wait(receiptKey{sid, h.From}, h.Peer, via)
	defer done()
	to := h.Peer
	if via != "" {
		to = via
	}
	if err := e.send(ctx, to, ask); err != nil {
		return consensus.Receipt{}, err
	}
	t := e.cfg.clock.NewTimer(e.cfg.stepTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r, nil
	case ev := <-areg.events:
		areg.post(ev)
		return consensus.Receipt{}, errAttemptFailing
	case <-t.Chan():
		return consensus.Receipt{}, fmt.Errorf("%w: no receipt within %v", errInconclusive, e.cfg.stepTimeout)
	case <-ctx.Done():
		return consensus.Receipt{}, ctx.Err()
	case <-e.ctx.Done():
		return consensus.Receipt{}, ErrClosed
	}
}

// checkSession runs one check session of tokens through hops, whose last
// hop answers with its receipt (with its logits summary when logits);
// the hops in ask, which still hold the session then, are asked for
// theirs after. It returns ask's receipts, then the last hop's. Like
// askReceipt, it gives way to an event of the session's attempt.
func (e *entry) checkSession(ctx context.Context, g *generation, hops, ask []Hop, tokens []int32, areg *attemptReg,
	logits bool) ([]consensus.Receipt, error) {
	sid := newSessionID()
	reg := &attemptReg{hops: hops, events: make(chan event, 8)}
	e.checks.add(sid, reg)
	last := hops[len(hops)-1]
	ch, done := e.rcpt.wait(receiptKey{sid, last.From}, last.Peer, "")
	defer func() {
		done()
		e.checks.remove(sid)
		for _, h := range hops {
			e.post(h.Peer, &Close{Session: sid})
		}
	}()
	// Cold: the checker computes every position, whatever it caches.
	step := &Step{Session: sid, Entry: e.cfg.self, Hops: hops, Tokens: tokens, Check: true, Logits: logits,
		Open: &Open{MaxTokens: len(tokens), Model: e.cfg.model.hash, Sampling: g.sp, Cold: true}}
	if err := e.send(ctx, hops[0].Peer, step); err != nil {
		return nil, fmt.Errorf("%w: %w", errInconclusive, err)
	}
	t := e.cfg.clock.NewTimer(e.cfg.stepTimeout)
	defer t.Stop()
	var r consensus.Receipt
	select {
	case r = <-ch:
	case ev := <-reg.events:
		why := ev.why
		if ev.err != nil {
			why = ev.err.Text
		}
		return nil, fmt.Errorf("%w: %s", errInconclusive, why)
	case ev := <-areg.events:
		areg.post(ev)
		return nil, errAttemptFailing
	case <-t.Chan():
		return nil, fmt.Errorf("%w: no answer within %v", errInconclusive, e.cfg.stepTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-e.ctx.Done():
		return nil, ErrClosed
	}
	out := make([]consensus.Receipt, 0, len(ask)+1)
	for _, l := range ask {
		// The earlier links still hold the check session: ask them.
		rl, err := e.askReceipt(ctx, sid, l, areg)
		if err != nil {
			return nil, err
		}
		out = append(out, rl)
	}
	return append(out, r), nil
}

// checkRun runs a check session: tokens through the upstream hops and
// the links (one holder of the checked layers, or a chain that covers
// them), and returns the links' receipts when they cover the same input
// as want's. The last link answers at once; the others are asked after.
// Like askReceipt, it gives way to an event of the session's attempt.
//
// With tol (a tolerance check of a last hop, one link), the last link is
// asked for its logits, and what must match is the token history, not
// the input chain: the upstream hops may be on engines whose rows differ
// in the last bits between the session and the check.
func (e *entry) checkRun(ctx context.Context, g *generation, upstream, links []Hop, tokens []int32, want consensus.Receipt,
	areg *attemptReg, tol bool) ([]consensus.Receipt, error) {
	out, err := e.checkSession(ctx, g, append(slices.Clone(upstream), links...), links[:len(links)-1], tokens, areg, tol)
	if err != nil {
		return nil, err
	}
	r := out[len(out)-1]
	first := out[0]
	if tol {
		if r.Model != want.Model || r.From != want.From || r.To != want.To || r.Positions != want.Positions ||
			r.Logits == nil || want.Logits == nil || r.Logits.Tokens != want.Logits.Tokens {
			return nil, fmt.Errorf("%w: the checker's logits are missing or follow other tokens", errInconclusive)
		}
		// Bit-reproducible upstream hops must feed the checker what they
		// fed the hop: otherwise one of them erred in the session or in the
		// check, and the difference would be blamed on the hop.
		if !slices.ContainsFunc(upstream, func(h Hop) bool { return !e.reproducible(h.Peer) }) && r.InChain != want.InChain {
			return nil, fmt.Errorf("%w: the checker was fed other input", errInconclusive)
		}
		return out, nil
	}
	if first.Model != want.Model || first.From != want.From || first.Positions != want.Positions ||
		first.InChain != want.InChain || r.To != want.To {
		return nil, fmt.Errorf("%w: the checker was fed other input", errInconclusive)
	}
	for k := 1; k < len(out); k++ {
		if out[k].InChain != out[k-1].OutChain || out[k].Positions != want.Positions {
			return nil, fmt.Errorf("%w: the links of a chained checker disagree on what passed between them", errInconclusive)
		}
	}
	return out, nil
}

// fault reports proven evidence to the leader.
func (e *entry) fault(ctx context.Context, ev consensus.Evidence) {
	accused := ev.Receipts[0].Signer
	e.cfg.log.Warn("spot check: reporting a faulty node", zap.Stringer("node", accused),
		zap.Stringer("witness1", ev.Receipts[1].Signer), zap.Stringer("witness2", ev.Receipts[2].Signer))
	if e.report == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.report(ctx, ev); err != nil {
		e.cfg.log.Warn("fault report refused", zap.Stringer("node", accused), zap.Error(err))
		return
	}
	e.vc.reported.Add(1)
}

// used notes that the attempt starting now, at len(g.out) tokens, runs
// on hops: tokens from here on depend on their outputs.
func (g *generation) used(hops []Hop) {
	if g.safe == nil {
		g.safe = map[peer.ID]int{}
	}
	for _, h := range hops {
		if s, ok := g.safe[h.Peer]; !ok || s > len(g.out) {
			g.safe[h.Peer] = len(g.out)
		}
	}
}

// verified records that p's outputs at positions [0, positions) of the
// attempt that started at start tokens passed a check. The tokens they
// fed are then safe from p, if those before the attempt already were:
// the check covers this attempt's session only.
func (g *generation) verified(p peer.ID, positions, start int) {
	if s, ok := g.safe[p]; ok && s >= start {
		g.safe[p] = max(s, positions-len(g.prompt)+1)
	}
}

// rewind takes the generation back to the last point up to which no
// token depends on an unverified output of the faulty peer: the tokens
// after it are produced again, and compared with the ones already sent
// (deliver).
func (g *generation) rewind(faulty peer.ID) {
	if len(g.sent) < len(g.out) {
		g.sent = slices.Clone(g.out)
	}
	if s, ok := g.safe[faulty]; ok {
		g.out = g.out[:min(max(s, 0), len(g.out))]
	}
}

// receiptSigner signs receipts with the host key; nil without one.
func receiptSigner(key crypto.PrivKey) func(*consensus.Receipt) error {
	if key == nil {
		return nil
	}
	return func(r *consensus.Receipt) error { return r.Sign(key) }
}

// reproducible reports whether p computes on the bit-reproducible
// pure-Go engine: this node by its own engine, a peer by its latest
// heartbeat (which names any other engine). A peer not heard yet is not
// taken for one: it is checked by tolerance from its first step (and, if
// it then signs as go, exactly: exactSettle) until its heartbeat says go.
func (n *Node) reproducible(p peer.ID) bool {
	if p == n.self {
		return n.ann.engine == ""
	}
	pr, ok := n.host.Peers().Get(p)
	return ok && pr.Heartbeat != nil && pr.Heartbeat.Engine == ""
}

// holders lists the peers whose committed range covers [from, to).
func (n *Node) holders(from, to int) []peer.ID {
	var out []peer.ID
	for _, st := range n.Committed().Stages {
		if st.Range.Start <= from && to <= st.Range.End {
			if p, err := peer.Decode(st.Node); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// reportFault hands evidence to the leader through consensus.
func (n *Node) reportFault(ctx context.Context, ev consensus.Evidence) error {
	c := n.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: no consensus (static map): cannot report a fault", ErrNotServing)
	}
	return c.ReportFault(ctx, ev)
}

// VerifyStats returns this node's entry spot-check counts.
func (n *Node) VerifyStats() VerifyStats { return n.entry.verifyStats() }

func (e *entry) verifyStats() VerifyStats {
	s := e.vc.stats()
	s.Rate = e.verifyRate()
	if e.swarmRate != nil {
		s.SwarmRate, s.HasSwarmRate = e.swarmRate()
	}
	return s
}

// swarmVerifyRate is the replicated rate (false: none, or no consensus).
func (n *Node) swarmVerifyRate() (float64, bool) {
	if c := n.cons.Load(); c != nil {
		return c.State().VerifyRate()
	}
	return 0, false
}

// SetSwarmVerifyRate sets the swarm's replicated verify rate. Only the
// leader may (consensus.ErrNotLeader elsewhere, ErrNotServing on a static
// map); entries without their own rate follow it.
func (n *Node) SetSwarmVerifyRate(ctx context.Context, r float64) error {
	c := n.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: no consensus (static map): no swarm rate to set", ErrNotServing)
	}
	return c.SetVerifyRate(ctx, r)
}

// SetSwarmSessionTokens sets the mean session length the swarm's planner
// caps each node's KV memory by (0: no cap). Only the leader may
// (consensus.ErrNotLeader elsewhere, ErrNotServing on a static map).
func (n *Node) SetSwarmSessionTokens(ctx context.Context, tokens int) error {
	c := n.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: no consensus (static map): no swarm planner to set", ErrNotServing)
	}
	return c.SetSessionTokens(ctx, tokens)
}

// SetSwarmStewards makes ids the swarm's stewards, the only nodes that
// vote, signed with this node's host key. Only the leader may
// (consensus.ErrNotLeader elsewhere), and the swarm admits it only from
// its founder (the first set) or a steward (consensus.ErrBadStewards).
func (n *Node) SetSwarmStewards(ctx context.Context, ids []string) error {
	c := n.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: no consensus (static map): no voters to choose", ErrNotServing)
	}
	return c.SetStewards(ctx, ids)
}

// midCheckers are the holders that can stand in for hop i (not the last)
// in a mid-path tolerance check: they serve its layers and are neither
// it, its neighbours (hops must alternate), the last hop (whose logits
// are compared, so it must be a fourth node) nor avoided. Go nodes come
// first, each group shuffled: a bit-reproducible checker adds no noise
// of its own.
func (g *generation) midCheckers(hops []Hop, i int) []peer.ID {
	h := hops[i]
	var goes, others []peer.ID
	for _, p := range g.e.holders(h.From, h.To) {
		if p == h.Peer || (i > 0 && hops[i-1].Peer == p) || hops[i+1].Peer == p || hops[len(hops)-1].Peer == p ||
			slices.Contains(g.gen.Avoid, p.String()) {
			continue
		}
		if g.e.reproducible(p) {
			goes = append(goes, p)
		} else {
			others = append(others, p)
		}
	}
	for _, s := range [][]peer.ID{goes, others} {
		rand.Shuffle(len(s), func(a, b int) { s[a], s[b] = s[b], s[a] })
	}
	return append(goes, others...)
}

// midRun runs a check session of tokens through hops with p in place of
// hop i, the last hop answering with its logits summary, and returns p's
// receipt of hop i's layers and the last hop's. want is the session's
// last-hop receipt the answer must be comparable with.
func (e *entry) midRun(ctx context.Context, g *generation, hops []Hop, i int, p peer.ID, tokens []int32, want consensus.Receipt,
	areg *attemptReg) (consensus.Receipt, consensus.Receipt, error) {
	path := slices.Clone(hops)
	path[i].Peer = p
	rs, err := e.checkSession(ctx, g, path, path[i:i+1], tokens, areg, true)
	if err != nil {
		return consensus.Receipt{}, consensus.Receipt{}, err
	}
	rm, rt := rs[0], rs[1]
	if rt.Model != want.Model || rt.From != want.From || rt.To != want.To || rt.Positions != want.Positions ||
		rt.Logits == nil || rt.Logits.Tokens != want.Logits.Tokens {
		return rm, rt, fmt.Errorf("%w: the last hop's logits are missing or follow other tokens", errInconclusive)
	}
	if rm.From != hops[i].From || rm.To != hops[i].To || rm.Positions != want.Positions {
		return rm, rt, fmt.Errorf("%w: the stand-in's receipt covers other work", errInconclusive)
	}
	return rm, rt, nil
}

// midAudit checks hop i, before the last and on an engine that is not
// bit-reproducible (or not heard yet), by tolerance. Its hidden rows
// cannot be compared, so their effect is: the session's last hop's
// logits (computed after X) are compared with those of a check session
// through the same upstream and downstream hops with a second holder W in
// X's place. Agreement passes X. On a disagreement the entry runs the
// check session through X too, so that all three runs are of one kind
// (the evidence the leader gets is of check sessions), and then through
// a third holder; the odd one out is reported with tolerance evidence of
// the mid-path kind (consensus.Evidence.Tails), never a go node. If X
// agrees in the check but not in the session, it (or a hop around it)
// behaved otherwise there: unresolved, the attempt replays avoiding X,
// nobody is reported.
func (g *generation) midAudit(ctx context.Context, sid SessionID, areg *attemptReg, i int) *attemptEnd {
	e := g.e
	hops := areg.hops
	x, l := hops[i], hops[len(hops)-1]
	rl, err := e.askReceipt(ctx, sid, l, areg)
	if err != nil {
		e.vc.inconclusive.Add(1)
		e.cfg.log.Debug("mid-path tolerance check: no receipt from the last hop", zap.Stringer("hop", l.Peer), zap.Error(err))
		return nil
	}
	all := append(slices.Clone(g.prompt), g.out...)
	if rl.Logits == nil || rl.Positions > len(all) || rl.From != l.From || rl.To != l.To ||
		rl.Logits.Tokens != consensus.TokenHash(all[:rl.Positions]) {
		e.vc.inconclusive.Add(1)
		return nil
	}
	tokens := all[:rl.Positions]
	steps := max(rl.Positions-len(g.prompt), 0) + 1
	tol := consensus.LogitsTolerance
	run := func(p peer.ID) (consensus.Receipt, consensus.Receipt, error) {
		return e.midRun(ctx, g, hops, i, p, tokens, rl, areg)
	}
	alts := g.midCheckers(hops, i)
	v := -1
	var rv, tv consensus.Receipt
	for k, p := range alts {
		if rv, tv, err = run(p); err == nil {
			v = k
			break
		}
		if ctx.Err() != nil {
			return &attemptEnd{}
		}
		if errors.Is(err, errAttemptFailing) {
			return nil
		}
	}
	if v < 0 {
		e.vc.inconclusive.Add(1)
		e.cfg.log.Debug("mid-path tolerance check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	rel, _ := rl.Logits.Compare(tv.Logits, tol)
	if rl.Logits.Agrees(tv.Logits, tol) {
		e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, alts[v], rl.Positions, steps, false, true, 1)
		e.vc.toleranceSeen(rel, false)
		e.work.passed(x.Peer)
		return nil
	}
	e.vc.conclusive(e.cfg.clock.Now(), sid, x.Peer, alts[v], rl.Positions, steps, true, true, 1)
	e.vc.toleranceSeen(rel, true)
	e.cfg.log.Warn("mid-path tolerance check: logits differ; checking the hop and a third holder", zap.Stringer("hop", x.Peer),
		zap.Stringer("checker", alts[v]), zap.Float64("rel", rel), zap.Int("positions", rl.Positions))
	unresolved := func(why string) *attemptEnd {
		e.vc.unresolved.Add(1)
		return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer, alts[v]},
			reason: fmt.Sprintf("hop %s and checker %s disagree on the logits after layers [%d, %d): %s",
				shortID(x.Peer), shortID(alts[v]), x.From, x.To, why)}
	}
	ra, ta, err := run(x.Peer)
	switch {
	case errors.Is(err, errAttemptFailing) || ctx.Err() != nil:
		return nil
	case err != nil:
		return unresolved("the hop did not answer a check")
	case ta.Logits.Agrees(tv.Logits, tol):
		e.vc.unresolved.Add(1)
		return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
			reason: fmt.Sprintf("the logits after hop %s differ in its session, not in a check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
	}
	// Bit-reproducible upstream hops must feed every run alike; otherwise
	// the difference may be theirs.
	if !slices.ContainsFunc(hops[:i], func(h Hop) bool { return !e.reproducible(h.Peer) }) && ra.InChain != rv.InChain {
		return unresolved("the upstream fed them differently")
	}
	if ra.Engine == "" || ra.Engine == engine.EngineGo {
		// X's signed receipt claims the go engine, whatever its heartbeat
		// says: no tolerance verdict may accuse it, but it is held to an
		// exact check by go holders fed the same input.
		return g.exactSettle(ctx, x, ra, rv, alts, v, func(p peer.ID) (consensus.Receipt, error) {
			rm, _, err := run(p)
			return rm, err
		}, unresolved)
	}
	for _, p := range alts[v+1:] {
		rw, tw, err := run(p)
		if errors.Is(err, errAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			continue
		}
		wv, wx := tw.Logits.Agrees(tv.Logits, tol), tw.Logits.Agrees(ta.Logits, tol)
		switch {
		case wv && !wx:
			e.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{ra, rv, rw}, Tails: []consensus.Receipt{ta, tv, tw}, Tolerance: true})
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
				reason: fmt.Sprintf("hop %s failed a tolerance check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case wx && !wv:
			// The checker was off in its check; a go checker is never
			// accused by a tolerance verdict (the leader would refuse it).
			if rv.Engine != "" && rv.Engine != engine.EngineGo {
				e.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{rv, ra, rw}, Tails: []consensus.Receipt{tv, ta, tw}, Tolerance: true})
			}
			e.work.passed(x.Peer)
			return nil
		}
		break
	}
	return unresolved("no third holder settled it")
}

// exactSettle settles a tolerance check whose hop X signed a receipt (ra)
// that names no engine other than go: no tolerance verdict may accuse
// it, so it is held to an exact comparison with go holders fed the same
// input (rv, the first checker's, then third holders run by run), and
// exact evidence accuses it (the whole ban). Without a go checker fed the
// same input nothing is proven.
func (g *generation) exactSettle(ctx context.Context, x Hop, ra, rv consensus.Receipt, alts []peer.ID, v int,
	run func(peer.ID) (consensus.Receipt, error), unresolved func(string) *attemptEnd) *attemptEnd {
	e := g.e
	isGo := func(r consensus.Receipt) bool {
		return (r.Engine == "" || r.Engine == engine.EngineGo) && e.reproducible(r.Signer)
	}
	if !isGo(rv) || !rv.SameInput(ra) {
		return unresolved("the hop claims the go engine and no go checker was fed its input")
	}
	if ra.SameOutput(rv) {
		return unresolved("the hop agrees exactly in a check, not in its session")
	}
	for _, p := range alts[v+1:] {
		if !e.reproducible(p) {
			continue
		}
		rw, err := run(p)
		if errors.Is(err, errAttemptFailing) || ctx.Err() != nil {
			return nil
		}
		if err != nil || !isGo(rw) || !rw.SameInput(ra) {
			continue
		}
		if rw.SameOutput(rv) {
			e.fault(ctx, consensus.Evidence{Receipts: [3]consensus.Receipt{ra, rv, rw}})
			return &attemptEnd{kind: endFault, blame: []peer.ID{x.Peer},
				reason: fmt.Sprintf("hop %s, claiming the go engine, failed an exact check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		}
		break
	}
	return unresolved("no go third holder settled it exactly")
}
