package consensus

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Tolerance checks (docs/trust.md): a node on an engine that is not
// bit-reproducible (ggml on a GPU) cannot be checked by hashes, so the
// last stage's receipt also carries a summary of its last logits row,
// signed with the rest, and the entry compares it with a checker's
// within LogitsTolerance. A verdict on numbers is a judgement, not a
// proof: evidence of this kind evicts for a shorter time than an exact
// proof (the leader's ban divided by ToleranceBanDivisor), and it is
// never accepted against a node whose own receipt names the go engine,
// which stays under exact checks only. A hop before the last has no
// logits: evidence against it (Evidence.Tails, checkToleranceMid) compares
// the last hop's logits after it and after two other holders.

// LogitsTop is the number of (token, logit) pairs a receipt carries: the
// highest ones. Sixteen is where sampling's mass lies for any sane
// top-k/top-p, and it bounds the section to ~200 bytes, far under
// MaxReceiptSize, whatever the vocabulary.
const LogitsTop = 16

// LogitsTolerance bounds max |Δlogit| / max |logit| between two honest
// nodes' logits of the same position. Measured: ggml against the go
// engine on Q4_K_M test files differs by at most ~2.8% of max |logit|
// (README, "The ggml backend"), mostly from summation order and the
// quantised activations of ggml's matmuls. 0.1 leaves more than three
// times that for other devices and backends (GPU kernels, other thread
// counts), so an honest node is not accused; a node that returns another
// model's or garbage logits, or moves the argmax by a real margin, is
// off by far more (the tests' liar by ≥ 50%).
const LogitsTolerance = 0.1

// ToleranceBanDivisor: evidence of the tolerance kind bans for the
// leader's ban duration divided by this (1 h for the default 24 h): long
// enough to take a lying node out of paths, short enough that an honest
// one misjudged by a wrong tolerance comes back soon.
const ToleranceBanDivisor = 24

// reproducibleEngine names the bit-reproducible engine (engine.EngineGo):
// the only one a tolerance verdict may never accuse.
const reproducibleEngine = "go"

// TopLogit is one token's logit.
type TopLogit struct {
	ID    int32
	Logit float32
}

// Logits summarises a last stage's logits row for the last position of
// a session: its LogitsTop highest entries in descending order (fewer
// only when the vocabulary is smaller, then all of it), max |logit| over
// the whole row, the token history they follow, and the engine that
// computed them.
type Logits struct {
	Engine string   // the signer's engine label ("go": bit-reproducible)
	Tokens [32]byte // TokenHash of the positions the row follows
	MaxAbs float32
	Top    []TopLogit
}

// TokenHash is the SHA-256 of a token history, little-endian u32 each:
// what Logits.Tokens holds, computed by the entry from its own tokens.
func TokenHash(tokens []int32) [32]byte {
	b := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	return sha256.Sum256(b)
}

// SummarizeLogits returns row's k highest entries (descending; ties by
// lower ID) and max |logit|; NaNs are skipped.
func SummarizeLogits(row []float32, k int) ([]TopLogit, float32) {
	top := make([]TopLogit, 0, k)
	var maxAbs float32
	for id, v := range row {
		if v != v {
			continue
		}
		if a := float32(math.Abs(float64(v))); a > maxAbs {
			maxAbs = a
		}
		if len(top) == k && v <= top[k-1].Logit {
			continue
		}
		if len(top) < k {
			top = append(top, TopLogit{})
		}
		j := len(top) - 1
		for j > 0 && top[j-1].Logit < v {
			top[j] = top[j-1]
			j--
		}
		top[j] = TopLogit{ID: int32(id), Logit: v}
	}
	return top, maxAbs
}

// valid checks a decoded or received summary's shape.
func (l *Logits) valid() error {
	if len(l.Engine) > maxEngineLen || !utf8.ValidString(l.Engine) {
		return fmt.Errorf("engine label of %d bytes (at most %d of UTF-8)", len(l.Engine), maxEngineLen)
	}
	if len(l.Top) == 0 || len(l.Top) > LogitsTop {
		return fmt.Errorf("%d top logits (1..%d)", len(l.Top), LogitsTop)
	}
	if !finite(l.MaxAbs) || l.MaxAbs < 0 {
		return fmt.Errorf("max |logit| %v", l.MaxAbs)
	}
	for i, t := range l.Top {
		if t.ID < 0 || !finite(t.Logit) || float32(math.Abs(float64(t.Logit))) > l.MaxAbs {
			return fmt.Errorf("top logit %d: %d = %v (max |logit| %v)", i, t.ID, t.Logit, l.MaxAbs)
		}
		if i > 0 && t.Logit > l.Top[i-1].Logit {
			return fmt.Errorf("top logits out of order at %d", i)
		}
		for _, o := range l.Top[:i] {
			if o.ID == t.ID {
				return fmt.Errorf("token %d twice in the top logits", t.ID)
			}
		}
	}
	return nil
}

