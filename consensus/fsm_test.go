package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testCaps(t testing.TB) Capabilities {
	t.Helper()
	h, err := layers.Device("l40s")
	if err != nil {
		t.Fatal(err)
	}
	return Capabilities{Hardware: h, Region: "eu"}
}

func rec(at int, e Event) Record {
	return Record{At: t0.Add(time.Duration(at) * time.Second), Event: e}
}

func mustMap(t testing.TB, L int, epoch uint64, stages ...layers.Stage) layers.LayerMap {
	t.Helper()
	m, err := layers.NewLayerMap(L, epoch, stages...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func st(node string, s, e int) layers.Stage {
	return layers.Stage{Node: node, Range: layers.Range{Start: s, End: e}}
}

func mustApply(t *testing.T, s State, r Record) State {
	t.Helper()
	next, err := s.Apply(r)
	if err != nil {
		t.Fatalf("apply %s: %v", r.Event.Kind(), err)
	}
	return next
}

func TestFoldLifecycle(t *testing.T) {
	caps := testCaps(t)
	var s State
	for i, id := range []string{"a", "b", "c"} {
		s = mustApply(t, s, rec(i, NodeJoined{Node: id, Caps: caps, Fingerprint: "fp1", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}))
	}
	if s.Len() != 3 || s.Fingerprint() != "fp1" {
		t.Fatalf("members %d fingerprint %q", s.Len(), s.Fingerprint())
	}
	// A different model is refused, clearly, and changes nothing.
	before, _ := s.MarshalBinary()
	_, err := s.Apply(rec(5, NodeJoined{Node: "d", Caps: caps, Fingerprint: "fp2"}))
	if !errors.Is(err, ErrFingerprint) {
		t.Fatalf("join with another fingerprint: %v", err)
	}
	after, _ := s.MarshalBinary()
	if !bytes.Equal(before, after) {
		t.Fatal("a refused record changed the state")
	}

	m1 := mustMap(t, 8, 1, st("a", 0, 4), st("b", 3, 8), st("c", 0, 8))
	s = mustApply(t, s, rec(6, MapProposed{Map: m1, Deadline: t0.Add(time.Minute), Reason: "first"}))
	p, ok := s.Pending()
	if !ok || !slices.Equal(p.Waiting(), []string{"a", "b", "c"}) {
		t.Fatalf("pending %v waiting %v", ok, p.Waiting())
	}
	if _, err := s.Apply(rec(7, MapCommitted{Epoch: 1})); !errors.Is(err, ErrRejected) {
		t.Fatalf("commit before ready: %v", err)
	}
	if _, err := s.Apply(rec(7, StageReady{Node: "a", Epoch: 1, Range: layers.Range{Start: 0, End: 5}})); !errors.Is(err, ErrStale) {
		t.Fatalf("ready for another range: %v", err)
	}
	for _, stg := range m1.Stages {
		s = mustApply(t, s, rec(8, StageReady{Node: stg.Node, Epoch: 1, Range: stg.Range}))
	}
	s = mustApply(t, s, rec(9, MapCommitted{Epoch: 1}))
	if !s.Committed().Equal(m1) {
		t.Fatalf("committed %+v", s.Committed())
	}
	if _, ok := s.Pending(); ok {
		t.Fatal("pending after commit")
	}

	// A shrink loads nothing: only the grown node waits.
	m2 := mustMap(t, 8, 2, st("a", 0, 3), st("b", 2, 8), st("c", 0, 8))
	s = mustApply(t, s, rec(10, MapProposed{Map: m2}))
	p, _ = s.Pending()
	if !slices.Equal(p.Waiting(), []string{"b"}) || !p.Ready("a") || p.Loads("a") {
		t.Fatalf("waiting %v", p.Waiting())
	}
	if mv := p.Moves(s.Committed()); len(mv) != 2 {
		t.Fatalf("moves %+v", mv)
	}
	// Abandon: b becomes a laggard, the committed map stays.
	s = mustApply(t, s, rec(11, WarmupAbandoned{Epoch: 2, Laggards: []string{"b"}, Until: t0.Add(time.Hour)}))
	if mb, _ := s.Member("b"); !mb.LaggardUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("laggard until %v", mb.LaggardUntil)
	}
	if !s.Committed().Equal(m1) {
		t.Fatal("abandon changed the committed map")
	}

	// Drain, leave: the committed map keeps the node until a repair.
	s = mustApply(t, s, rec(12, NodeDraining{Node: "c"}))
	// A draining node may keep or shrink its range while others load,
	// never take new layers.
	if _, err := s.Apply(rec(13, MapProposed{Map: mustMap(t, 8, 2, st("a", 0, 8), st("c", 2, 8))})); err != nil {
		t.Fatalf("draining node keeps part of its range: %v", err)
	}
	da := mustApply(t, s, rec(13, NodeDraining{Node: "a"}))
	if _, err := da.Apply(rec(13, MapProposed{Map: mustMap(t, 8, 2, st("a", 0, 5), st("b", 3, 8))})); !errors.Is(err, ErrRejected) {
		t.Fatalf("draining node given new layers: %v", err)
	}
	s = mustApply(t, s, rec(14, NodeLeft{Node: "c", Reason: LeftGracefully}))
	if s.IsMember("c") || !s.Committed().Equal(m1) {
		t.Fatal("leave")
	}
	if _, err := s.Apply(rec(15, NodeLeft{Node: "c", Reason: LeftGracefully})); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("second leave: %v", err)
	}
	if _, err := s.Apply(rec(15, MapProposed{Map: m2})); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("proposal placing a departed node: %v", err)
	}
	if _, err := s.Apply(rec(15, MapProposed{Map: mustMap(t, 8, 2, st("a", 0, 5))})); !errors.Is(err, ErrRejected) {
		t.Fatalf("proposal with a gap: %v", err)
	}
	if s.Applied() != 12 {
		t.Fatalf("applied %d", s.Applied())
	}
}

