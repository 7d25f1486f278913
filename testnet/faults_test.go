package testnet

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const trustScenario = `
name: trust
model: {layers: 4, dim: 32, seed: 1}
nodes:
  - {name: a, max_layers: 3, verify_rate: 0.05}
  - {name: b, max_layers: 3, fault: "flip:50"}
  - {name: c, max_layers: 3}
load: {clients: 2, rate: 1, max_tokens: 4}
duration: 20s
expect: {evicted: true, max_detection_steps: 200, max_detection: 5s, max_wrong_tokens_after_eviction: 0, mismatched_after_eviction: 0}
`

// TestTrustReport: detection is the earliest mismatch over every entry's
// log, its steps sum every entry's checks up to it, wrong tokens are
// counted token by token against the oracle and filed by arrival, and
// the expectations judge them.
func TestTrustReport(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	sc, err := ParseScenario([]byte(trustScenario))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	name := func(id string) string { return strings.TrimPrefix(id, "id-") }
	view := func(first time.Duration, log ...checkAt) verifyView {
		var v verifyView
		for _, c := range log {
			v.Log = append(v.Log, struct {
				At        time.Time `json:"at"`
				Hop       string    `json:"hop"`
				Checker   string    `json:"checker"`
				Session   string    `json:"session"`
				Positions int       `json:"positions"`
				Mismatch  bool      `json:"mismatch"`
				Steps     int       `json:"steps"`
			}{t0.Add(c.At), "id-" + c.Hop, "id-" + c.Checker, c.Session, c.Positions, c.Mismatch, c.Steps})
			v.Checks++
			v.StepsChecked += uint64(c.Positions)
		}
		if first > 0 {
			f := t0.Add(first)
			v.FirstMismatch = &f
			v.Mismatches = 1
		}
		return v
	}
	entries := []NodeVerify{
		// a finds the liar at 3 s, after checking b's work in session s1
		// twice (the second check re-covers positions the first did: no
		// new steps of b's); c checked twice before that (once of a,
		// against the liar b's answer) and once after, and finds it again
		// at 4 s (not the first).
		nodeVerify("a", view(3*s, checkAt{1 * s, "c", "a", "", 30, false, 0}, checkAt{2 * s, "b", "c", "s1", 40, false, 0},
			checkAt{2500 * ms, "b", "c", "s1", 30, false, 0}, checkAt{3 * s, "b", "c", "", 40, true, 0}), t0, name),
		nodeVerify("c", view(4*s, checkAt{1500 * ms, "a", "b", "", 20, false, 0}, checkAt{2500 * ms, "b", "c", "", 25, false, 0}, checkAt{3500 * ms, "b", "c", "", 50, false, 0},
			checkAt{4 * s, "b", "c", "", 60, true, 0}), t0, name),
	}
	entries[0].Reported = 1
	if entries[1].log[1].Hop != "b" {
		t.Fatalf("hop names: %+v", entries[1].log)
	}
	refs := []RefAnswer{{Text: "w", Tokens: []int32{1, 2, 3, 4}}}
	results := []result{
		// Wrong at positions 1 (before detection) and 3 (after it, before
		// the eviction at 5 s); position 2 is right.
		{ID: 0, Entry: "a", Start: 0, End: 4 * s, OK: true, Tokens: 4, Text: "x", TokenIDs: []int32{1, 9, 3, 9},
			tokenAt: []time.Duration{1 * s, 2 * s, 3 * s, 4 * s}},
		// Flagged by its entry: its two wrong tokens came after the
		// eviction.
		{ID: 1, Entry: "c", Start: 5 * s, End: 6 * s, Err: "node: tokens already sent were wrong", TokenIDs: []int32{1, 2, 7, 7, 7},
			tokenAt: []time.Duration{5 * s, 5 * s, 6 * s, 6 * s, 6 * s}},
		{ID: 2, Entry: "a", Start: 6 * s, End: 7 * s, OK: true, Tokens: 4, Text: "w", TokenIDs: []int32{1, 2, 3, 4},
			tokenAt: []time.Duration{7 * s, 7 * s, 7 * s, 7 * s}},
	}
	samples := []sample{
		{At: 1 * s, Stages: []string{"a[0,3)", "b[1,4)", "c[0,3)"}},
		{At: 5 * s, Stages: []string{"a[0,3)", "c[1,4)"}},
	}
	rep := buildReport(sc, results, refs, nil, samples, 8*s, nil, entries)
	tr := rep.Trust
	d := tr.Detection
	if d == nil || d.AtS != 3 || d.By != "a" || d.Steps != 30+40+30+40+20+25 || d.Checks != 6 || d.Partial ||
		d.FaultySteps != 40+40+20+25 || d.FaultyChecks != 5 {
		t.Fatalf("detection %+v", d)
	}
	w := tr.WrongTokens
	if w != (WrongTokens{BeforeDetection: 1, BeforeEviction: 1, AfterEviction: 3, Flagged: 3, Requests: 2}) || tr.TokensCompared != 13 {
		t.Fatalf("wrong tokens %+v of %d", w, tr.TokensCompared)
	}
	if len(tr.Faulty) != 1 || tr.Faulty[0].EvictedS != 5 || !slices.Equal(tr.Left, []string{"b"}) || tr.Reported != 1 {
		t.Fatalf("faulty %+v left %v reported %d", tr.Faulty, tr.Left, tr.Reported)
	}
	// The only violation: 3 wrong tokens after the eviction.
	if len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "wrong tokens after eviction 3 > 0") {
		t.Fatalf("violations %v", rep.Violations)
	}
	md := rep.Markdown()
	for _, want := range []string{"after 125 verified steps of the faulty node's work (in 5 checks of it); all hops: 185 steps in 6 conclusive checks over all entries", "1 before the detection, 1 between it and the eviction, 3 after",
		"Eviction of b: 5.0 s (2.0 s after the detection)"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	// Tighter goals fail, each by name. The steps goal bounds the liar's
	// figure (125, b's work as the hop or the checker), not all hops'
	// (185): 130 passes, 100 does not.
	x := &sc.Expect
	steps := 130
	x.MaxDetectionSteps = &steps
	if v := checkTrust(*x, rep); len(v) != 1 || !strings.Contains(v[0], "wrong tokens after eviction") {
		t.Fatalf("a goal of 130 steps judged on all hops' 185: %v", v)
	}
	steps = 100
	x.MaxDetection = 2 * s
	v := strings.Join(checkTrust(*x, rep), "; ")
	for _, want := range []string{"detection after 125 verified steps of the faulty node's work > 100", "detection at 3.0s > 2s"} {
		if !strings.Contains(v, want) {
			t.Errorf("violations %q lack %q", v, want)
		}
	}
	// An honest expectation fails on the eviction and the report.
	no, zero := false, 0
	v = strings.Join(checkTrust(Expect{Evicted: &no, MaxMismatches: &zero}, rep), "; ")
	for _, want := range []string{"left the map with no event: b", "1 fault(s) reported", "spot-check mismatches 2 > 0"} {
		if !strings.Contains(v, want) {
			t.Errorf("honest violations %q lack %q", v, want)
		}
	}
	// No detection at all, when the goals ask for one.
	rep = buildReport(sc, results[2:], refs, nil, samples[:1], 8*s, nil, []NodeVerify{nodeVerify("a", view(0, checkAt{1 * s, "c", "a", "", 30, false, 0}), t0, name)})
	if rep.Trust.Detection != nil || !strings.Contains(strings.Join(rep.Violations, ";"), "no spot check found a mismatch") {
		t.Fatalf("no detection: %+v %v", rep.Trust.Detection, rep.Violations)
	}
}

