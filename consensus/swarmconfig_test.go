package consensus

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// TestSwarmConfigSet: the rate folds in, the same rate again is stale,
// and rates outside [0, 1] (NaN too) are refused by Apply, by the record
// codec and by the option.
func TestSwarmConfigSet(t *testing.T) {
	var s State
	if _, ok := s.VerifyRate(); ok {
		t.Fatal("a rate before any was set")
	}
	s = mustApply(t, s, rec(1, SwarmConfigSet{VerifyRate: 0.05}))
	if r, ok := s.VerifyRate(); !ok || r != 0.05 {
		t.Fatalf("rate %v %v, want 0.05", r, ok)
	}
	if _, err := s.Apply(rec(2, SwarmConfigSet{VerifyRate: 0.05})); !errors.Is(err, ErrStale) {
		t.Fatalf("the same rate again: %v", err)
	}
	s = mustApply(t, s, rec(2, SwarmConfigSet{VerifyRate: 0}))
	if r, ok := s.VerifyRate(); !ok || r != 0 {
		t.Fatalf("rate %v %v, want 0 (checks off, but set)", r, ok)
	}
	for _, bad := range []float64{-0.01, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := s.Apply(rec(3, SwarmConfigSet{VerifyRate: bad})); !errors.Is(err, ErrRejected) {
			t.Errorf("Apply of rate %v: %v", bad, err)
		}
		if _, err := MarshalRecord(rec(3, SwarmConfigSet{VerifyRate: bad})); !errors.Is(err, ErrBadEvent) {
			t.Errorf("MarshalRecord of rate %v: %v", bad, err)
		}
		if err := WithVerifyRate(bad)(&config{}); !errors.Is(err, ErrConfig) {
			t.Errorf("WithVerifyRate(%v): %v", bad, err)
		}
	}
	// A record whose rate bytes were changed to 2 is refused on decoding.
	b, err := MarshalRecord(rec(3, SwarmConfigSet{VerifyRate: 0.5}))
	if err != nil {
		t.Fatal(err)
	}
	two := appendF64(nil, 2)
	b = append(b[:len(b)-8], two...)
	if _, err := UnmarshalRecord(b); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("record with rate 2: %v", err)
	}
}

// TestSwarmConfigSnapshot: snapshots carry the rate with or without a
// manifest before it; snapshots written before it existed still read;
// cut, unknown or repeated sections are refused.
func TestSwarmConfigSnapshot(t *testing.T) {
	caps := testCaps(t)
	join := rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"})
	man := rec(2, ManifestPublished{Fingerprint: "fp", Manifest: []byte("the manifest")})
	cfg := rec(3, SwarmConfigSet{VerifyRate: 0.05})
	for _, c := range []struct {
		name     string
		recs     []Record
		rate     bool
		manifest bool
	}{
		{"rate only", []Record{join, cfg}, true, false},
		{"manifest and rate", []Record{join, man, cfg}, true, true},
		{"manifest only (as before)", []Record{join, man}, false, true},
		{"neither (as before)", []Record{join}, false, false},
	} {
		s := Fold(c.recs...)
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var r State
		if err := r.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rate, ok := r.VerifyRate()
		if ok != c.rate || (ok && rate != 0.05) || (r.Manifest() != nil) != c.manifest || r.Len() != 1 {
			t.Fatalf("%s: rate %v %v, manifest %q", c.name, rate, ok, r.Manifest())
		}
		again, err := r.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s: re-encoding differs (%v)", c.name, err)
		}
		// Cut inside the section: refused. (Cut before it, a snapshot
		// with a manifest is one without the rate, and reads as such.)
		for i := len(b) - 8; i < len(b) && c.rate; i++ {
			if err := r.UnmarshalBinary(b[:i]); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("%s: cut at %d of %d: %v", c.name, i, len(b), err)
			}
		}
	}
	b, err := Fold(join, cfg).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var r State
	for name, bad := range map[string][]byte{
		"placeholder with nothing after": b[:len(b)-9],
		"unknown section":                append(bytes.Clone(b), 7),
		"repeated section":               append(append(bytes.Clone(b), sectionConfig), appendF64(nil, 0.5)...),
		"rate above 1":                   append(bytes.Clone(b[:len(b)-8]), appendF64(nil, 1.5)...),
		"rate NaN":                       append(bytes.Clone(b[:len(b)-8]), appendF64(nil, math.NaN())...),
	} {
		if err := r.UnmarshalBinary(bad); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestDecideSetsSwarmConfig: a leader with a configured rate appends it
// while the state has none, and never again once it has one.
func TestDecideSetsSwarmConfig(t *testing.T) {
	caps := testCaps(t)
	s := Fold(rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"}))
	in := LeaderInput{Self: "a", State: s, Servers: []RaftServer{{ID: "a", Voter: true}}, Now: t0.Add(time.Minute),
		SwarmConfig: &SwarmConfigSet{VerifyRate: 0.05}, Config: LeaderConfig{Model: testModel(t), Planner: layers.NewPlanner(),
			CostParams: layers.DefaultCostParams(), DeadGrace: 10 * time.Second, MaxVoters: 3, Warmup: time.Minute}}
	act, _, err := Decide(in, NewLeaderState(t0))
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := act.(Append); !ok || a.Event != (SwarmConfigSet{VerifyRate: 0.05}) {
		t.Fatalf("action %v, want the rate appended", act)
	}
	in.State = Fold(rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"}), rec(2, SwarmConfigSet{VerifyRate: 0.2}))
	in.SwarmConfig = &SwarmConfigSet{VerifyRate: 0.05}
	act, _, err = Decide(in, NewLeaderState(t0))
	if a, ok := act.(Append); err == nil && ok && a.Event.Kind() == KindSwarmConfigSet {
		t.Fatalf("the leader overwrote the swarm's rate: %v", act)
	}
}

// TestSetVerifyRateCluster: the founder's rate reaches every member
// through Raft; the leader changes it; a follower may not.
func TestSetVerifyRateCluster(t *testing.T) {
	cl := newCluster(t)
	a, b := cl.addHost(false), cl.addHost(false)
	cl.start(a, WithVerifyRate(0.05))
	cl.start(b, WithBootstrap(a.info()), WithVerifyRate(0.9)) // not the founder: its rate is not the swarm's
	rateIs := func(want float64) func(State) bool {
		return func(s State) bool { r, ok := s.VerifyRate(); return ok && r == want }
	}
	cl.waitAll("the founder's rate at both", 30*time.Second, func(s State) bool { return rateIs(0.05)(s) && s.Len() == 2 })
	leader, _ := cl.leader(30 * time.Second)
	var follower *testNode
	for _, n := range cl.all() {
		if n != leader {
			follower = n
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := follower.c().SetVerifyRate(ctx, 0.5); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower set the rate: %v", err)
	}
	if err := leader.c().SetVerifyRate(ctx, 1.5); !errors.Is(err, ErrRejected) {
		t.Fatalf("rate 1.5: %v", err)
	}
	if err := leader.c().SetVerifyRate(ctx, 0.2); err != nil {
		t.Fatal(err)
	}
	if err := leader.c().SetVerifyRate(ctx, 0.2); err != nil {
		t.Fatalf("the same rate again: %v", err)
	}
	cl.waitAll("the new rate", 30*time.Second, rateIs(0.2))
}
