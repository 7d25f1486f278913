package consensus

import (
	"fmt"
	"testing"
)

// stateWith is a fold of joins of ids, with stewards set directly (as
// the leader scripts do: the signature is stewards_test.go's business).
func stateWith(t *testing.T, stewards []string, ids ...string) State {
	t.Helper()
	w := newWorld(t)
	for _, id := range ids {
		if s := w.appendEvent(w.joinEvent(id, nil)); s != "" {
			t.Fatal(s)
		}
	}
	if len(stewards) > 0 {
		w.in.State.stewards.ids, w.in.State.stewards.seq = stewards, 1
	}
	return w.in.State
}

func TestVerifiedChecks(t *testing.T) {
	s := stateWith(t, []string{"a", "b"}, "a", "b", "c", "d", "e")
	vs := []Vouch{
		{"a", "c", 3}, {"a", "c", 5}, // repeated: the largest counts
		{"b", "c", 2},
		{"d", "c", 3}, {"e", "c", 3}, // non-stewards: at most k/2 together
		{"c", "c", 50},  // oneself: nothing
		{"x", "d", 50},  // a non-member checker: nothing
		{"a", "x", 50},  // a non-member subject: nothing
		{"a", "d", -4},  // a negative count: nothing
		{"c", "d", 1},   // below the cap
		{"c", "a", 100}, // a steward's weight needs no checks, but they count
	}
	got := s.VerifiedChecks(vs, 8)
	want := map[string]int{"c": 5 + 2 + 4, "d": 1, "a": 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("verified checks %v, want %v", got, want)
	}
	tr := s.Trust(vs, 8)
	if !tr.Verified("a") || !tr.Verified("b") || !tr.Verified("c") || tr.Verified("d") || tr.Verified("e") {
		t.Fatalf("trust %+v", tr)
	}
	// Twenty Sybils vouching for each other without limit stay below K.
	ids := []string{"a"}
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	s = stateWith(t, []string{"a"}, ids...)
	var crowd []Vouch
	for _, c := range ids[1:] {
		for _, x := range ids[1:] {
			crowd = append(crowd, Vouch{c, x, 1 << 20})
		}
	}
	tr = s.Trust(crowd, 0)
	for _, id := range ids[1:] {
		if tr.Verified(id) || tr.Checks[id] != DefaultTrustChecks/2 {
			t.Fatalf("sybil %s: checks %d, weight %v", id, tr.Checks[id], tr.Weight(id))
		}
	}
	// Without stewards the swarm trusts its members: nothing is counted
	// and everyone weighs fully.
	s = stateWith(t, nil, "a", "b")
	if got := s.VerifiedChecks([]Vouch{{"a", "b", 3}}, 8); got != nil {
		t.Fatalf("no stewards: %v", got)
	}
	if tr := s.Trust(nil, 8); !tr.Verified("b") || tr.Full != 0 {
		t.Fatalf("no stewards: trust %+v", tr)
	}
}
