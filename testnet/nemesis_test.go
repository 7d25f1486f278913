package testnet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func nemesisSpec(seed uint64) NemesisSpec {
	n := NemesisSpec{Seed: seed}
	n.defaults()
	return n
}

func TestNemesisScheduleIsRepeatable(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	a := NemesisEvents(nemesisSpec(7), nodes, 10*time.Minute)
	b := NemesisEvents(nemesisSpec(7), nodes, 10*time.Minute)
	c := NemesisEvents(nemesisSpec(8), nodes, 10*time.Minute)
	if len(a) == 0 || !slices.EqualFunc(a, b, eventEqual) {
		t.Fatalf("the same seed gave different schedules:\n%v\n%v", a, b)
	}
	if slices.EqualFunc(a, c, eventEqual) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
}

func eventEqual(x, y EventSpec) bool {
	return x.At == y.At && x.Action == y.Action && x.Node == y.Node && x.Pick == y.Pick && x.Fault == y.Fault &&
		x.Loss == y.Loss && x.Delay == y.Delay && slices.EqualFunc(x.Groups, y.Groups, slices.Equal)
}

// TestNemesisSchedule checks the shape of a 10-minute schedule: at least
// 50 faults, every kind drawn, each fault undone before the next starts,
// partitions that leave a quorum on one side (majority) or link two
// sides only through one node (bridge).
func TestNemesisSchedule(t *testing.T) {
	nodes := []string{"n1", "n2", "n3", "n4", "n5"}
	const dur = 10 * time.Minute
	n := nemesisSpec(1)
	evs := NemesisEvents(n, nodes, dur)
	if len(evs)%2 != 0 || len(evs)/2 < 50 {
		t.Fatalf("%d events: want at least 50 faults, each started and undone", len(evs))
	}
	kinds := map[string]int{}
	var last time.Duration
	for i := 0; i < len(evs); i += 2 {
		on, off := evs[i], evs[i+1]
		if on.Fault == "" || on.Fault != off.Fault || faultEnd(on.Action) || !faultEnd(off.Action) {
			t.Fatalf("events %d, %d are not a fault and its undoing: %+v %+v", i, i+1, on, off)
		}
		hold := off.At - on.At
		if on.At < last || hold < n.HoldMin || hold > n.HoldMax || off.At+n.GapMin > dur {
			t.Fatalf("fault %d at %v held %v (previous end %v)", i/2, on.At, hold, last)
		}
		if i > 0 && on.At-last < n.GapMin {
			t.Fatalf("fault %d starts %v after the previous one ended, gap_min %v", i/2, on.At-last, n.GapMin)
		}
		last = off.At
		kinds[on.Fault]++
		switch on.Fault {
		case FaultPartitionMajority:
			if len(on.Groups) != 2 || len(on.Groups[0])+len(on.Groups[1]) != 5 || len(on.Groups[0]) < 3 {
				t.Fatalf("majority partition %v", on.Groups)
			}
		case FaultPartitionBridge:
			in := slices.Concat(on.Groups...)
			if len(on.Groups) != 2 || len(in) != 4 || len(on.Groups[0]) == 0 || len(on.Groups[1]) == 0 {
				t.Fatalf("bridge partition %v: two sides and one bridge in neither", on.Groups)
			}
		case FaultLoss, FaultDelay:
			if on.Node == "" || off.Node != on.Node || (on.Loss == 0 && on.Delay == 0) {
				t.Fatalf("degrade %+v / %+v", on, off)
			}
		case FaultPauseLeader, FaultPauseHop:
			if on.Action != ActPause || off.Action != ActResume || on.Pick == "" {
				t.Fatalf("pause %+v / %+v", on, off)
			}
		}
	}
	for _, k := range FaultKinds {
		if kinds[k] == 0 {
			t.Errorf("no %s fault in %d: %v", k, len(evs)/2, kinds)
		}
	}
}

