package trust

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
)

// Spot checks (docs/trust.md). Every hop keeps, per session, two
// running SHA-256 chains (Chains): over every input row it took and over
// every hidden row it emitted, plus the hash of its last output. The
// engine is bit-deterministic and a prefill of n positions equals n
// decode steps, so any holder of the same layers, fed the same inputs
// from position 0 in one stateless prefill, must end with the same
// chains. At a token boundary the entry asks one hop X of the path for
// its signed receipt, then runs a check session: the session's tokens so
// far through the same upstream hops and a second holder V of X's layers
// (or a chain of holders that cover them together: Checkers), whose
// signed receipt comes back instead of a token. Same input chain and same
// outputs: X's work so far is verified. Different outputs: a third holder
// W breaks the tie, and the three signed receipts go to the leader as
// evidence against the odd one out (consensus.Evidence), who is evicted
// and banned.
//
// A last hop on an engine that is not bit-reproducible (ggml) is checked
// by tolerance instead (tolAudit): its receipt carries a signed summary
// of its last logits row, compared with a checker's within
// consensus.LogitsTolerance. Such a node before the last hop is checked
// by tolerance too (midAudit): the last hop's logits after it are
// compared with those after a second holder of its layers.

// Hop is one hop of a path: Peer runs layers [From, To). (Package node's
// wire type is this one.)
type Hop struct {
	Peer     peer.ID
	From, To int
}

// ErrInconclusive: a check that proves nothing either way;
// ErrAttemptFailing: one cut short because the session's attempt fails.
var (
	ErrInconclusive   = errors.New("check inconclusive")
	ErrAttemptFailing = fmt.Errorf("%w: the session's attempt is failing", ErrInconclusive)
)

// Attempt is the seam to one attempt of a generation under check: what
// the checks need of the entry that runs it (package node), which sends
// the frames, waits for the answers on its clock and gives way to the
// attempt's own events (a failed peer: ErrAttemptFailing, the event left
// for the attempt). Failures to get an answer wrap ErrInconclusive.
type Attempt interface {
	// Tokens are the generation's tokens so far: the prompt, then the
	// outputs; PromptLen how many of them the prompt is.
	Tokens() []int32
	PromptLen() int
	// Avoided reports whether the generation avoids p (a peer given up
	// on): it checks nothing.
	Avoided(p peer.ID) bool
	// Verified records that p's outputs at positions [0, positions) of
	// this attempt passed a check (the tokens they fed are safe from p).
	Verified(p peer.ID, positions int)
	// Inconclusive records that a check of p in this attempt said nothing
	// (no receipt, no answer, other input); Inconclusives counts them.
	// The next checks go to the attempt's other hops first: a hop whose
	// checker was fed other input points at a hop upstream of it, which
	// may be inconsistent on purpose to keep its own checks away.
	Inconclusive(p peer.ID)
	Inconclusives(p peer.ID) int
	// AskSent asks for hop i's receipt over what it sent (from the next
	// hop, which checked its signed frames, when there is one).
	AskSent(ctx context.Context, i int) (consensus.Receipt, error)
	// AskReceipt asks hop h for its receipt of the attempt's session.
	AskReceipt(ctx context.Context, h Hop) (consensus.Receipt, error)
	// CheckSession runs one check session of tokens through hops, cold,
	// whose last hop answers with its receipt (with its logits summary
	// when logits); the hops in ask, which still hold the session then,
	// are asked for theirs after. It returns ask's receipts, then the
	// last hop's.
	CheckSession(ctx context.Context, hops, ask []Hop, tokens []int32, logits bool) ([]consensus.Receipt, error)
}

// Verdict is how a check ends the attempt it checked: with no Blame, the
// context ended it (stop, nobody blamed); otherwise a hop was proven or
// suspected faulty, and the attempt replays avoiding Blame, for Reason.
type Verdict struct {
	Blame  []peer.ID
	Reason string
}