func TestProposalReplacesPendingKeepsReadiness(t *testing.T) {
	caps := testCaps(t)
	var s State
	for _, id := range []string{"a", "b"} {
		s = mustApply(t, s, rec(0, NodeJoined{Node: id, Caps: caps, Fingerprint: "fp"}))
	}
	s = mustApply(t, s, rec(1, MapProposed{Map: mustMap(t, 4, 1, st("a", 0, 2), st("b", 2, 4))}))
	s = mustApply(t, s, rec(2, StageReady{Node: "a", Epoch: 1, Range: layers.Range{Start: 0, End: 2}}))
	// b never loads; the leader re-plans with a on everything... then a
	// new plan that keeps a's range.
	s = mustApply(t, s, rec(3, MapProposed{Map: mustMap(t, 4, 1, st("a", 0, 2), st("b", 1, 4))}))
	p, _ := s.Pending()
	if !p.Ready("a") || p.Ready("b") {
		t.Fatalf("a ready %v, b ready %v", p.Ready("a"), p.Ready("b"))
	}
}

// randomLog builds a log of plausible and implausible records: joins
// (some with the wrong model), drains, leaves, proposals, readies,
// commits and abandons, driven by the state it has so far.
func randomLog(seed uint64, n int) []Record {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h, _ := layers.Device("rtx-4090")
	if h.Name == "" {
		h, _ = layers.Device("l40s")
	}
	pool := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	const L = 12
	var s State
	var out []Record
	at := 0
	for len(out) < n {
		at++
		id := pool[rng.IntN(len(pool))]
		var e Event
		switch k := rng.IntN(10); {
		case k < 2:
			fp := "fp"
			if rng.IntN(10) == 0 {
				fp = "other"
			}
			e = NodeJoined{Node: id, Caps: Capabilities{Hardware: h, MaxLayers: rng.IntN(8), Relayed: rng.IntN(4) == 0},
				Fingerprint: fp, Addrs: []string{fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", 4000+rng.IntN(100))}}
		case k < 3:
			if rng.IntN(2) == 0 {
				e = NodeDraining{Node: id}
			} else {
				e = NodeLeft{Node: id, Reason: LeaveReason(1 + rng.IntN(2))}
			}
		case k < 5:
			members := s.Members()
			if len(members) == 0 {
				continue
			}
			var stages []layers.Stage
			pos := 0
			for pos < L {
				m := members[rng.IntN(len(members))]
				end := min(L, pos+1+rng.IntN(6))
				start := max(0, pos-rng.IntN(2))
				stages = append(stages, st(m.ID, start, end))
				pos = end
			}
			slices.SortFunc(stages, func(a, b layers.Stage) int { return cmpStr(a.Node, b.Node) })
			stages = slices.CompactFunc(stages, func(a, b layers.Stage) bool { return a.Node == b.Node })
			epoch := s.Committed().Epoch + 1
			if rng.IntN(8) == 0 {
				epoch += 1
			}
			m := layers.LayerMap{Epoch: epoch, Layers: L, Stages: stages}
			if m.Validate() != nil {
				continue
			}
			e = MapProposed{Map: m, Deadline: t0.Add(time.Duration(at+30) * time.Second), Reason: "random"}
		case k < 8:
			p, ok := s.Pending()
			if !ok {
				continue
			}
			w := p.Waiting()
			if len(w) == 0 || rng.IntN(5) == 0 {
				e = MapCommitted{Epoch: p.Map.Epoch}
				break
			}
			node := w[rng.IntN(len(w))]
			r, _ := p.Map.Range(node)
			e = StageReady{Node: node, Epoch: p.Map.Epoch, Range: r}
		case k < 9:
			p, ok := s.Pending()
			if !ok {
				continue
			}
			e = WarmupAbandoned{Epoch: p.Map.Epoch, Laggards: p.Waiting(), Until: t0.Add(time.Duration(at+60) * time.Second)}
		default:
			e = MapCommitted{Epoch: uint64(rng.IntN(4))}
		}
		r := Record{At: t0.Add(time.Duration(at) * time.Second), Event: e}
		out = append(out, r)
		s, _ = s.Apply(r)
	}
	return out
}

func encodeState(t testing.TB, s State) []byte {
	t.Helper()
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplayDeterminism: the same log, folded again, through the wire
// encoding, or from a snapshot taken anywhere in it, gives the same state
// byte for byte.
func TestReplayDeterminism(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		log := randomLog(seed, 300)
		want := encodeState(t, Fold(log...))
		if got := encodeState(t, Fold(log...)); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: a second fold differs", seed)
		}
		// Through the record encoding, as raft carries it.
		var s State
		for i, r := range log {
			b, err := MarshalRecord(r)
			if err != nil {
				t.Fatalf("seed %d record %d (%s): %v", seed, i, r.Event.Kind(), err)
			}
			r2, err := UnmarshalRecord(b)
			if err != nil {
				t.Fatalf("seed %d record %d: %v", seed, i, err)
			}
			s, _ = s.Apply(r2)
		}
		if got := encodeState(t, s); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: fold of decoded records differs", seed)
		}
		// Snapshot at a random point, restore, replay the rest.
		cut := int(seed*37) % len(log)
		snap := encodeState(t, Fold(log[:cut]...))
		var r State
		if err := r.UnmarshalBinary(snap); err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		if again := encodeState(t, r); !bytes.Equal(again, snap) {
			t.Fatalf("seed %d: snapshot round trip differs", seed)
		}
		for _, rr := range log[cut:] {
			r, _ = r.Apply(rr)
		}
		if got := encodeState(t, r); !bytes.Equal(got, want) {
			t.Fatalf("seed %d: restore at %d then replay differs", seed, cut)
		}
	}
}