func TestNemesisScenario(t *testing.T) {
	src := `name: x
network: {mode: namespaces, regions: [{name: lan}]}
model: {layers: 8, dim: 64}
nodes:
  - {name: n1, max_layers: 4, region: lan}
  - {name: n2, max_layers: 4, region: lan}
  - {name: n3, max_layers: 4, region: lan}
load: {rate: 1}
duration: 2m
events:
  - {at: 1s, action: pause, node: n2}
  - {at: 2s, action: resume}
nemesis: {seed: 3, kinds: {kill: 1, loss: 2}}
`
	sc, err := ParseScenario([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Events) < 6 || sc.Events[0].Action != ActPause || sc.Events[2].Fault == "" {
		t.Fatalf("events: %+v", sc.Events)
	}
	for _, e := range sc.Events[2:] {
		if e.Fault != FaultKill && e.Fault != FaultLoss {
			t.Fatalf("fault %q not among the weighted kinds", e.Fault)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{strings.Replace(src, "kinds: {kill: 1, loss: 2}", "kinds: {meteor: 1}", 1), "nemesis.kinds"},
		{strings.Replace(src, "kinds: {kill: 1, loss: 2}", "kinds: {kill: 0}", 1), "no kind"},
		{strings.Replace(src, "kinds: {kill: 1, loss: 2}", "loss: 1.5", 1), "nemesis.loss"},
		{strings.Replace(strings.Replace(src, "mode: namespaces, regions: [{name: lan}]", "mode: loopback", 1), ", region: lan", "", -1), "needs network.mode"},
		{strings.Replace(src, "{at: 1s, action: pause, node: n2}", "{at: 1s, action: pause, pick: sole}", 1), "a pause picks"},
		{strings.Replace(src, "{at: 2s, action: resume}", "{at: 2s, action: degrade, node: n1}", 1), "degrade needs"},
	} {
		if _, err := ParseScenario([]byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error with %q, got %v", tc.want, err)
		}
	}
}

func TestCheckRequests(t *testing.T) {
	refs := []RefAnswer{{Text: "abc", Tokens: []int32{1, 2, 3, 0}}}
	wins := []window{{from: 10 * time.Second, to: 20 * time.Second}}
	ok := func(id int, toks ...int32) result {
		return result{ID: id, OK: true, Text: "abc", TokenIDs: toks, Start: time.Second, End: 2 * time.Second}
	}
	failed := func(id int, at time.Duration, toks ...int32) result {
		return result{ID: id, Err: "HTTP 503: no_capacity", TokenIDs: toks, Start: at, End: at + time.Second}
	}
	v := checkRequests([]result{
		ok(0, 1, 2, 3, 0),
		ok(1, 1, 2, 2, 3, 0),                // a position streamed twice
		ok(2, 1, 3, 0),                      // a position missing
		ok(3, 1, 2, 4, 0),                   // wrong
		failed(4, 12*time.Second, 1, 2),     // a right prefix, then an error, in a fault
		failed(5, 15*time.Second, 1, 9),     // a wrong prefix
		failed(6, 30*time.Second),           // outside any fault
		failed(7, 9500*time.Millisecond, 1), // overlaps the fault's start
	}, refs, wins)
	want := RequestVerdict{Exact: 1, Wrong: 2, Duplicated: 1, Lost: 1, Failed: 4, FailedInFault: 3, FailedOutside: 1, OutsideIDs: []int{6}}
	if v.Exact != want.Exact || v.Wrong != want.Wrong || v.Duplicated != want.Duplicated || v.Lost != want.Lost ||
		v.Failed != want.Failed || v.FailedInFault != want.FailedInFault || v.FailedOutside != want.FailedOutside ||
		!slices.Equal(v.OutsideIDs, want.OutsideIDs) || v.OK {
		t.Fatalf("verdict %+v, want %+v", v, want)
	}
	if v := checkRequests([]result{ok(0, 1, 2, 3, 0), failed(1, 11*time.Second, 1, 2, 3)}, refs, wins); !v.OK {
		t.Fatalf("a clean run flagged: %+v", v)
	}
}

// TestNemesisFiles: the shipped nemesis scenarios parse, and the full
// one draws at least 50 faults of every kind in its 10 minutes.
func TestNemesisFiles(t *testing.T) {
	for _, f := range []string{"nemesis.yaml", "nemesis-short.yaml"} {
		sc, err := LoadScenario("../testdata/testnet/" + f)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		faults := 0
		for _, e := range sc.Events {
			if e.Fault != "" && !faultEnd(e.Action) {
				faults++
				kinds[e.Fault]++
			}
		}
		if f != "nemesis.yaml" {
			if faults < 5 {
				t.Errorf("%s: %d faults", f, faults)
			}
			continue
		}
		if sc.Duration < 10*time.Minute || faults < 50 || len(kinds) != len(FaultKinds) {
			t.Errorf("%s: %v, %d faults %v: want 10 minutes, at least 50, every kind", f, sc.Duration, faults, kinds)
		}
		t.Logf("%s: %d faults %v", f, faults, kinds)
	}
}

func TestLeaderless(t *testing.T) {
	at := func(s float64, leader string) sample {
		return sample{At: time.Duration(s * float64(time.Second)), Leader: leader}
	}
	total, longest := leaderless([]sample{at(0, "n1"), at(1, ""), at(2, ""), at(4, "n2"), at(5, ""), at(6, "n2"), at(7, ""), at(7.5, "")})
	if total != 4500*time.Millisecond || longest != 3*time.Second {
		t.Fatalf("total %v longest %v, want 4.5s and 3s", total, longest)
	}
}

// A fault skipped for want of a target counts neither as a fault nor in
// the windows that excuse failures.
func TestSkippedFault(t *testing.T) {
	s := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	evs := []eventRun{
		{EventSpec: EventSpec{Action: ActPause, Fault: FaultPauseLeader}, At: s(10), Skipped: "no leader"},
		{EventSpec: EventSpec{Action: ActResume, Fault: FaultPauseLeader}, At: s(15), Skipped: "its fault was skipped"},
		{EventSpec: EventSpec{Action: ActKill, Fault: FaultKill}, At: s(20)},
		{EventSpec: EventSpec{Action: ActRejoin, Fault: FaultKill}, At: s(25)},
	}
	rep := &Report{Events: []EventReport{{}, {}, {Recovered: true, RecoveryS: 1}, {Recovered: true, RecoveryS: 2}}}
	nr := nemesisReport(&NemesisSpec{Seed: 1}, evs, rep)
	if nr.Faults != 1 || nr.Skipped != 1 || nr.ByKind[FaultKill] != 1 || nr.During != 1 || nr.RecoveryMaxS != 2 {
		t.Fatalf("report %+v", nr)
	}
	w := faultWindows(evs, rep, s(60))
	if len(w) != 1 || w[0].from != s(20) || w[0].to != s(27) {
		t.Fatalf("windows %+v, want one from 20 s to the recovery at 27 s", w)
	}
}
