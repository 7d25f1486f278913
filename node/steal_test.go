package node

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/internal/proto"
	"github.com/stratanet/strata/layers"
)

// stealSwarm starts three nodes that each hold the whole model, so that
// any of them can serve a request alone; opts[i] go to node i.
func stealSwarm(t *testing.T, opts ...[]Option) []*Node {
	t.Helper()
	dirs, ids := staticIDs(t, 3)
	var st []layers.Stage
	for _, id := range ids {
		st = append(st, layers.Stage{Node: id.String(), Range: layers.Range{Start: 0, End: 8}})
	}
	m, err := layers.NewLayerMap(8, 1, st...)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithStaticMap(m))
	var ns []*Node
	for i := range 3 {
		o := []Option{WithDataDir(dirs[i])}
		if i < len(opts) {
			o = append(o, opts[i]...)
		}
		ns = append(ns, c.add(o...))
	}
	c.waitServing(10*time.Second, ns[0].ID(), ns[1].ID(), ns[2].ID())
	return ns
}

// TestStealOnSwarm: a request queued on entry A (whose admission sees no
// room) is stolen by B, the one entry with stealing on, driven there and
// answered through A with the single-process tokens.
func TestStealOnSwarm(t *testing.T) {
	const prompt, maxTokens = "Once upon a time", 24
	ns := stealSwarm(t, nil, []Option{WithStealing(true)})
	a, b, c := ns[0], ns[1], ns[2]
	a.entry.adm.hold.Store(true)
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := a.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want) {
		t.Fatalf("stolen run's tokens %v, single process %v", res.Tokens, want)
	}
	ma, mb, mc := a.Metrics(), b.Metrics(), c.Metrics()
	if ma.StolenFrom != 1 || mb.Stolen != 1 || mc.Stolen != 0 || ma.Stolen != 0 {
		t.Fatalf("stolen from A %d; stolen by A %d, B %d, C %d", ma.StolenFrom, ma.Stolen, mb.Stolen, mc.Stolen)
	}
	if ma.EntryQueue != 0 || ma.Failed != 0 || mb.Failed != 0 {
		t.Fatalf("A: %d queued, %d failed; B: %d failed", ma.EntryQueue, ma.Failed, mb.Failed)
	}
}

// TestStealThiefDies: a thief (driven by the test on B's real host)
// takes a queued request, streams its first tokens back and dies; the
// entry replays from the tokens it received once its own paths have
// room, and the client gets the single-process tokens, each once. A
// second thief that breaks before any token puts the request back at
// the head of the queue.
func TestStealThiefDies(t *testing.T) {
	const prompt, maxTokens, sent = "Once upon a time", 24, 5
	ns := stealSwarm(t)
	a, b := ns[0], ns[1]
	a.entry.adm.hold.Store(true)
	want := reference(t, prompt, maxTokens, greedy)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	var got Result
	go func() {
		var err error
		got, err = a.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
		done <- err
	}()
	waitFor(t, 10*time.Second, "the request queued at A", func() bool { return a.Metrics().EntryQueue == 1 })

	// A thief that breaks before its first token: the request goes back.
	s, err := b.host.Streams().Open(ctx, a.ID(), proto.Steal)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSteal(s, stealMsg{Kind: stealAsk}); err != nil {
		t.Fatal(err)
	}
	m, err := readSteal(s)
	if err != nil || m.Kind != stealHand || m.Hand.MaxTokens != maxTokens {
		t.Fatalf("handover: %v, %+v", err, m)
	}
	_ = s.Reset()
	waitFor(t, 10*time.Second, "the request back in A's queue", func() bool { return a.Metrics().EntryQueue == 1 })

	// A thief that sends some tokens, then dies.
	s, err = b.host.Streams().Open(ctx, a.ID(), proto.Steal)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSteal(s, stealMsg{Kind: stealAsk}); err != nil {
		t.Fatal(err)
	}
	if m, err = readSteal(s); err != nil || m.Kind != stealHand || len(m.Hand.Tokens) == 0 {
		t.Fatalf("handover: %v, %+v", err, m)
	}
	for _, tok := range want[:sent] {
		if err := writeSteal(s, stealMsg{Kind: stealToken, Token: tok}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "A delivered the stolen tokens", func() bool { return a.Metrics().Tokens >= sent })
	_ = s.Reset()
	waitFor(t, 10*time.Second, "the request back in A's queue", func() bool { return a.Metrics().EntryQueue == 1 })
	a.entry.adm.hold.Store(false)
	a.entry.adm.poke()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want) {
		t.Fatalf("tokens %v, single process %v", got.Tokens, want)
	}
	ma := a.Metrics()
	if ma.StolenFrom != 2 || ma.Tokens != uint64(len(want)) || ma.Replays != 1 {
		t.Fatalf("A: stolen from %d, %d tokens delivered for %d, %d replays", ma.StolenFrom, ma.Tokens, len(want), ma.Replays)
	}
}

// FuzzDecodeSteal: any frame decodes to a checked message or to
// ErrBadSteal, never a panic, and what decodes encodes back to the same
// bytes. Its seeds are the golden frames (testdata/fuzz/FuzzDecodeSteal
// holds them and their cut-off prefixes too).
func FuzzDecodeSteal(f *testing.F) {
	for _, g := range stealGolden() {
		b, err := encodeSteal(g.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeSteal(b)
		if err != nil {
			if !errors.Is(err, ErrBadSteal) {
				t.Fatalf("error %v is not ErrBadSteal", err)
			}
			return
		}
		if m.Kind == stealHand && (m.Hand == nil || len(m.Hand.Tokens) == 0 || m.Hand.MaxTokens <= 0) {
			t.Fatalf("accepted a bad handover %+v", m.Hand)
		}
		if m.MinWait < 0 || (m.MinWait != 0 && m.Kind != stealAsk) {
			t.Fatalf("accepted min wait %v on a %v frame", m.MinWait, m.Kind)
		}
		back, err := encodeSteal(m)
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x (%v)", b, m, back, err)
		}
	})
}

// TestTakeHeadKeepsLogProbs: a head that wants log-probabilities stays
// with its entry (the steal protocol's token frames carry none); others
// are taken.
func TestTakeHeadKeepsLogProbs(t *testing.T) {
	a := newAdmitter()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a.q = []*waiter{{g: &generation{lp: true}, since: t0}}
	if w := a.takeHead(t0.Add(time.Second), 0); w != nil {
		t.Fatal("a head with log-probabilities was handed over")
	}
	a.q[0].g.lp = false
	if w := a.takeHead(t0.Add(time.Second), 0); w == nil {
		t.Fatal("a plain head was kept")
	}
}