func finite(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }

// Compare returns the largest difference between l and o over the
// entries either names, relative to the smaller max |logit| of the two
// (a liar cannot widen the tolerance by claiming a large one), and
// whether their argmaxes differ by more than the tolerance tol allows.
// An entry only one side names is bounded on the other by that side's
// lowest listed logit, so only its excess over that bound counts.
func (l *Logits) Compare(o *Logits, tol float64) (rel float64, argmaxOff bool) {
	if len(l.Top) == 0 || len(o.Top) == 0 {
		return math.Inf(1), true // nothing to compare: never an agreement
	}
	scale := float64(min(l.MaxAbs, o.MaxAbs))
	delta := 0.0
	one := func(a, b *Logits) {
		for _, t := range a.Top {
			i := slices.IndexFunc(b.Top, func(u TopLogit) bool { return u.ID == t.ID })
			var d float64
			switch {
			case i >= 0:
				d = math.Abs(float64(t.Logit) - float64(b.Top[i].Logit))
			case len(b.Top) < LogitsTop:
				d = math.Inf(1) // b listed its whole vocabulary without this token
			default:
				d = max(0, float64(t.Logit)-float64(b.Top[len(b.Top)-1].Logit))
			}
			delta = max(delta, d)
		}
	}
	one(l, o)
	one(o, l)
	switch {
	case delta == 0:
		rel = 0
	case scale == 0:
		rel = math.Inf(1)
	default:
		rel = delta / scale
	}
	if l.Top[0].ID != o.Top[0].ID {
		// A near tie may flip between honest engines: the argmax may differ
		// only where either side's top two lie within the tolerance.
		gap := func(x *Logits) float64 {
			if len(x.Top) < 2 {
				return math.Inf(1)
			}
			return float64(x.Top[0].Logit) - float64(x.Top[1].Logit)
		}
		argmaxOff = min(gap(l), gap(o)) > tol*scale
	}
	return rel, argmaxOff
}

// Agrees reports whether two summaries of the same position agree within
// tol: the same token history, the same argmax (but for a near tie), and
// a relative difference within tol.
func (l *Logits) Agrees(o *Logits, tol float64) bool {
	if l == nil || o == nil || l.Tokens != o.Tokens || l.valid() != nil || o.valid() != nil {
		return false
	}
	rel, off := l.Compare(o, tol)
	return !off && rel <= tol
}

// appendLogits encodes a summary: engine, token hash, max |logit|, then
// the count and each (uvarint ID, f32 logit).
func appendLogits(b []byte, l *Logits) []byte {
	b = appendStr(b, l.Engine)
	b = append(b, l.Tokens[:]...)
	b = binary.BigEndian.AppendUint32(b, math.Float32bits(l.MaxAbs))
	b = binary.AppendUvarint(b, uint64(len(l.Top)))
	for _, t := range l.Top {
		b = binary.AppendUvarint(b, uint64(uint32(t.ID)))
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(t.Logit))
	}
	return b
}

// maxEngineLen bounds an engine label (swarm.MaxEngineLen).
const maxEngineLen = 32

func (d decoder) logits() *Logits {
	l := &Logits{Engine: d.str("engine", maxEngineLen)}
	copy(l.Tokens[:], d.Take(32, "token hash"))
	l.MaxAbs = d.F32("max |logit|")
	n := d.count("top logits", LogitsTop, 5)
	for range n {
		id := d.Uvarint("token", math.MaxInt32)
		l.Top = append(l.Top, TopLogit{ID: int32(id), Logit: d.F32("logit")})
	}
	if d.Err() != nil {
		return nil
	}
	if err := l.valid(); err != nil {
		d.Fail("logits: %v", err)
		return nil
	}
	return l
}

