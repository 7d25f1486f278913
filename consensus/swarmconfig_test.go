package consensus

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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
	if _, ok := s.SwarmConfig().VerifyRate(); ok {
		t.Fatal("a rate before any was set")
	}
	s = mustApply(t, s, rec(1, SwarmConfigSet{VerifyRate: 0.05}))
	if r, ok := s.SwarmConfig().VerifyRate(); !ok || r != 0.05 {
		t.Fatalf("rate %v %v, want 0.05", r, ok)
	}
	if _, err := s.Apply(rec(2, SwarmConfigSet{VerifyRate: 0.05})); !errors.Is(err, ErrStale) {
		t.Fatalf("the same rate again: %v", err)
	}
	s = mustApply(t, s, rec(2, SwarmConfigSet{VerifyRate: 0}))
	if r, ok := s.SwarmConfig().VerifyRate(); !ok || r != 0 {
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
		rate, ok := r.SwarmConfig().VerifyRate()
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
		return func(s State) bool { r, ok := s.SwarmConfig().VerifyRate(); return ok && r == want }
	}
	cl.waitAll("the founder's rate at both", 30*time.Second, func(s State) bool { return rateIs(0.05)(s) && s.Len() == 2 })
	leader, _ := cl.leader(30 * time.Second)
	follower := cl.follower(leader)
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

// TestSessionTokensSet: the planner's session length folds in on its
// own (the verify rate stays unset), the same value again is stale, and
// values outside [0, MaxSessionTokens] are refused by Apply, by the
// record codec and by the option.
func TestSessionTokensSet(t *testing.T) {
	var s State
	if _, ok := s.SwarmConfig().SessionTokens(); ok {
		t.Fatal("a session length before any was set")
	}
	s = mustApply(t, s, rec(1, SessionTokensSet{Tokens: 1000}))
	if n, ok := s.SwarmConfig().SessionTokens(); !ok || n != 1000 {
		t.Fatalf("session tokens %d %v, want 1000", n, ok)
	}
	if _, ok := s.SwarmConfig().VerifyRate(); ok {
		t.Fatal("setting the session length set a verify rate")
	}
	if _, err := s.Apply(rec(2, SessionTokensSet{Tokens: 1000})); !errors.Is(err, ErrStale) {
		t.Fatalf("the same length again: %v", err)
	}
	s = mustApply(t, s, rec(2, SessionTokensSet{Tokens: 0}))
	if n, ok := s.SwarmConfig().SessionTokens(); !ok || n != 0 {
		t.Fatalf("session tokens %d %v, want 0 (off, but set)", n, ok)
	}
	s = mustApply(t, s, rec(3, SessionTokensSet{Tokens: MaxSessionTokens}))
	for _, bad := range []int{-1, MaxSessionTokens + 1, math.MaxInt} {
		if _, err := s.Apply(rec(4, SessionTokensSet{Tokens: bad})); !errors.Is(err, ErrRejected) {
			t.Errorf("Apply of %d: %v", bad, err)
		}
		if _, err := MarshalRecord(rec(4, SessionTokensSet{Tokens: bad})); !errors.Is(err, ErrBadEvent) {
			t.Errorf("MarshalRecord of %d: %v", bad, err)
		}
		if err := WithPlanSessionTokens(bad)(&config{}); !errors.Is(err, ErrConfig) {
			t.Errorf("WithPlanSessionTokens(%d): %v", bad, err)
		}
	}
	// A record whose length bytes say MaxSessionTokens+1 is refused on
	// decoding, as is one with a byte after the length.
	b, err := MarshalRecord(rec(4, SessionTokensSet{Tokens: MaxSessionTokens}))
	if err != nil {
		t.Fatal(err)
	}
	over := binary.AppendUvarint(nil, MaxSessionTokens+1)
	cut := len(b) - len(binary.AppendUvarint(nil, MaxSessionTokens))
	if _, err := UnmarshalRecord(append(bytes.Clone(b[:cut]), over...)); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("record with %d tokens: %v", MaxSessionTokens+1, err)
	}
	if _, err := UnmarshalRecord(append(bytes.Clone(b), 0)); !errors.Is(err, ErrBadEvent) {
		t.Fatalf("record with a trailing byte: %v", err)
	}
}

