package trust

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
)

// scriptedAttempt is one attempt on a path whose hops compute as hashes:
// an honest hop's output chain is a hash of its input chain and layers,
// the same in the session and in any check session; the liar's differs
// from that, and differs between its session and its check sessions
// (inconsistent, as node's FaultNegate liar is: it negates one row per
// decode step in a session but one row of a check's whole prefill).
type scriptedAttempt struct {
	tokens   []int32
	prompt   int
	path     []Hop
	liar     peer.ID
	inconcl  map[peer.ID]int
	verified []peer.ID
}

func (a *scriptedAttempt) output(h Hop, in [32]byte, check bool) [32]byte {
	b := binary.BigEndian.AppendUint32(append([]byte(nil), in[:]...), uint32(h.From))
	b = binary.BigEndian.AppendUint32(b, uint32(h.To))
	if h.Peer == a.liar {
		b = append(b, map[bool]string{false: "session lie", true: "check lie"}[check]...)
	}
	return sha256.Sum256(b)
}

// run computes hops over the tokens: each hop's receipt.
func (a *scriptedAttempt) run(hops []Hop, tokens []int32, check bool) []consensus.Receipt {
	var in [32]byte
	for _, t := range tokens {
		in = sha256.Sum256(binary.BigEndian.AppendUint32(in[:], uint32(t)))
	}
	out := make([]consensus.Receipt, len(hops))
	for k, h := range hops {
		o := a.output(h, in, check)
		out[k] = consensus.Receipt{Signer: h.Peer, Model: 1, From: h.From, To: h.To, Positions: len(tokens), InChain: in,
			OutChain: o, OutLast: o}
		in = o
	}
	return out
}

func (a *scriptedAttempt) Tokens() []int32             { return a.tokens }
func (a *scriptedAttempt) PromptLen() int              { return a.prompt }
func (a *scriptedAttempt) Avoided(peer.ID) bool        { return false }
func (a *scriptedAttempt) Verified(p peer.ID, _ int)   { a.verified = append(a.verified, p) }
func (a *scriptedAttempt) Inconclusive(p peer.ID)      { a.inconcl[p]++ }
func (a *scriptedAttempt) Inconclusives(p peer.ID) int { return a.inconcl[p] }
func (a *scriptedAttempt) AskReceipt(context.Context, Hop) (consensus.Receipt, error) {
	return consensus.Receipt{}, ErrInconclusive
}

func (a *scriptedAttempt) AskSent(_ context.Context, i int) (consensus.Receipt, error) {
	return a.run(a.path, a.tokens, false)[i], nil
}

func (a *scriptedAttempt) CheckSession(_ context.Context, hops, ask []Hop, tokens []int32, _ bool) ([]consensus.Receipt, error) {
	rs := a.run(hops, tokens, true)
	// ask are the links before the last, which end hops.
	return append(slices.Clone(rs[len(hops)-1-len(ask):len(hops)-1]), rs[len(hops)-1]), nil
}

// TestAuditUnchecked: a boundary drawn on a path with no hop that other
// holders can check (the entry's own range, then layers held once) starts
// no check and counts as unchecked; once another node holds the last
// hop's layers, the same draw checks it.
func TestAuditUnchecked(t *testing.T) {
	entry, b, c := peer.ID("entry"), peer.ID("b"), peer.ID("c")
	held := map[peer.ID][2]int{entry: {0, 3}, b: {3, 8}}
	holders := func(from, to int) []peer.ID {
		var out []peer.ID
		for _, p := range []peer.ID{entry, b, c} {
			if r, ok := held[p]; ok && r[0] <= from && to <= r[1] {
				out = append(out, p)
			}
		}
		return out
	}
	path := []Hop{{entry, 0, 3}, {b, 3, 8}}
	var cnt Counters
	au := &Auditor{Self: entry, Layers: 8, Holders: holders, Counters: &cnt, Work: &Work{}, Rand: rand.New(rand.NewPCG(1, 1))}
	at := &scriptedAttempt{tokens: []int32{1, 2, 3, 4}, prompt: 3, path: path, inconcl: map[peer.ID]int{}}
	if v := au.Audit(context.Background(), SessionID{}, at, path); v != nil {
		t.Fatalf("verdict %+v with nothing to check", v)
	}
	if s := cnt.Stats(); s.Unchecked != 1 || s.Audits != 0 {
		t.Fatalf("stats %+v: want one unchecked boundary, no check", s)
	}
	held[c] = [2]int{3, 8}
	if v := au.Audit(context.Background(), SessionID{}, at, path); v != nil {
		t.Fatalf("verdict %+v on honest hops", v)
	}
	if s := cnt.Stats(); s.Unchecked != 1 || s.Audits != 1 || s.Verified != 1 || !slices.Equal(at.verified, []peer.ID{b}) {
		t.Fatalf("stats %+v, verified %v: want b's hop checked and verified", s, at.verified)
	}
}

// TestAuditReachesInconsistentLiar: issue 35's map, the liar on [0,4) and
// the path liar[0,4)→c[4,6)→d[6,8), c and d with more unverified work
// than the liar (earlier generations went through them). Every check of
// c or d is inconclusive: its checker, fed by the liar's check session,
// gets other input. Checks of one attempt must still reach the liar
// within three boundaries, whatever the draw, and end the attempt
// unresolved (no third opinion of other nodes on this map) with the liar
// blamed. Before PickAudit counted inconclusive checks, the draw went to
// c or d at every boundary of a clean-clone CI run's generation and its
// wrong tokens reached the client without an error.
func TestAuditReachesInconsistentLiar(t *testing.T) {
	entry, b, a0, c, d, liar := peer.ID("entry"), peer.ID("b"), peer.ID("a"), peer.ID("c"), peer.ID("d"), peer.ID("liar")
	holds := []struct {
		p        peer.ID
		from, to int
	}{{b, 4, 8}, {a0, 0, 3}, {c, 3, 6}, {d, 6, 8}, {liar, 0, 4}}
	holders := func(from, to int) []peer.ID {
		var out []peer.ID
		for _, h := range holds {
			if h.from <= from && to <= h.to {
				out = append(out, h.p)
			}
		}
		return out
	}
	path := []Hop{{liar, 0, 4}, {c, 4, 6}, {d, 6, 8}}
	for seed := range uint64(50) {
		var w Work
		w.Served([]peer.ID{c, d}, 30)
		w.Served(PeersOf(path), 11)
		var cnt Counters
		au := &Auditor{Self: entry, Layers: 8, Holders: holders, Counters: &cnt, Work: &w, Rand: rand.New(rand.NewPCG(seed, 1))}
		at := &scriptedAttempt{tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, prompt: 10, path: path, liar: liar,
			inconcl: map[peer.ID]int{}}
		var v *Verdict
		boundary := 0
		for v == nil && boundary < 3 {
			v = au.Audit(context.Background(), SessionID{}, at, path)
			boundary++
		}
		if v == nil || len(v.Blame) == 0 || v.Blame[0] != liar {
			t.Fatalf("seed %d: after %d boundaries verdict %+v (inconclusive %v), want the liar blamed", seed, boundary, v, at.inconcl)
		}
		s := cnt.Stats()
		if s.Unresolved != 1 || s.Reported != 0 || s.Inconclusive != uint64(boundary-1) || len(at.verified) != 0 {
			t.Fatalf("seed %d: %d boundaries, stats %+v, verified %v", seed, boundary, s, at.verified)
		}
	}
}