// Auditor runs an entry's spot checks. Its fields are the entry's, read
// at each Audit; Counters and Work must be set.
type Auditor struct {
	Self   peer.ID
	Layers int // the model's layers: a last hop ends there
	// Holders lists the peers whose committed range covers [from, to).
	Holders func(from, to int) []peer.ID
	// Reproducible reports whether p's outputs can be compared bit for bit
	// (nil: every peer's).
	Reproducible func(p peer.ID) bool
	// Report hands proven evidence to the leader (nil: nowhere).
	Report   func(context.Context, consensus.Evidence) error
	Counters *Counters
	Work     *Work
	Now      func() time.Time // nil: time.Now
	Log      *zap.Logger      // nil: none
	// Rand draws the checked hop among ties and shuffles checkers (nil:
	// math/rand/v2's global source).
	Rand *rand.Rand
}

// check is one audit of one attempt.
type check struct {
	*Auditor
	at   Attempt
	sid  SessionID
	hops []Hop
}

// Audit spot-checks one hop of the attempt's path hops, session sid, at a
// token boundary. It returns a verdict when the attempt must stop (a hop
// proven or suspected faulty, or ctx ended), nil otherwise.
func (a *Auditor) Audit(ctx context.Context, sid SessionID, at Attempt, hops []Hop) *Verdict {
	if a.Log == nil {
		b := *a
		b.Log = zap.NewNop()
		a = &b
	}
	return (&check{Auditor: a, at: at, sid: sid, hops: hops}).audit(ctx)
}

func (a *Auditor) reproducible(p peer.ID) bool { return a.Reproducible == nil || a.Reproducible(p) }

func (a *Auditor) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

func (a *Auditor) intn(n int) int {
	if a.Rand == nil {
		return rand.IntN(n)
	}
	return a.Rand.IntN(n)
}

func (a *Auditor) shuffle(n int, swap func(i, j int)) {
	if a.Rand == nil {
		rand.Shuffle(n, swap)
		return
	}
	a.Rand.Shuffle(n, swap)
}

// shortID is a peer ID's last 8 characters, as reasons name peers.
func shortID(id peer.ID) string {
	s := id.String()
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}

// inconclusive counts a check of hop peer p that said nothing.
func (c *check) inconclusive(p peer.ID) {
	c.Counters.Inconclusive()
	c.at.Inconclusive(p)
}