// TestRandomLogExercisesEveryKind keeps the generator honest: the
// determinism test is only as good as the records it admits.
func TestRandomLogExercisesEveryKind(t *testing.T) {
	admitted := map[Kind]int{}
	var s State
	commits := 0
	for seed := uint64(1); seed <= 20; seed++ {
		s = State{}
		for _, r := range randomLog(seed, 300) {
			next, err := s.Apply(r)
			if err == nil {
				admitted[r.Event.Kind()]++
			}
			s = next
		}
		commits += int(s.Committed().Epoch)
	}
	for k := KindNodeJoined; k <= KindWarmupAbandoned; k++ {
		if admitted[k] == 0 {
			t.Errorf("no %s admitted", k)
		}
	}
	t.Logf("admitted %v, epochs committed %d", admitted, commits)
}

func TestSnapshotRejectsGarbage(t *testing.T) {
	good := encodeState(t, Fold(randomLog(3, 200)...))
	for i := range good {
		var s State
		_ = s.UnmarshalBinary(good[:i]) // must not panic
		if err := s.UnmarshalBinary(good[:i]); err == nil {
			t.Fatalf("truncated at %d decoded", i)
		} else if !errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrBadEvent) {
			t.Fatalf("truncated at %d: %v", i, err)
		}
	}
	if err := new(State).UnmarshalBinary(append(good, 0)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("trailing byte: %v", err)
	}
}
