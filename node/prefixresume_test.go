package node

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node/trust"
	"github.com/stratanet/strata/routing"
)

// TestResumePoint pins the stage's resume decision (resumePoint), a
// function of its prefix cache and live sessions alone: hits, misses and
// the cases a later hop must refuse.
func TestResumePoint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 32))
	base := randomTokens(rng, 6*prefixBlock, 512)
	// marks are the receipt chains' states of a first hop that took toks.
	marks := func(toks []int32) []trust.Mark {
		c := trust.NewChains()
		c.Add(toks, nil, 0, nil, []float32{1}, true)
		return c.Marks()
	}
	// sess tags a source: resumePoint hands its sessions on untouched.
	sess := func(tag int) []engine.Session { return make([]engine.Session, tag) }
	entry := func(from, to, blocks, tag int) *prefixEntry {
		toks := slices.Clone(base[:blocks*prefixBlock])
		return &prefixEntry{from: from, to: to, tokens: toks, hashes: routing.BlockHashes(toks, prefixBlock),
			marks: marks(toks), sess: sess(tag)}
	}
	liveHop := func(from, to, n, tag int) *hopSession {
		toks := slices.Clone(base[:n])
		return &hopSession{key: hopKey{SessionID{byte(tag)}, from}, to: to, hist: toks, chain: chainsOver(marks(toks)), sess: sess(tag)}
	}
	differ := func(at int) []int32 { // base with one token changed at position at
		d := slices.Clone(base)
		d[at]++
		return d
	}
	first, later := Hop{From: 0, To: 4}, Hop{From: 4, To: 8}
	for _, tc := range []struct {
		name    string
		entries []*prefixEntry
		live    []*hopSession
		hop     Hop
		tokens  []int32
		skip    int
		want    int // positions resumed
		wantTag int // the source's tag, when want > 0
	}{
		{name: "empty", hop: first, tokens: base},
		{name: "first hop, cached blocks then new tokens", entries: []*prefixEntry{entry(0, 4, 3, 1)},
			hop: first, tokens: base[:3*prefixBlock+5], want: 3 * prefixBlock, wantTag: 1},
		{name: "first hop, the cached prompt again: one position left to compute", entries: []*prefixEntry{entry(0, 4, 3, 1)},
			hop: first, tokens: base[:3*prefixBlock], want: 2 * prefixBlock, wantTag: 1},
		{name: "first hop, a shorter prompt", entries: []*prefixEntry{entry(0, 4, 5, 1)},
			hop: first, tokens: base[:2*prefixBlock+1], want: 2 * prefixBlock, wantTag: 1},
		{name: "first hop, tokens differ in the third block", entries: []*prefixEntry{entry(0, 4, 5, 1)},
			hop: first, tokens: differ(2*prefixBlock + 7), want: 2 * prefixBlock, wantTag: 1},
		{name: "first hop, tokens differ in the first block", entries: []*prefixEntry{entry(0, 4, 5, 1)},
			hop: first, tokens: differ(3)},
		{name: "a wider range holds it: not resumed", entries: []*prefixEntry{entry(0, 8, 5, 1)},
			hop: first, tokens: base},
		{name: "the longest of two entries", entries: []*prefixEntry{entry(0, 4, 2, 1), entry(0, 4, 4, 2)},
			hop: first, tokens: base, want: 4 * prefixBlock, wantTag: 2},
		{name: "a live session longer than the cache", entries: []*prefixEntry{entry(0, 4, 2, 1)},
			live: []*hopSession{liveHop(0, 4, 4*prefixBlock+3, 3)}, hop: first, tokens: base, want: 4 * prefixBlock, wantTag: 3},
		{name: "a live session over other layers", live: []*hopSession{liveHop(0, 2, 4*prefixBlock, 3)},
			hop: first, tokens: base},
		{name: "a live session of less than a block", live: []*hopSession{liveHop(0, 4, prefixBlock-1, 3)},
			hop: first, tokens: base},
		{name: "later hop, holds what the first resumed", entries: []*prefixEntry{entry(4, 8, 5, 1)},
			hop: later, tokens: base, skip: 3 * prefixBlock, want: 3 * prefixBlock, wantTag: 1},
		{name: "later hop, live session holds it", live: []*hopSession{liveHop(4, 8, 5*prefixBlock, 3)},
			hop: later, tokens: base, skip: 3 * prefixBlock, want: 3 * prefixBlock, wantTag: 3},
		{name: "later hop, holds less than the first resumed: a miss", entries: []*prefixEntry{entry(4, 8, 2, 1)},
			hop: later, tokens: base, skip: 3 * prefixBlock},
		{name: "later hop, the first hop resumed nothing", entries: []*prefixEntry{entry(4, 8, 5, 1)},
			hop: later, tokens: base},
		{name: "no receipt chain states: not resumed", entries: []*prefixEntry{func() *prefixEntry {
			e := entry(0, 4, 3, 1)
			e.marks = e.marks[:1]
			return e
		}()}, hop: first, tokens: base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &prefixCache{}
			for _, e := range tc.entries {
				c.put(e)
			}
			live := map[hopKey]*hopSession{}
			for _, hs := range tc.live {
				live[hs.key] = hs
			}
			r := resumePoint(c, live, tc.hop, tc.tokens, tc.skip)
			if r.n != tc.want {
				t.Fatalf("resumed %d positions, want %d", r.n, tc.want)
			}
			if r.chain.Pos() != r.n || len(r.chain.Marks()) != r.n/prefixBlock {
				t.Fatalf("receipt chains at %d with %d marks, for %d positions", r.chain.Pos(), len(r.chain.Marks()), r.n)
			}
			if r.n == 0 {
				if r.src != nil {
					t.Fatal("a source for nothing resumed")
				}
				return
			}
			if len(r.src) != tc.wantTag || r.from != tc.hop.From {
				t.Fatalf("source %d from layer %d, want %d from %d", len(r.src), r.from, tc.wantTag, tc.hop.From)
			}
			// A cold run's chains at n: those of a session that took the
			// first n tokens.
			want, _ := trust.ChainsAt(marks(tc.tokens[:r.n]), r.n)
			if want.InChain() != r.chain.InChain() {
				t.Fatal("the resumed receipt chain differs from a cold run's")
			}
		})
	}
}

// chainsOver are chains that hold marks (a live session's), at their last
// whole block: all a resume reads of them.
func chainsOver(marks []trust.Mark) trust.Chains {
	c, ok := trust.ChainsAt(marks, len(marks)*prefixBlock)
	if !ok {
		panic("marks that do not restore")
	}
	return c
}