// audit spot-checks one hop of the attempt's path; see Auditor.Audit.
func (c *check) audit(ctx context.Context) *Verdict {
	hops := c.hops
	// The hops with a second holder; the entry does not check itself.
	// Only a bit-reproducible hop, fed by bit-reproducible hops, can be
	// checked: the check session reruns its upstream cold.
	var cand []int
	for i, h := range hops {
		if !c.reproducible(h.Peer) {
			break
		}
		if h.Peer != c.Self && len(c.checkers(hops, i, 1)) > 0 {
			cand = append(cand, i)
		}
	}
	// A last hop on another engine is checked by tolerance on its logits
	// (tolerance.go in consensus), whatever engines feed it.
	tol := len(hops) - 1
	if x := hops[tol]; x.Peer == c.Self || x.To != c.Layers || c.reproducible(x.Peer) ||
		len(c.tolCheckers(hops, tol)) == 0 {
		tol = -1
	} else {
		cand = append(cand, tol)
	}
	// A hop before the last on another engine (or one not heard yet) is
	// checked by tolerance too, on the last hop's logits through the same
	// downstream (midAudit): an engine label opts no hop out of checks.
	var mid []int
	if hops[len(hops)-1].To == c.Layers {
		for i, h := range hops[:len(hops)-1] {
			if h.Peer != c.Self && !c.reproducible(h.Peer) && len(c.midCheckers(hops, i)) > 0 {
				mid = append(mid, i)
			}
		}
	}
	cand = append(cand, mid...)
	if len(cand) == 0 {
		c.Counters.Unchecked()
		return nil
	}
	c.Counters.Audit()
	i := PickAudit(PeersOf(hops), cand, c.at.Inconclusives, c.Work.Unverified, c.intn)
	if i == tol {
		return c.tolAudit(ctx, i)
	}
	if slices.Contains(mid, i) {
		return c.midAudit(ctx, i)
	}
	x := hops[i]
	rx, err := c.at.AskSent(ctx, i)
	if err != nil {
		c.inconclusive(x.Peer)
		c.Log.Debug("spot check: no receipt", zap.Stringer("hop", x.Peer), zap.Error(err))
		return nil
	}
	all := c.at.Tokens()
	if rx.Positions > len(all) || rx.From != x.From || rx.To != x.To {
		c.inconclusive(x.Peer)
		return nil
	}
	tokens := all[:rx.Positions]
	steps := max(rx.Positions-c.at.PromptLen(), 0) + 1 // the prefill, then one per decode step
	// Checkers: single second holders, else chains that cover the layers
	// together (Checkers); each re-runs X's input cold.
	alts := c.checkers(hops, i, maxCheckers)
	run := func(links []Hop) ([]consensus.Receipt, error) {
		return c.checkRun(ctx, hops[:i], links, tokens, rx, false)
	}
	rvs, v, end, err := firstCheck(ctx, alts, run)
	if v < 0 {
		if end == nil && !errors.Is(err, ErrAttemptFailing) {
			c.inconclusive(x.Peer)
			c.Log.Debug("spot check inconclusive", zap.Stringer("hop", x.Peer), zap.Error(err))
		}
		return end
	}
	ch := alts[v]
	rv, checker := rvs[len(rvs)-1], ch[len(ch)-1].Peer
	if rv.SameOutput(rx) {
		c.Counters.Conclusive(c.now(), c.sid, x.Peer, checker, rx.Positions, steps, false, false, len(ch))
		c.Work.Passed(x.Peer)
		c.at.Verified(x.Peer, rx.Positions)
		return nil
	}
	c.Counters.Conclusive(c.now(), c.sid, x.Peer, checker, rx.Positions, steps, true, false, len(ch))
	c.Log.Warn("spot check mismatch; asking a third opinion", zap.Stringer("hop", x.Peer), zap.Stringer("checker", checker),
		zap.Int("links", len(ch)), zap.Int("positions", rx.Positions), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
	// A third opinion: the next checkers, single holders first, that share
	// no node with the first (a node in both would vote twice).
	for _, links := range alts[v+1:] {
		if sharesPeer(links, ch) {
			continue
		}
		rws, err := run(links)
		if errors.Is(err, ErrAttemptFailing) || ctx.Err() != nil {
			return nil // the attempt ends on its own event; nobody is blamed
		}
		if err != nil {
			continue
		}
		rw := rws[len(rws)-1]
		switch {
		case rw.SameOutput(rv):
			c.fault(ctx, exactEvidence(rx, rvs, rws))
			return &Verdict{Blame: []peer.ID{x.Peer},
				Reason: fmt.Sprintf("hop %s failed a spot check of layers [%d, %d)", shortID(x.Peer), x.From, x.To)}
		case rw.SameOutput(rx):
			// The checker was wrong; the session's hop was right. A single
			// checker is proven faulty; a chain is, as one witness, but no
			// one link of it: its inner rows have no second opinion, so
			// nobody is accused (docs/trust.md).
			if len(ch) == 1 {
				c.fault(ctx, exactEvidence(rv, []consensus.Receipt{rx}, rws))
			} else {
				c.Log.Warn("spot check: a chained checker was outvoted; no single link of it can be blamed",
					zap.Stringers("chain", PeersOf(ch)), zap.Int("layers_from", x.From), zap.Int("layers_to", x.To))
			}
			c.Work.Passed(x.Peer)
			c.at.Verified(x.Peer, rx.Positions)
			return nil
		}
		break // three answers: nothing to prove
	}
	// No majority: replay without the hop or any node of its checker, and
	// prove nothing.
	c.Counters.Unresolved()
	return &Verdict{Blame: append([]peer.ID{x.Peer}, PeersOf(ch)...),
		Reason: fmt.Sprintf("hop %s and checker %s disagree on layers [%d, %d), no third opinion settled it", shortID(x.Peer),
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

// PeersOf are the peers of hops, in order.
func PeersOf(hops []Hop) []peer.ID {
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
// generation; err is the last failure (ErrAttemptFailing: the session's
// own path is failing, so the check says nothing of the hop).
func firstCheck[T, R any](ctx context.Context, alts []T, run func(T) (R, error)) (rv R, v int, end *Verdict, err error) {
	for k, p := range alts {
		if rv, err = run(p); err == nil {
			return rv, k, nil, nil
		}
		if ctx.Err() != nil {
			return rv, -1, &Verdict{}, err
		}
		if errors.Is(err, ErrAttemptFailing) {
			break
		}
	}
	return rv, -1, nil, err
}

// maxCheckers bounds the checkers an exact check tries for one hop
// (each that does not answer costs a step timeout) and among which it
// seeks a third opinion.
const maxCheckers = 16

// checkers are the checkers of hop i, by Checkers: single holders
// of its layers, then chains of holders that cover them together, each
// on the bit-reproducible engine, neither the hop nor avoided by this
// generation, and the first link not the hop before it (hops must
// alternate). The holders are shuffled first: that draws the tie-break
// among checkers of as many links, spreading checks over them.
func (c *check) checkers(hops []Hop, i, limit int) [][]Hop {
	h := hops[i]
	var hs []Holder
	at := map[peer.ID]int{}
	ok := map[peer.ID]bool{}
	for l := h.From; l < h.To; l++ {
		for _, p := range c.Holders(l, l+1) {
			good, seen := ok[p]
			if !seen {
				good = p != h.Peer && !c.at.Avoided(p) && c.reproducible(p)
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
				hs = append(hs, Holder{ID: string(p), From: l, To: l + 1})
			case hs[k].To == l:
				hs[k].To = l + 1
			}
		}
	}
	c.shuffle(len(hs), func(a, b int) { hs[a], hs[b] = hs[b], hs[a] })
	var prev string
	if i > 0 {
		prev = string(hops[i-1].Peer)
	}
	var out [][]Hop
	for _, c := range Checkers(h.From, h.To, hs, prev, consensus.MaxChain+1, limit) {
		links := make([]Hop, len(c))
		for k, l := range c {
			links[k] = Hop{Peer: peer.ID(l.ID), From: l.From, To: l.To}
		}
		out = append(out, links)
	}
	return out
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
func (c *check) checkRun(ctx context.Context, upstream, links []Hop, tokens []int32, want consensus.Receipt, tol bool) ([]consensus.Receipt, error) {
	out, err := c.at.CheckSession(ctx, append(slices.Clone(upstream), links...), links[:len(links)-1], tokens, tol)
	if err != nil {
		return nil, err
	}
	r := out[len(out)-1]
	first := out[0]
	if tol {
		if r.Model != want.Model || r.From != want.From || r.To != want.To || r.Positions != want.Positions ||
			r.Logits == nil || want.Logits == nil || r.Logits.Tokens != want.Logits.Tokens {
			return nil, fmt.Errorf("%w: the checker's logits are missing or follow other tokens", ErrInconclusive)
		}
		// Bit-reproducible upstream hops must feed the checker what they
		// fed the hop: otherwise one of them erred in the session or in the
		// check, and the difference would be blamed on the hop.
		if !slices.ContainsFunc(upstream, func(h Hop) bool { return !c.reproducible(h.Peer) }) && r.InChain != want.InChain {
			return nil, fmt.Errorf("%w: the checker was fed other input", ErrInconclusive)
		}
		return out, nil
	}
	if first.Model != want.Model || first.From != want.From || first.Positions != want.Positions ||
		first.InChain != want.InChain || r.To != want.To {
		return nil, fmt.Errorf("%w: the checker was fed other input", ErrInconclusive)
	}
	for k := 1; k < len(out); k++ {
		if out[k].InChain != out[k-1].OutChain || out[k].Positions != want.Positions {
			return nil, fmt.Errorf("%w: the links of a chained checker disagree on what passed between them", ErrInconclusive)
		}
	}
	return out, nil
}

// fault reports proven evidence to the leader.
func (a *Auditor) fault(ctx context.Context, ev consensus.Evidence) {
	accused := ev.Receipts[0].Signer
	a.Log.Warn("spot check: reporting a faulty node", zap.Stringer("node", accused),
		zap.Stringer("witness1", ev.Receipts[1].Signer), zap.Stringer("witness2", ev.Receipts[2].Signer))
	if a.Report == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Report(ctx, ev); err != nil {
		a.Log.Warn("fault report refused", zap.Stringer("node", accused), zap.Error(err))
		return
	}
	a.Counters.Reported()
}