// Today's main wrote these before SessionTokensSet existed (hex): the
// record rec(3, SwarmConfigSet{0.05}); the snapshots of a join of "a"
// (testCaps, fingerprint "fp"), the manifest "the manifest" at 2 and that
// record; and of the join and the record alone.
const (
	oldConfigRecord   = "010d80c0b4f6d9bce586313fa999999999999a"
	oldSnapshotWithMa = "534353320266700380c0b4f6d9bce58631010161046c34307342280000000000004269254d380000004076a00000000000000000000000000002657500000080f08783cbbce5863100000000000c746865206d616e6966657374013fa999999999999a"
	oldSnapshotNoMan  = "534353320266700280c0b4f6d9bce58631010161046c34307342280000000000004269254d380000004076a00000000000000000000000000002657500000080f08783cbbce58631000000000000013fa999999999999a"
)

// TestOldSwarmConfigReads: a record and snapshots written before the
// session length existed read as a swarm without one, and encode to the
// same bytes (so a swarm that never sets it writes what older members
// read).
func TestOldSwarmConfigReads(t *testing.T) {
	b, err := hex.DecodeString(oldConfigRecord)
	if err != nil {
		t.Fatal(err)
	}
	r, err := UnmarshalRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Event != (SwarmConfigSet{VerifyRate: 0.05}) || !r.At.Equal(rec(3, nil).At) {
		t.Fatalf("old record read as %+v", r)
	}
	if again, err := MarshalRecord(r); err != nil || !bytes.Equal(again, b) {
		t.Fatalf("old record re-encodes as %x (%v)", again, err)
	}
	for _, c := range []struct {
		hex      string
		manifest bool
	}{{oldSnapshotWithMa, true}, {oldSnapshotNoMan, false}} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			t.Fatalf("old snapshot: %v", err)
		}
		rate, ok := s.SwarmConfig().VerifyRate()
		if _, has := s.SwarmConfig().SessionTokens(); !ok || rate != 0.05 || has || (s.Manifest() != nil) != c.manifest || !s.IsMember("a") {
			t.Fatalf("old snapshot read as rate %v %v, session tokens %v, manifest %q", rate, ok, has, s.Manifest())
		}
		if again, err := s.MarshalBinary(); err != nil || !bytes.Equal(again, b) {
			t.Fatalf("old snapshot re-encodes differently (%v)", err)
		}
	}
}

