package consensus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// row is a made-up logits row of n entries: a smooth ramp with a clear
// argmax at top, then scaled by 1+eps·(pattern) to model another
// engine's rounding.
func row(n, top int, eps float32) []float32 {
	r := make([]float32, n)
	for i := range r {
		r[i] = float32((i*37)%n)/float32(n)*8 - 4
		if i%3 == 0 {
			r[i] *= 1 + eps
		} else {
			r[i] *= 1 - eps
		}
	}
	r[top] = 9
	return r
}

// tolReceipt signs a last-stage receipt whose logits summarise lg.
func (s signer) tolReceipt(t testing.TB, engine string, tokens []int32, lg []float32) Receipt {
	t.Helper()
	r := Receipt{Signer: s.id, Model: 7, From: 4, To: 8, Positions: len(tokens),
		InChain: sha256.Sum256([]byte(s.id)), OutLast: sha256.Sum256([]byte(engine))}
	top, maxAbs := SummarizeLogits(lg, LogitsTop)
	r.Logits = &Logits{Engine: engine, Tokens: TokenHash(tokens), MaxAbs: maxAbs, Top: top}
	if err := r.Sign(s.key); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSummarizeLogits(t *testing.T) {
	top, maxAbs := SummarizeLogits([]float32{1, -7, 3, float32(math.NaN()), 3, 2}, 3)
	want := []TopLogit{{2, 3}, {4, 3}, {5, 2}}
	if maxAbs != 7 || len(top) != 3 || top[0] != want[0] || top[1] != want[1] || top[2] != want[2] {
		t.Fatalf("top %v max %v, want %v max 7", top, maxAbs, want)
	}
}

// TestLogitsCompare: honest-looking rows a few percent apart agree; a
// shifted argmax, another row, or another history do not.
func TestLogitsCompare(t *testing.T) {
	toks := []int32{1, 2, 3}
	sum := func(lg []float32, toks []int32) *Logits {
		top, m := SummarizeLogits(lg, LogitsTop)
		return &Logits{Engine: "x", Tokens: TokenHash(toks), MaxAbs: m, Top: top}
	}
	ref := sum(row(1000, 17, 0), toks)
	near := sum(row(1000, 17, 0.03), toks)
	rel, off := ref.Compare(near, LogitsTolerance)
	t.Logf("3%% perturbation: rel %.4f, argmax off %v", rel, off)
	if off || rel > LogitsTolerance || !ref.Agrees(near, LogitsTolerance) {
		t.Fatalf("a 3%% perturbation disagrees: rel %v, argmax off %v", rel, off)
	}
	shifted := row(1000, 17, 0)
	shifted[18] = 13.5 // the argmax moves by half of max |logit|
	if ref.Agrees(sum(shifted, toks), LogitsTolerance) {
		t.Fatal("a shifted argmax agrees")
	}
	if ref.Agrees(sum(row(1000, 500, 0), toks), LogitsTolerance) {
		t.Fatal("another row agrees")
	}
	if ref.Agrees(sum(row(1000, 17, 0), []int32{1, 2, 4}), LogitsTolerance) {
		t.Fatal("another history agrees")
	}
	// A near tie may flip: two tops within the tolerance.
	tie := row(1000, 17, 0)
	tie[18] = 8.8
	tie2 := row(1000, 17, 0)
	tie2[18], tie2[17] = 9, 8.8
	if !sum(tie, toks).Agrees(sum(tie2, toks), LogitsTolerance) {
		t.Fatal("a near tie flipping disagrees")
	}
}

func toleranceEvidence(t testing.TB, s [3]signer) Evidence {
	toks := []int32{5, 6, 7, 8}
	liar := row(1000, 17, 0)
	liar[40] = 20
	return Evidence{Tolerance: true, Receipts: [3]Receipt{
		s[0].tolReceipt(t, "ggml-test", toks, liar),
		s[1].tolReceipt(t, "go", toks, row(1000, 17, 0)),
		s[2].tolReceipt(t, "ggml-test", toks, row(1000, 17, 0.02)),
	}}
}

// TestToleranceEvidence: the leader re-checks the numbers. Valid
// tolerance evidence accuses the odd one; evidence whose numbers do not
// support it, that accuses a go node, or whose logits were changed after
// signing is refused with ErrBadEvidence (the accuser is not believed).
func TestToleranceEvidence(t *testing.T) {
	s := [3]signer{newSigner(t), newSigner(t), newSigner(t)}
	good := toleranceEvidence(t, s)
	if got, err := good.Check(); err != nil || got != s[0].id {
		t.Fatalf("valid tolerance evidence: accused %v, %v", got, err)
	}
	toks := []int32{5, 6, 7, 8}
	mod := func(f func(*Evidence)) Evidence {
		e := good
		e.Receipts = good.Receipts
		f(&e)
		return e
	}
	cases := map[string]Evidence{
		"within tolerance": mod(func(e *Evidence) {
			e.Receipts[0] = s[0].tolReceipt(t, "ggml-test", toks, row(1000, 17, 0.04))
		}),
		"witnesses disagree": mod(func(e *Evidence) {
			e.Receipts[2] = s[2].tolReceipt(t, "ggml-test", toks, row(1000, 300, 0))
		}),
		"accused on go": mod(func(e *Evidence) {
			lg := row(1000, 17, 0)
			lg[40] = 20
			e.Receipts[0] = s[0].tolReceipt(t, "go", toks, lg)
		}),
		"other history": mod(func(e *Evidence) {
			e.Receipts[2] = s[2].tolReceipt(t, "ggml-test", []int32{5, 6, 7, 9}, row(1000, 17, 0))
		}),
		"numbers changed after signing": mod(func(e *Evidence) {
			l := *e.Receipts[0].Logits
			l.Top = append([]TopLogit(nil), l.Top...)
			l.Top[0].Logit = 9.5
			e.Receipts[1].Logits = &l
		}),
		"no logits":     mod(func(e *Evidence) { e.Receipts[1] = s[1].receipt(t, "in", "out") }),
		"exact kind":    mod(func(e *Evidence) { e.Tolerance = false }),
		"chain witness": mod(func(e *Evidence) { e.Chain = []Receipt{s[1].receipt(t, "in", "out")} }),
	}
	for name, ev := range cases {
		if _, err := ev.Check(); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("%s: %v, want ErrBadEvidence", name, err)
		}
	}

	// It round-trips in a record, kind and numbers included.
	f := NodeFaulted{Node: s[0].id.String(), Accuser: s[1].id.String(), Until: t0.Add(time.Hour), Evidence: good}
	raw, err := MarshalRecord(rec(3, f))
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	ev := back.Event.(NodeFaulted).Evidence
	if !ev.Tolerance || ev.Receipts[0].Logits == nil || len(ev.Receipts[0].Logits.Top) != LogitsTop {
		t.Fatalf("decoded evidence lost its kind or logits: %+v", ev)
	}
	if got, err := ev.Check(); err != nil || got != s[0].id {
		t.Fatalf("decoded tolerance evidence: %v, %v", got, err)
	}
	rb, err := good.Receipts[0].MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a receipt with logits: %d bytes (max %d)", len(rb), MaxReceiptSize)
	// A receipt without logits encodes as before: no trailing section.
	plain := s[1].receipt(t, "in", "out")
	pb, err := plain.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var pr Receipt
	if err := pr.UnmarshalBinary(pb); err != nil || pr.Logits != nil || pr.Verify() != nil {
		t.Fatalf("plain receipt: %v %+v", err, pr)
	}
}