// checkTolerance verifies evidence of the tolerance kind and returns the
// accused: three distinct holders' receipts of the same last layers and
// the same token history, each with its logits; the two witnesses agree
// within LogitsTolerance and the accused agrees with neither; and the
// accused's own signed receipt names an engine other than go.
func (e Evidence) checkTolerance() (peer.ID, error) {
	rs := e.Receipts
	if len(e.Chain) != 0 {
		return "", fmt.Errorf("%w: a tolerance verdict takes single witnesses", ErrBadEvidence)
	}
	for i, r := range rs {
		for _, o := range rs[:i] {
			if o.Signer == r.Signer {
				return "", fmt.Errorf("%w: %s signs twice; the accused and the witnesses must be distinct", ErrBadEvidence, r.Signer)
			}
		}
		if err := r.Verify(); err != nil {
			return "", fmt.Errorf("receipt %d: %w", i, err)
		}
		if r.Logits == nil {
			return "", fmt.Errorf("%w: receipt %d carries no logits", ErrBadEvidence, i)
		}
		a := rs[0]
		if r.Model != a.Model || r.From != a.From || r.To != a.To || r.Positions != a.Positions || r.Logits.Tokens != a.Logits.Tokens {
			return "", fmt.Errorf("%w: receipt %d covers other work than the accused's", ErrBadEvidence, i)
		}
	}
	if eng := rs[0].Logits.Engine; eng == reproducibleEngine || eng == "" {
		return "", fmt.Errorf("%w: the accused computes on the go engine: only an exact check may accuse it", ErrBadEvidence)
	}
	if !rs[1].Logits.Agrees(rs[2].Logits, LogitsTolerance) {
		return "", fmt.Errorf("%w: the witnesses' logits disagree with each other", ErrBadEvidence)
	}
	if rs[0].Logits.Agrees(rs[1].Logits, LogitsTolerance) || rs[0].Logits.Agrees(rs[2].Logits, LogitsTolerance) {
		return "", fmt.Errorf("%w: the accused's logits agree with a witness's within the tolerance", ErrBadEvidence)
	}
	return rs[0].Signer, nil
}

// checkToleranceMid verifies tolerance evidence against a hop before the
// last (Evidence.Tails) and returns the accused. Receipts are three
// distinct holders' receipts of the same layers over the same positions,
// each from its own check session; Tails[k] is the last hop's receipt of
// Receipts[k]'s session (the same session ID and positions), with its
// logits. The tails are one signer's, a fourth node: the same downstream
// computed all three runs, so what differs between them is the checked
// hop. Where the last hop follows the checked one directly, its input
// chain must be the checked hop's output chain. The witnesses' tails
// agree within LogitsTolerance, the accused's with neither, and the
// accused's own signed receipt names an engine other than go.
func (e Evidence) checkToleranceMid() (peer.ID, error) {
	rs, ts := e.Receipts, e.Tails
	if len(e.Chain) != 0 || len(ts) != len(rs) {
		return "", fmt.Errorf("%w: mid-path tolerance evidence takes three tails and no chain (%d, %d)", ErrBadEvidence, len(ts), len(e.Chain))
	}
	a := rs[0]
	for i, r := range rs {
		for _, o := range rs[:i] {
			if o.Signer == r.Signer {
				return "", fmt.Errorf("%w: %s signs twice; the accused and the witnesses must be distinct", ErrBadEvidence, r.Signer)
			}
		}
		if err := r.Verify(); err != nil {
			return "", fmt.Errorf("receipt %d: %w", i, err)
		}
		if r.Model != a.Model || r.From != a.From || r.To != a.To || r.Positions != a.Positions {
			return "", fmt.Errorf("%w: receipt %d covers other work than the accused's", ErrBadEvidence, i)
		}
		t := ts[i]
		if err := t.Verify(); err != nil {
			return "", fmt.Errorf("tail %d: %w", i, err)
		}
		if t.Signer != ts[0].Signer || slices.ContainsFunc(rs[:], func(o Receipt) bool { return o.Signer == t.Signer }) {
			return "", fmt.Errorf("%w: tail %d: the tails must be one fourth node's", ErrBadEvidence, i)
		}
		if t.Logits == nil || t.Session != r.Session || t.Positions != r.Positions || t.Model != r.Model || t.From < r.To {
			return "", fmt.Errorf("%w: tail %d is not the last hop of receipt %d's session", ErrBadEvidence, i, i)
		}
		if t.From != ts[0].From || t.To != ts[0].To || t.Logits.Tokens != ts[0].Logits.Tokens {
			return "", fmt.Errorf("%w: tail %d covers other work than the accused's tail", ErrBadEvidence, i)
		}
		if t.From == r.To && t.InChain != r.OutChain {
			return "", fmt.Errorf("%w: tail %d was not fed what receipt %d's signer emitted", ErrBadEvidence, i, i)
		}
	}
	if eng := a.Engine; eng == reproducibleEngine || eng == "" {
		return "", fmt.Errorf("%w: the accused computes on the go engine: only an exact check may accuse it", ErrBadEvidence)
	}
	if !ts[1].Logits.Agrees(ts[2].Logits, LogitsTolerance) {
		return "", fmt.Errorf("%w: the witnesses' logits disagree with each other", ErrBadEvidence)
	}
	if ts[0].Logits.Agrees(ts[1].Logits, LogitsTolerance) || ts[0].Logits.Agrees(ts[2].Logits, LogitsTolerance) {
		return "", fmt.Errorf("%w: the accused's logits agree with a witness's within the tolerance", ErrBadEvidence)
	}
	return a.Signer, nil
}