// TestSessionTokensSnapshot: snapshots carry the session length with or
// without a manifest and a verify rate before it; sections out of order,
// repeated, cut or out of bounds are refused.
func TestSessionTokensSnapshot(t *testing.T) {
	caps := testCaps(t)
	join := rec(1, NodeJoined{Node: "a", Caps: caps, Fingerprint: "fp"})
	man := rec(2, ManifestPublished{Fingerprint: "fp", Manifest: []byte("the manifest")})
	cfg := rec(3, SwarmConfigSet{VerifyRate: 0.05})
	tok := rec(4, SessionTokensSet{Tokens: 4000})
	for _, c := range []struct {
		name           string
		recs           []Record
		rate, manifest bool
	}{
		{"tokens only", []Record{join, tok}, false, false},
		{"manifest and tokens", []Record{join, man, tok}, false, true},
		{"rate and tokens", []Record{join, cfg, tok}, true, false},
		{"all three", []Record{join, man, cfg, tok}, true, true},
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
		n, ok := r.SwarmConfig().SessionTokens()
		_, rate := r.SwarmConfig().VerifyRate()
		if !ok || n != 4000 || rate != c.rate || (r.Manifest() != nil) != c.manifest || r.Len() != 1 {
			t.Fatalf("%s: tokens %d %v, rate %v, manifest %q", c.name, n, ok, rate, r.Manifest())
		}
		again, err := r.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%s: re-encoding differs (%v)", c.name, err)
		}
		// Cut inside the section (its tag stays): refused.
		if err := r.UnmarshalBinary(b[:len(b)-1]); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: cut: %v", c.name, err)
		}
	}
	b, err := Fold(join, tok).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	tail := len(binary.AppendUvarint(nil, 4000))
	var r State
	for name, bad := range map[string][]byte{
		"repeated section":    append(bytes.Clone(b), append([]byte{sectionSessionTokens}, binary.AppendUvarint(nil, 5)...)...),
		"rate after tokens":   append(bytes.Clone(b), append([]byte{sectionConfig}, appendF64(nil, 0.5)...)...),
		"tokens beyond max":   append(bytes.Clone(b[:len(b)-tail]), binary.AppendUvarint(nil, MaxSessionTokens+1)...),
		"non-canonical count": append(bytes.Clone(b[:len(b)-tail]), 0x80, 0x00),
	} {
		if err := r.UnmarshalBinary(bad); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// kvFleetPlan is the first map a leader proposes for a mixed fleet of
// big-model hosts, where a KV cap binds: the founder's configured session
// length (0: none), the configured cost parameters' and, when set, the
// state's from the start.
func kvFleetPlan(t *testing.T, founder, configured int, state *int) layers.LayerMap {
	t.Helper()
	w := newWorld(t)
	w.do("self n0")
	w.in.Config.CostParams.SessionTokens = configured
	if founder > 0 {
		w.in.SessionTokens = &SessionTokensSet{Tokens: founder}
	}
	if state != nil {
		if out := w.appendEvent(SessionTokensSet{Tokens: *state}); out != "" {
			t.Fatal(out)
		}
	}
	servers := "servers"
	for i, hw := range []string{"h100", "h100", "l40s", "l40s", "a100-40g", "rtx4090", "rtx4090"} {
		id := fmt.Sprintf("n%d", i)
		if out := w.do("join " + id + " hw=" + hw); out != "" {
			t.Fatal(out)
		}
		servers += " " + id
	}
	w.do(servers)
	for range 32 {
		out, again := w.step()
		if p, ok := w.in.State.Pending(); ok {
			if n, has := w.in.State.SwarmConfig().SessionTokens(); founder > 0 && state == nil && (!has || n != founder) {
				t.Fatalf("planned without the founder's length in the state (%d %v)", n, has)
			}
			return p.Map
		}
		if !again {
			t.Fatalf("the leader stopped before a first map: %s", out)
		}
	}
	t.Fatal("no first map after 32 steps")
	return layers.LayerMap{}
}

// TestDecidePlansWithStateSessionTokens: on a fleet where the KV cap
// binds, the leader plans with the state's session length: the founder's
// value appended, or one already in the state, gives the plan that the
// same length in the leader's own cost parameters gives, and a different
// one from planning without; a state value of 0 turns off a configured
// one.
func TestDecidePlansWithStateSessionTokens(t *testing.T) {
	zero, n := 0, 1000
	plain := kvFleetPlan(t, 0, 0, nil)
	configured := kvFleetPlan(t, 0, n, nil)
	if plain.Equal(configured) {
		t.Fatalf("the KV cap does not bind on this fleet: both plans %v", plain)
	}
	if got := kvFleetPlan(t, n, 0, nil); !got.Equal(configured) {
		t.Fatalf("founder's length: %v, want the KV-capped plan %v", got, configured)
	}
	if got := kvFleetPlan(t, 0, 0, &n); !got.Equal(configured) {
		t.Fatalf("state's length: %v, want the KV-capped plan %v", got, configured)
	}
	if got := kvFleetPlan(t, 0, n, &zero); !got.Equal(plain) {
		t.Fatalf("state's 0 over a configured %d: %v, want the plain plan %v", n, got, plain)
	}
	if got := kvFleetPlan(t, 4*n, 0, &n); !got.Equal(configured) {
		t.Fatalf("founder's %d over the state's %d: %v, want the state's plan %v", 4*n, n, got, configured)
	}
}

// TestSetSessionTokensCluster: the founder's length reaches every member
// through Raft; the leader changes it; a follower may not; a node
// without the option appends none.
func TestSetSessionTokensCluster(t *testing.T) {
	cl := newCluster(t)
	a, b := cl.addHost(false), cl.addHost(false)
	cl.start(a, WithPlanSessionTokens(1000))
	cl.start(b, WithBootstrap(a.info()), WithPlanSessionTokens(4000)) // not the founder's
	tokensAre := func(want int) func(State) bool {
		return func(s State) bool { n, ok := s.SwarmConfig().SessionTokens(); return ok && n == want }
	}
	cl.waitAll("the founder's length at both", 30*time.Second, func(s State) bool { return tokensAre(1000)(s) && s.Len() == 2 })
	leader, _ := cl.leader(30 * time.Second)
	follower := cl.follower(leader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := follower.c().SetSessionTokens(ctx, 2000); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower set the length: %v", err)
	}
	if err := leader.c().SetSessionTokens(ctx, MaxSessionTokens+1); !errors.Is(err, ErrRejected) {
		t.Fatalf("length %d: %v", MaxSessionTokens+1, err)
	}
	if err := leader.c().SetSessionTokens(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := leader.c().SetSessionTokens(ctx, 0); err != nil {
		t.Fatalf("the same length again: %v", err)
	}
	cl.waitAll("the length off", 30*time.Second, tokensAre(0))

	// A swarm founded without the option has none.
	cl2 := newCluster(t)
	c := cl2.addHost(false)
	cl2.start(c)
	cl2.waitAll("the founder joined", 30*time.Second, func(s State) bool { return s.Len() == 1 })
	if _, ok := c.c().State().SwarmConfig().SessionTokens(); ok {
		t.Fatal("a founder without WithPlanSessionTokens set a length")
	}
}