// sampleToleranceFault is a tolerance-kind NodeFaulted from fixed keys.
func sampleToleranceFault(t testing.TB) NodeFaulted {
	var s [3]signer
	for i := range s {
		k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{byte(i + 11)}, 64)))
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = signer{id, k}
	}
	return NodeFaulted{Node: s[0].id.String(), Accuser: s[1].id.String(), Until: t0.Add(time.Hour), Evidence: toleranceEvidence(t, s)}
}

// sampleMidToleranceFault is a mid-path tolerance NodeFaulted (tails,
// an engine label) from fixed keys.
func sampleMidToleranceFault(t testing.TB) NodeFaulted {
	var s [4]signer
	for i := range s {
		k, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{byte(i + 21)}, 64)))
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = signer{id, k}
	}
	return NodeFaulted{Node: s[0].id.String(), Accuser: s[1].id.String(), Until: t0.Add(time.Hour),
		Evidence: midEvidence(t, [3]signer{s[0], s[1], s[2]}, s[3], "ggml-test")}
}

// TestToleranceReportOnCluster: on a real 4-member cluster the leader
// re-checks the numbers of tolerance evidence: logits within the
// tolerance, sent straight to the leader as a NodeFaulted request, are
// refused (the accuser is not believed, nothing is appended); genuine
// tolerance evidence evicts the accused with the shorter ban.
func TestToleranceReportOnCluster(t *testing.T) {
	cl, leader, others := faultCluster(t)
	accused, accuser, witness := others[0], others[1], leader
	sig := func(n *testNode) signer { return signer{id: n.h.ID(), key: n.key} }
	toks := []int32{5, 6, 7, 8}

	forged := Evidence{Tolerance: true, Receipts: [3]Receipt{
		sig(accused).tolReceipt(t, "ggml-test", toks, row(1000, 17, 0.04)),
		sig(accuser).tolReceipt(t, "go", toks, row(1000, 17, 0)),
		sig(witness).tolReceipt(t, "go", toks, row(1000, 17, 0)),
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := leader.c().State().Applied()
	err := accuser.c().ctl.request(ctx, NodeFaulted{Node: accused.id(), Accuser: accuser.id(), Evidence: forged})
	if !errors.Is(err, ErrBadEvidence) {
		t.Fatalf("tolerance evidence within the tolerance: %v, want ErrBadEvidence", err)
	}
	if s := leader.c().State(); !s.IsMember(accused.id()) || len(s.Bans()) != 0 || s.Applied() != before {
		t.Fatalf("refused evidence changed the state: member %v bans %v applied %d→%d", s.IsMember(accused.id()), s.Bans(), before, s.Applied())
	}

	lie := row(1000, 17, 0)
	lie[40] = 20
	good := forged
	good.Receipts[0] = sig(accused).tolReceipt(t, "ggml-test", toks, lie)
	start := time.Now()
	if err := accuser.c().ReportFault(ctx, good); err != nil {
		t.Fatalf("genuine tolerance evidence: %v", err)
	}
	cl.waitAll("evicted", 20*time.Second, func(s State) bool {
		_, banned := s.Banned(accused.id(), time.Now())
		return banned && !s.IsMember(accused.id())
	})
	until, _ := leader.c().State().Banned(accused.id(), time.Now())
	if d := until.Sub(start); d > time.Hour/ToleranceBanDivisor+30*time.Second || d <= 0 {
		t.Fatalf("tolerance ban of %v, want about %v", d, time.Hour/ToleranceBanDivisor)
	}
}

// midEvidence: s[0..2] ran layers [2, 4) in three check sessions, each
// followed directly by tail's last stage [4, 8); the accused's run
// moved the logits.
func midEvidence(t testing.TB, s [3]signer, tail signer, engine string) Evidence {
	t.Helper()
	toks := []int32{5, 6, 7, 8}
	ev := Evidence{Tolerance: true, Tails: make([]Receipt, 3)}
	for k := range s {
		r := Receipt{Signer: s[k].id, Model: 7, From: 2, To: 4, Positions: len(toks), Session: [16]byte{byte(k + 1)},
			InChain: sha256.Sum256([]byte("in")), OutChain: sha256.Sum256([]byte{byte(k)}), OutLast: sha256.Sum256([]byte{byte(k), 1})}
		if k == 0 {
			r.Engine = engine
		}
		if err := r.Sign(s[k].key); err != nil {
			t.Fatal(err)
		}
		ev.Receipts[k] = r
		lg := row(1000, 17, 0.01*float32(k))
		if k == 0 {
			lg[40] = 20
		}
		tr := tail.tolReceipt(t, "go", toks, lg)
		tr.Session, tr.InChain = r.Session, r.OutChain
		if err := tr.Sign(tail.key); err != nil {
			t.Fatal(err)
		}
		ev.Tails[k] = tr
	}
	return ev
}

// TestToleranceMidEvidence: tolerance evidence against a hop before the
// last, where the compared logits are a fourth node's (the same last hop
// after each of the three holders): valid evidence accuses the odd hop
// and round-trips in a record; evidence against a hop whose signed
// receipt names the go engine or none, tails from other sessions or
// signers, tails fed other rows, or numbers within the tolerance is
// refused with ErrBadEvidence.
func TestToleranceMidEvidence(t *testing.T) {
	s := [3]signer{newSigner(t), newSigner(t), newSigner(t)}
	tail := newSigner(t)
	good := midEvidence(t, s, tail, "ggml-test")
	if got, err := good.Check(); err != nil || got != s[0].id {
		t.Fatalf("valid mid-path evidence: accused %v, %v", got, err)
	}
	mod := func(f func(*Evidence)) Evidence {
		e := good
		e.Tails = append([]Receipt(nil), good.Tails...)
		f(&e)
		return e
	}
	resign := func(r *Receipt, k signer) {
		if err := r.Sign(k.key); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]Evidence{
		"accused names go":   midEvidence(t, s, tail, "go"),
		"accused names none": midEvidence(t, s, tail, ""),
		"tail of another session": mod(func(e *Evidence) {
			e.Tails[1].Session = [16]byte{9}
			resign(&e.Tails[1], tail)
		}),
		"tail fed other rows": mod(func(e *Evidence) {
			e.Tails[0].InChain = sha256.Sum256([]byte("other"))
			resign(&e.Tails[0], tail)
		}),
		"tails of two signers": mod(func(e *Evidence) {
			e.Tails[2].Signer = s[2].id
			resign(&e.Tails[2], s[2])
		}),
		"accused within tolerance": mod(func(e *Evidence) {
			e.Tails[0] = e.Tails[2]
			e.Tails[0].Session, e.Tails[0].InChain = e.Receipts[0].Session, e.Receipts[0].OutChain
			resign(&e.Tails[0], tail)
		}),
		"two tails":  mod(func(e *Evidence) { e.Tails = e.Tails[:2] }),
		"exact kind": mod(func(e *Evidence) { e.Tolerance = false }),
		"tail changed after signing": mod(func(e *Evidence) {
			l := *e.Tails[1].Logits
			l.MaxAbs *= 2
			e.Tails[1].Logits = &l
		}),
	}
	for name, ev := range cases {
		if _, err := ev.Check(); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("%s: %v, want ErrBadEvidence", name, err)
		}
	}
	f := NodeFaulted{Node: s[0].id.String(), Accuser: s[1].id.String(), Until: t0.Add(time.Hour), Evidence: good}
	raw, err := MarshalRecord(rec(3, f))
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	ev := back.Event.(NodeFaulted).Evidence
	if !ev.Tolerance || len(ev.Tails) != 3 || ev.Receipts[0].Engine != "ggml-test" {
		t.Fatalf("decoded evidence lost its kind, tails or engine: %+v", ev)
	}
	if got, err := ev.Check(); err != nil || got != s[0].id {
		t.Fatalf("decoded mid-path evidence: %v, %v", got, err)
	}
	// A receipt with an engine label and logits round-trips; a section out
	// of order is refused.
	r := good.Tails[0]
	r.Engine = "ggml-test"
	resign(&r, tail)
	rb, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back2 Receipt
	if err := back2.UnmarshalBinary(rb); err != nil || back2.Engine != r.Engine || back2.Logits == nil || back2.Verify() != nil {
		t.Fatalf("receipt with logits and engine: %v %+v", err, back2)
	}
	if err := back2.UnmarshalBinary(append(rb, 1)); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("a logits section after the engine: %v, want ErrBadEvent", err)
	}
}

// BenchmarkSummarizeLogits: what a last hop spends per step keeping its
// logits summary (every session's last hop does, for mid-path checks),
// on a 32,000-entry row (a Llama-2-sized vocabulary).
func BenchmarkSummarizeLogits(b *testing.B) {
	lg := row(32000, 17, 0.01)
	for b.Loop() {
		SummarizeLogits(lg, LogitsTop)
	}
}
