package node

import (
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// TestResumedFrameMismatchIsPrefixMiss: a later hop that resumed a prefix
// from its cache, and whose first frame's signature does not continue the
// input chain it resumed (the cache was filled from other rows: an
// upstream on another engine, or one since evicted for lying), answers
// CodePrefixMiss, so that the entry replays cold, and counts no bad frame
// against the sender, who signed what it sent. Before, it refused the
// frame as the sender's fault, and every replay of the generation resumed
// the same prefix and was refused again (a generation after a mid-path
// liar's eviction was lost so). The same resume over the cached rows is
// computed.
func TestResumedFrameMismatchIsPrefixMiss(t *testing.T) {
	dirs, ids := staticIDs(t, 2)
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: ids[0].String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: ids[1].String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	a, b := c.add(WithDataDir(dirs[0])), c.add(WithDataDir(dirs[1]))
	c.waitServing(20*time.Second, ids...)
	r := newRogue(t)
	ctx := t.Context()
	if err := r.h.Connect(ctx, b.host.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	self := r.h.ID()
	hops := []Hop{{b.ID(), 4, 8}}
	open := &Open{MaxTokens: 24, Model: ModelHash(a.Model().Fingerprint)}
	dim := a.Model().Hidden
	const n, k = prefixBlock + 2, prefixBlock // prompt length; positions resumed
	prompt := make([]int32, n)
	for i := range prompt {
		prompt[i] = int32(i + 5)
	}
	rows := func(scale float32) []float32 {
		v := make([]float32, n*dim)
		for i := range v {
			v[i] = float32(i%7) * scale
		}
		return v
	}
	cached := rows(0.25)
	// Session 1 computes the whole prompt cold and closes: b caches its
	// first block, with the input chain over cached's first k rows.
	sid := newSessionID()
	fs := newFrameSigner(r.h, open.Model, 0)
	r.send(t, b.ID(), mustEncode(t, fs.sign(t, &Step{Session: sid, Entry: self, Hops: hops, Tokens: prompt, Hidden: cached, Cols: dim, Open: open})))
	r.token(t, sid, "the cold session's token")
	r.send(t, b.ID(), mustEncode(t, &Close{Session: sid}))
	waitFor(t, 10*time.Second, "b to close the session", func() bool {
		st := b.svc.sched.status.Load()
		return st != nil && st.Sessions == 0
	})
	// resumed opens a session over prompt whose sender resumed k positions
	// over first's rows (its chain covers them) and sends the rest.
	resumed := func(first []float32) SessionID {
		sid := newSessionID()
		fs := newFrameSigner(r.h, open.Model, 0)
		fs.out.Write(rowBytes(first[:k*dim]))
		r.send(t, b.ID(), mustEncode(t, fs.sign(t, &Step{Session: sid, Entry: self, Hops: hops, Tokens: prompt, Skip: k,
			Hidden: first[k*dim:], Cols: dim, Open: open})))
		return sid
	}
	bad0 := b.counters.badFramesFrom(self)
	// Over the rows b cached: resumed (without the cache it would answer
	// CodePrefixMiss) and computed.
	r.token(t, resumed(cached), "the resumed session over the cached rows")
	// Over other rows: not the sender's fault.
	resumed(rows(0.5))
	r.expect(t, CodePrefixMiss, "a resume over other rows than the cached ones")
	if got := b.counters.badFramesFrom(self) - bad0; got != 0 {
		t.Fatalf("%d bad frames counted against a sender that signed what it sent", got)
	}
}
