package consensus

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

type signer struct {
	id  peer.ID
	key crypto.PrivKey
}

func newSigner(t testing.TB) signer {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return signer{id, k}
}

// receipt signs a claim over the input chain "in" with output "out".
func (s signer) receipt(t testing.TB, in, out string) Receipt {
	t.Helper()
	r := Receipt{Signer: s.id, Model: 7, From: 2, To: 6, Positions: 40,
		InChain: sha256.Sum256([]byte(in)), OutChain: sha256.Sum256([]byte(out)), OutLast: sha256.Sum256([]byte(out + "last"))}
	r.Session[0] = byte(len(in))
	if err := r.Sign(s.key); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEvidenceCheck(t *testing.T) {
	liar, a, b := newSigner(t), newSigner(t), newSigner(t)
	good := Evidence{Receipts: [3]Receipt{liar.receipt(t, "in", "wrong"), a.receipt(t, "in", "right"), b.receipt(t, "in", "right")}}
	got, err := good.Check()
	if err != nil || got != liar.id {
		t.Fatalf("valid evidence: accused %v, %v", got, err)
	}

	forged := good
	// A signature over different bytes: the honest node's signature on
	// another claim, pasted onto a made-up one.
	forged.Receipts[0] = a.receipt(t, "in", "right")
	other := a.receipt(t, "in", "wrong")
	forged.Receipts[0].OutChain = other.OutChain
	forged.Receipts[0].OutLast = other.OutLast
	forged.Receipts[1] = liar.receipt(t, "in", "right")
	if _, err := forged.Check(); !errors.Is(err, ErrBadEvidence) {
		t.Fatalf("forged signature accepted: %v", err)
	}

	cases := map[string]Evidence{
		"witnesses disagree":  {Receipts: [3]Receipt{liar.receipt(t, "in", "x"), a.receipt(t, "in", "y"), b.receipt(t, "in", "z")}},
		"other input":         {Receipts: [3]Receipt{liar.receipt(t, "in", "x"), a.receipt(t, "in2", "y"), b.receipt(t, "in2", "y")}},
		"accused agrees":      {Receipts: [3]Receipt{liar.receipt(t, "in", "y"), a.receipt(t, "in", "y"), b.receipt(t, "in", "y")}},
		"one witness twice":   {Receipts: [3]Receipt{liar.receipt(t, "in", "x"), a.receipt(t, "in", "y"), a.receipt(t, "in", "y")}},
		"accused as witness":  {Receipts: [3]Receipt{liar.receipt(t, "in", "x"), liar.receipt(t, "in", "y"), a.receipt(t, "in", "y")}},
		"truncated signature": func() Evidence { e := good; e.Receipts[2].Sig = e.Receipts[2].Sig[:10]; return e }(),
	}
	for name, ev := range cases {
		if _, err := ev.Check(); !errors.Is(err, ErrBadEvidence) {
			t.Errorf("%s: %v, want ErrBadEvidence", name, err)
		}
	}
}

func TestNodeFaultedEvictsAndBans(t *testing.T) {
	liar, a, b := newSigner(t), newSigner(t), newSigner(t)
	caps := testCaps(t)
	join := func(id peer.ID) NodeJoined {
		return NodeJoined{Node: id.String(), Caps: caps, Fingerprint: "fp"}
	}
	s := Fold(rec(0, join(liar.id)), rec(1, join(a.id)), rec(2, join(b.id)))
	ev := Evidence{Receipts: [3]Receipt{liar.receipt(t, "in", "wrong"), a.receipt(t, "in", "right"), b.receipt(t, "in", "right")}}
	until := t0.Add(time.Hour)
	fault := NodeFaulted{Node: liar.id.String(), Accuser: a.id.String(), Until: until, Evidence: ev}

	// The record round-trips, evidence included.
	raw, err := MarshalRecord(rec(3, fault))
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalRecord(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := back.Event.(NodeFaulted).Evidence.Check(); err != nil {
		t.Fatalf("decoded evidence: %v", err)
	}

	// Accusing an honest witness with the same receipts is refused.
	wrong := fault
	wrong.Node = a.id.String()
	if _, err := s.Apply(rec(3, wrong)); !errors.Is(err, ErrRejected) {
		t.Fatalf("accusation of the wrong node: %v", err)
	}
	s = mustApply(t, s, back)
	if s.IsMember(liar.id.String()) || !s.IsMember(a.id.String()) {
		t.Fatalf("members after the fault: %v", s.Members())
	}
	if _, banned := s.Banned(liar.id.String(), t0.Add(10*time.Second)); !banned {
		t.Fatal("not banned")
	}
	// Rejoining during the ban is refused; after it, admitted.
	if _, err := s.Apply(rec(60, join(liar.id))); !errors.Is(err, ErrBanned) {
		t.Fatalf("rejoin while banned: %v", err)
	}
	if _, err := s.Apply(Record{At: until.Add(time.Second), Event: join(liar.id)}); err != nil {
		t.Fatalf("rejoin after the ban: %v", err)
	}

	// The ban survives a snapshot.
	snap, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var r State
	if err := r.UnmarshalBinary(snap); err != nil {
		t.Fatal(err)
	}
	if got, banned := r.Banned(liar.id.String(), t0.Add(10*time.Second)); !banned || !got.Equal(until) {
		t.Fatalf("ban after a snapshot: %v %v", got, banned)
	}
}

// TestFaultReportOnCluster: on a real 4-member cluster, an accusation
// whose receipt carries a signature over other bytes is refused by the
// leader (the accuser is not believed, nothing is appended); genuine
// evidence evicts the accused, the map is repaired without it, and its
// rejoin is refused while the ban lasts.
func TestFaultReportOnCluster(t *testing.T) {
	cl := newCluster(t, WithBanDuration(time.Hour))
	var ids []peer.ID
	var boot []peer.AddrInfo
	for range 4 {
		n := cl.addHost(false)
		ids = append(ids, n.h.ID())
		boot = append(boot, n.info())
	}
	for _, n := range cl.all() {
		cl.start(n, WithInitialVoters(ids[:3]...), WithBootstrap(boot...))
	}
	leader, _ := cl.leader(10 * time.Second)
	var all []string
	for _, id := range ids {
		all = append(all, id.String())
	}
	cl.waitAll("all joined and placed", 20*time.Second, placed(all...))
	// The accused is not the leader (a leader is not evicted by its own
	// log here); the accuser is another follower, so the request is
	// forwarded.
	var others []*testNode
	for _, n := range cl.all() {
		if n != leader {
			others = append(others, n)
		}
	}
	accused, accuser, witness := others[0], others[1], leader
	sig := func(n *testNode) signer { return signer{id: n.h.ID(), key: n.key} }

	forged := Evidence{Receipts: [3]Receipt{sig(accused).receipt(t, "in", "right"), sig(accuser).receipt(t, "in", "right"),
		sig(witness).receipt(t, "in", "right")}}
	// The accused's honest signature, pasted onto a claim it never made.
	forged.Receipts[0].OutLast[0] ^= 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := leader.c().State().Applied()
	err := accuser.c().request(ctx, NodeFaulted{Node: accused.id(), Accuser: accuser.id(), Evidence: forged})
	if !errors.Is(err, ErrBadEvidence) {
		t.Fatalf("forged evidence: %v, want ErrBadEvidence", err)
	}
	if err := accuser.c().ReportFault(ctx, forged); !errors.Is(err, ErrBadEvidence) {
		t.Fatalf("forged evidence through ReportFault: %v", err)
	}
	if s := leader.c().State(); !s.IsMember(accused.id()) || len(s.Bans()) != 0 || s.Applied() != before {
		t.Fatalf("forged evidence changed the state: member %v bans %v applied %d→%d", s.IsMember(accused.id()), s.Bans(), before, s.Applied())
	}

	good := Evidence{Receipts: [3]Receipt{sig(accused).receipt(t, "in", "wrong"), sig(accuser).receipt(t, "in", "right"),
		sig(witness).receipt(t, "in", "right")}}
	if err := accuser.c().ReportFault(ctx, good); err != nil {
		t.Fatalf("genuine evidence: %v", err)
	}
	var rest []string
	for _, n := range cl.all() {
		if n != accused {
			rest = append(rest, n.id())
		}
	}
	cl.waitAll("evicted and the map repaired", 20*time.Second, func(s State) bool {
		_, banned := s.Banned(accused.id(), time.Now())
		_, placedStill := s.Committed().Range(accused.id())
		return banned && !s.IsMember(accused.id()) && !placedStill && placed(rest...)(s)
	})
	if err := accused.c().request(ctx, accused.c().joinEvent()); !errors.Is(err, ErrBanned) {
		t.Fatalf("rejoin while banned: %v, want ErrBanned", err)
	}
}