// TestTrustScenarioErrors: the trust keys are checked, each error naming
// its field.
func TestTrustScenarioErrors(t *testing.T) {
	for _, c := range []struct{ edit, field string }{
		{"duration: 20s|duration: 20s\nverify_rate: 1.5", "verify_rate"},
		{"max_detection_steps: 200|max_detection_steps: -1", "expect.max_detection_steps"},
		{"max_wrong_tokens_after_eviction: 0|max_wrong_tokens_after_eviction: -2", "expect.max_wrong_tokens_after_eviction"},
		{"max_detection: 5s|max_detection: -5s", "expect.max_detection"},
		{"evicted: true|evicted: true, max_mismatches: -1", "expect.max_mismatches"},
	} {
		from, to, _ := strings.Cut(c.edit, "|")
		if !strings.Contains(trustScenario, from) {
			t.Fatalf("edit %q matches nothing", from)
		}
		_, err := ParseScenario([]byte(strings.Replace(trustScenario, from, to, 1)))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v, want an error naming %s", c.edit, err, c.field)
		}
	}
	sc, err := ParseScenario([]byte(strings.Replace(trustScenario, "duration: 20s", "duration: 20s\nverify_rate: 0.05", 1)))
	if err != nil || sc.VerifyRate == nil || *sc.VerifyRate != 0.05 {
		t.Fatalf("scenario verify_rate: %v", err)
	}
	if got := rateName(sc, sc.Nodes[0]); got != "0.05" {
		t.Errorf("own rate %q", got)
	}
	if got := rateName(sc, sc.Nodes[2]); got != "0.05" {
		t.Errorf("the swarm's rate %q", got)
	}
}

// TestDetectionSteps: with forward steps in the log, the liar's steps
// count each step of a session it served once however often the session
// is checked, and one step for each cold prefill it ran as the checker.
func TestDetectionSteps(t *testing.T) {
	s := time.Second
	e := NodeVerify{Node: "a", log: []checkAt{
		{At: 1 * s, Hop: "b", Checker: "c", Session: "s1", Positions: 40, Steps: 10},
		{At: 2 * s, Hop: "b", Checker: "c", Session: "s1", Positions: 45, Steps: 15}, // 5 new steps of s1
		{At: 3 * s, Hop: "c", Checker: "b", Session: "s2", Positions: 60, Steps: 30}, // b's one cold prefill
		{At: 4 * s, Hop: "b", Checker: "c", Session: "s3", Positions: 20, Steps: 4, Mismatch: true},
		{At: 5 * s, Hop: "b", Checker: "c", Session: "s4", Positions: 20, Steps: 4}, // after the detection
	}}
	d := detection([]NodeVerify{e}, []string{"b"})
	if d == nil || d.AtS != 4 || d.FaultySteps != 10+5+1+4 || d.FaultyChecks != 4 || d.Steps != 10+15+30+4 || d.Checks != 4 {
		t.Fatalf("detection %+v", d)
	}
}
