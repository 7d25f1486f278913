package monitor

import (
	"crypto/rand"
	"reflect"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/swarm"
)

func newID(t testing.TB) peer.ID {
	t.Helper()
	_, pk, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var t0 = time.Unix(1700000000, 0)

// snap is a snapshot of id in swarm name (model "tiny" of n layers)
// with two heartbeats 5 s apart announcing [lo,hi) in state st, tokens
// served going from tok0 to tok1.
func snap(id peer.ID, name string, n, lo, hi int, st swarm.State, nat string, flags uint8, tok0, tok1 uint64, links ...swarm.LinkReport) *swarm.Snapshot {
	hb := func(at time.Time, tok uint64) *swarm.Heartbeat {
		return &swarm.Heartbeat{NodeID: id, Status: swarm.Status{RangeStart: lo, RangeEnd: hi, State: st, TokensServed: tok, StepsRun: 2 * tok},
			Flags: flags, Timestamp: at}
	}
	return &swarm.Snapshot{Node: id, Time: t0.Add(6 * time.Second), Swarm: name, Reachability: nat,
		SnapshotInfo: swarm.SnapshotInfo{ModelName: "tiny", Fingerprint: "fp-" + name, Layers: n},
		Heartbeats:   []*swarm.Heartbeat{hb(t0, tok0), hb(t0.Add(5*time.Second), tok1)}, Peers: links}
}

// TestAggregate checks coverage, redundancy, reachability and throughput
// against figures worked out by hand for two swarms, with a forged
// answer and a peer only named by others that must count in nothing.
func TestAggregate(t *testing.T) {
	a, b, c, d, e, f, g := newID(t), newID(t), newID(t), newID(t), newID(t), newID(t), newID(t)
	m, err := layers.NewLayerMap(8, 3, layers.Stage{Node: a.String(), Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: b.String(), Range: layers.Range{Start: 4, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	sa := snap(a, "lab", 8, 0, 4, swarm.StateServing, "public", 0, 100, 150,
		swarm.LinkReport{Peer: b, Link: swarm.LinkDirect}, swarm.LinkReport{Peer: e, Link: swarm.LinkRelayed})
	sa.Map = mb
	sb := snap(b, "lab", 8, 4, 8, swarm.StateServing, "private", swarm.FlagRelayed, 0, 0,
		swarm.LinkReport{Peer: c, Link: swarm.LinkHolePunched, Liveness: swarm.Alive})
	sc := snap(c, "lab", 8, 2, 8, swarm.StateServing, "private", swarm.FlagRelayed, 10, 20)
	sd := snap(d, "lab", 8, 0, 8, swarm.StateServing, "public", 0, 0, 5000) // forged
	sf := snap(f, "lab", 8, 0, 8, swarm.StateJoining, "unknown", 0, 0, 0)   // dialled, not serving
	sg := snap(g, "small", 6, 0, 3, swarm.StateServing, "unknown", 0, 0, 0) // forwarded, unjudged
	obs := []Observation{
		{Peer: a, Snapshot: sa, Verified: true},
		{Peer: b, Snapshot: sb, Verified: true},
		{Peer: c, Snapshot: sc, Verified: true, Via: b},
		{Peer: d, Snapshot: sd, Err: "signature does not verify"},
		{Peer: e, Err: "no route", SeenBy: []peer.ID{a}},
		{Peer: f, Snapshot: sf, Verified: true},
		{Peer: g, Snapshot: sg, Verified: true, Via: a},
	}
	sw := Aggregate(obs)
	if len(sw) != 2 || sw[0].Name != "lab" || sw[1].Name != "small" {
		t.Fatalf("swarms %+v", sw)
	}
	lab, small := sw[0], sw[1]
	wantCov := Coverage{Covered: true, Min: 1, Max: 2, Runs: []Run{{0, 2, 1}, {2, 8, 2}}}
	if !reflect.DeepEqual(lab.Coverage, wantCov) {
		t.Errorf("lab coverage %+v, want %+v", lab.Coverage, wantCov)
	}
	wantMap := Coverage{Covered: true, Min: 1, Max: 1, Runs: []Run{{0, 8, 1}}}
	if lab.MapEpoch != 3 || !reflect.DeepEqual(lab.MapCoverage, wantMap) {
		t.Errorf("lab map epoch %d coverage %+v", lab.MapEpoch, lab.MapCoverage)
	}
	// a: 50 tokens in 5 s; c: 10 in 5 s; d's 5000 are forged.
	if lab.TokensPerSec != 12 || lab.Verified != 4 || len(lab.Nodes) != 6 || lab.Model != "tiny" || lab.Layers != 8 {
		t.Errorf("lab: %v tok/s, %d verified of %d, model %q of %d layers", lab.TokensPerSec, lab.Verified, len(lab.Nodes), lab.Model, lab.Layers)
	}
	want := map[peer.ID]struct {
		reach    string
		verified bool
	}{
		a: {ReachDirect, true}, b: {ReachHolePunched, true}, c: {ReachHolePunched, true},
		d: {ReachDirect, false}, e: {ReachUnknown, false}, f: {ReachDirect, true},
	}
	for _, n := range lab.Nodes {
		w, ok := want[peer.ID(mustDecode(t, n.ID))]
		if !ok {
			t.Fatalf("unexpected node %s", n.ID)
		}
		if n.Reachability != w.reach || n.Verified != w.verified {
			t.Errorf("node %s: %s verified %v, want %s %v", n.ID, n.Reachability, n.Verified, w.reach, w.verified)
		}
	}
	// Only b reports the punched link to c, and c's own links are none:
	// the peer's report is what makes c hole-punched; without it, relayed.
	for _, n := range lab.Nodes {
		if n.ID == b.String() && n.Links[string(swarm.LinkHolePunched)] != 1 {
			t.Errorf("b's links %v", n.Links)
		}
		if n.ID == a.String() && len(n.Links) != 0 {
			t.Errorf("a's links %v: its peers are hints", n.Links)
		}
	}
	sb.Peers = nil
	for _, n := range Aggregate(obs)[0].Nodes {
		if n.ID == c.String() && n.Reachability != ReachRelayed {
			t.Errorf("c without the punched report: %s", n.Reachability)
		}
		if n.ID == a.String() && (n.TokensPerSec != 10 || n.StepsPerSec != 20 || n.HeartbeatAge != 1) {
			t.Errorf("a: %v tok/s, %v steps/s, heartbeat %v s old", n.TokensPerSec, n.StepsPerSec, n.HeartbeatAge)
		}
	}
	wantSmall := Coverage{Covered: false, Min: 0, Max: 1, Runs: []Run{{0, 3, 1}, {3, 6, 0}}, Gaps: []Run{{3, 6, 0}}}
	if !reflect.DeepEqual(small.Coverage, wantSmall) {
		t.Errorf("small coverage %+v, want %+v", small.Coverage, wantSmall)
	}
	if n := small.Nodes[0]; n.Reachability != ReachUnknown || n.Via != a.String() {
		t.Errorf("forwarded unjudged node: %s via %s", n.Reachability, n.Via)
	}
}

// A counter that went down (a restart between the heartbeats) is no
// negative rate.
func TestRateAfterRestart(t *testing.T) {
	if r := rate(100, 10, time.Second); r != 0 {
		t.Fatalf("rate %v", r)
	}
	if r := rate(10, 110, 4*time.Second); r != 25 {
		t.Fatalf("rate %v", r)
	}
}

func mustDecode(t *testing.T, s string) string {
	t.Helper()
	id, err := peer.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(id)
}
