package testnet

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodScenario = `
name: t
model: {layers: 4, dim: 32, seed: 1}
nodes:
  - {name: a, max_layers: 2}
  - {name: b, max_layers: 2}
  - {name: c, max_layers: 2, late: true}
load: {clients: 2, rate: 1.5, max_tokens: 8}
duration: 20s
events:
  - {at: 2s, action: join, node: c}
  - {at: 5s, action: kill, node: b}
  - {at: 9s, action: rejoin}
expect: {failed: 0, mismatched: 0, recovered: true, max_recovery: 10s}
`

func TestParseScenario(t *testing.T) {
	s, err := ParseScenario([]byte(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	if s.Duration != 20*time.Second || s.Events[1].At != 5*time.Second || s.Expect.MaxRecovery != 10*time.Second {
		t.Errorf("durations: %v %v %v", s.Duration, s.Events[1].At, s.Expect.MaxRecovery)
	}
	if s.Network.Mode != ModeLoopback || s.Load.Endpoint != "completions" || s.Model.FFN != 80 || s.Load.Prompts != 8 {
		t.Errorf("defaults not applied: %+v %+v", s.Network, s.Load)
	}
	if *s.Expect.Failed != 0 || !*s.Expect.Recovered {
		t.Errorf("expect: %+v", s.Expect)
	}
}

// Each broken scenario must fail naming the field at fault.
func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ edit, field string }{
		{"duration: 20s|duration: 0s", "duration"},
		{"duration: 20s|duration: twenty", "twenty"},
		{"rate: 1.5|rate: 0", "load.rate"},
		{"clients: 2|clients: 2, burst: 3", "burst"}, // unknown key
		{"max_layers: 2}|max_layers: -1}", "nodes[0].max_layers"},
		{"name: b,|name: a,", "nodes[1].name"},
		{"action: kill, node: b|action: kill, node: zz", "events[1].node"},
		{"action: kill,|action: explode,", "events[1].action"},
		{"at: 9s|at: 1s", "events[2].at"},
		{"at: 9s|at: 21s", "events[2].at"},
		{"action: join, node: c|action: join, node: b", "events[0].node"},
		{"action: rejoin|action: partition, groups: [[a], [b]]", "events[2].action"},
		{"layers: 4, dim: 32|layers: 0, dim: 32", "model.layers"},
		{"layers: 4, dim: 32, seed: 1|sim_model: llama-3-70b", "nodes[0].gpu"},
		{"layers: 4, dim: 32, seed: 1|sim_model: no-such-model", "model.sim_model"},
		{"failed: 0|failed: -1", "expect.failed"},
		{"name: t|name: t\nnetwork: {mode: cloud}", "network.mode"},
		{"- {name: a, max_layers: 2}|- {name: a, max_layers: 2, region: eu}", "nodes[0].region"},
		{"max_tokens: 8}|max_tokens: 8, hot: zz, hot_share: 0.9}", "load.hot"},
		{"- {name: a, max_layers: 2}|- {name: a, max_layers: 2, memory: lots}", "nodes[0].memory"},
		{"- {name: a, max_layers: 2}|- {name: a, max_layers: 2, engine: cuda}", "nodes[0].engine"},
		{"- {name: a, max_layers: 2}|- {name: a, max_layers: 2, wire: int4}", "nodes[0].wire"},
		{"max_tokens: 8}|max_tokens: 8, hot: a, hot_share: 1.5}", "load.hot_share"},
		{"max_tokens: 8}|max_tokens: 8, hot_share: 0.5}", "load.hot_share"},
		{"max_tokens: 8}|max_tokens: 8, phases: [{for: 0s, rate: 2}]}", "load.phases[0]"},
		{"max_tokens: 8}|max_tokens: 8, phases: [{for: 5s, rate: 2, times: 2}]}", "load.phases[0]"},
		{"max_tokens: 8}|max_tokens: 8, phases: [{for: 5s, times: 2}]}", "load.phases[0].times"},
		{"max_tokens: 8}|max_tokens: 8, capacity: {for: 1s, clients: 4}}", "load.capacity"},
		{"max_recovery: 10s}|max_recovery: 10s, max_wait_ratio: 1.5}", "expect.max_wait_ratio"},
		{"name: t|name: t\npublic: {swarm: default, dht_servers: 3}", "public.swarm"},
		{"name: t|name: t\npublic: {swarm: p, dht_servers: 0}", "public.dht_servers"},
		{"name: t|name: t\npublic: {swarm: p, dht_servers: 3, region: eu}", "public.region"},
		{"- {name: a, max_layers: 2}|- {name: a, max_layers: 2, steward: true}", "nodes[0].steward"},
		{"max_recovery: 10s}|max_recovery: 10s, max_join: 30s}", "expect.max_join"},
	} {
		old, repl, _ := strings.Cut(c.edit, "|")
		if !strings.Contains(goodScenario, old) {
			t.Fatalf("edit %q does not apply", old)
		}
		_, err := ParseScenario([]byte(strings.Replace(goodScenario, old, repl, 1)))
		if err == nil {
			t.Errorf("%s: accepted", c.edit)
			continue
		}
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %q does not name %q (or wrap ErrScenario)", c.edit, err, c.field)
		}
	}
}

// The shipped scenarios parse.
func TestShippedScenarios(t *testing.T) {
	files, _ := filepath.Glob("../testdata/testnet/*.yaml")
	if len(files) == 0 {
		t.Fatal("no scenarios in testdata/testnet")
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadScenario(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		xs   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(3, 1, 2), 50, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 50, 2 * time.Millisecond}, // nearest rank: the 2nd of 4
		{ms(4, 1, 3, 2), 99, 4 * time.Millisecond},
		{hundred, 50, 50 * time.Millisecond},
		{hundred, 99, 99 * time.Millisecond},
		{hundred, 100, 100 * time.Millisecond},
	} {
		if got := percentile(c.xs, c.p); got != c.want {
			t.Errorf("p%v of %v = %v, want %v", c.p, c.xs, got, c.want)
		}
	}
}

func TestBuildReport(t *testing.T) {
	s := time.Second
	ms := time.Millisecond
	sc, err := ParseScenario([]byte(goodScenario))
	if err != nil {
		t.Fatal(err)
	}
	refs := []RefAnswer{{Text: "alpha"}, {Text: "beta"}}
	results := []result{
		{ID: 0, Prompt: 0, Start: 0, End: 1 * s, OK: true, TTFT: 10 * ms, PerToken: 2 * ms, Tokens: 4, Text: "alpha"},
		{ID: 1, Prompt: 1, Start: 1 * s, End: 2 * s, OK: true, TTFT: 30 * ms, PerToken: 4 * ms, Tokens: 4, Text: "beta",
			Retries: 2, RetryErrs: []string{"HTTP 503 no_capacity", "connection refused"}},
		{ID: 2, Prompt: 1, Start: 5500 * ms, End: 6 * s, OK: true, TTFT: 20 * ms, PerToken: 3 * ms, Tokens: 6, Text: "BETA", Retried: true},
		{ID: 3, Prompt: 0, Start: 6 * s, End: 7 * s, Err: "HTTP 503", Retries: 1, RetryErrs: []string{"HTTP 503 no_capacity"}},
		{ID: 4, Prompt: 0, Start: 9500 * ms, End: 11 * s, OK: true, TTFT: 40 * ms, PerToken: 5 * ms, Tokens: 2, Text: "alpha"},
	}
	events := []eventRun{
		{EventSpec: EventSpec{Action: ActKill}, Node: "b", At: 5 * s},
		{EventSpec: EventSpec{Action: ActRejoin}, Node: "b", At: 9 * s},
	}
	samples := []sample{
		{At: 4 * s, Epoch: 2, Leader: "a", Covers: true, Healthy: true},
		{At: 5 * s, Epoch: 2, Leader: "a", Covers: true, Stages: []string{"a[0,4)", "b[4,8)"}},
		{At: 7 * s, Epoch: 3, Leader: "a", Covers: true, Healthy: true, Stages: []string{"a[0,4)", "c[4,8)"}},
		{At: 9500 * ms, Epoch: 3, Leader: "a", Covers: true, Healthy: true},
	}
	rep := buildReport(sc, results, refs, events, samples, 12*s, nil, nil)
	if rep.Requests != 5 || rep.OK != 4 || rep.Failed != 1 || rep.EntryRetried != 1 || rep.Mismatched != 1 {
		t.Errorf("counts: %+v", rep)
	}
	// Retried counts requests that succeeded after a retry; Retries every
	// retry, the failed request's too.
	if rep.Retried != 1 || rep.Retries != 3 || rep.RetryErrors["HTTP 503 no_capacity"] != 2 || rep.RetryErrors["connection refused"] != 1 {
		t.Errorf("retries: retried %d, retries %d, errors %v", rep.Retried, rep.Retries, rep.RetryErrors)
	}
	if rep.TTFT.P50Ms != 20 || rep.TTFT.P99Ms != 40 || rep.PerToken.P50Ms != 3 || rep.PerToken.P99Ms != 5 {
		t.Errorf("quantiles: ttft %+v per-token %+v", rep.TTFT, rep.PerToken)
	}
	// kill at 5 s: the map is healthy again at 7 s, the first request
	// sent after it succeeds at 6 s: 2 s. rejoin at 9 s: 9.5 s and 11 s.
	if e := rep.Events[0]; !e.Recovered || e.RecoveryS != 2 || e.MapS != 7 || e.RequestS != 6 {
		t.Errorf("kill: %+v", e)
	}
	if e := rep.Events[0]; e.RepairedS != 7 {
		t.Errorf("kill: map without b at %v, want 7", e.RepairedS)
	}
	if e := rep.Events[1]; !e.Recovered || e.RecoveryS != 2 || e.RepairedS != -1 {
		t.Errorf("rejoin: %+v", e)
	}
	if len(rep.Epochs) != 3 {
		t.Errorf("epochs: %+v", rep.Epochs)
	}
	// One-second buckets over 12 s; the one at [1,2) holds request 0.
	if len(rep.Throughput) != 12 || rep.Throughput[1].Requests != 1 || rep.Throughput[1].Tokens != 4 || rep.Throughput[7].Failed != 1 {
		t.Errorf("throughput: %+v", rep.Throughput)
	}
	if rep.Pass || len(rep.Violations) != 2 {
		t.Errorf("violations %v: want failed and mismatched", rep.Violations)
	}
	md := rep.Markdown()
	for _, want := range []string{"| 5 | 4 | 1 | 1 | 1 (3) | 1 |", "- 2× HTTP 503 no_capacity", "| 5.0 | kill | b | 7.0 | 6.0 | 2.0 | 7.0 |", "Result: FAIL"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	// A healthy map polled after the kill began but before the node was
	// stopped (the pick polls first) is not its recovery.
	late := append([]eventRun(nil), events...)
	late[0].Done = 7500 * ms
	rep = buildReport(sc, results, refs, late, samples, 12*s, nil, nil)
	if e := rep.Events[0]; e.Recovered || e.MapS != -1 {
		t.Errorf("kill that took effect at 7.5 s: map healthy at %v, want none before the rejoin", e.MapS)
	}

	// An event with no healthy map before the next one did not recover.
	rep = buildReport(sc, results, refs, events, samples[:2], 12*s, []string{"c"}, nil)
	if rep.Events[0].Recovered || rep.Pass {
		t.Errorf("kill recovered without a healthy map: %+v", rep.Events[0])
	}
	if !strings.Contains(strings.Join(rep.Violations, ";"), "node c exited on its own") {
		t.Errorf("violations %v lack the crash", rep.Violations)
	}
}

func TestPromptsAreSeeded(t *testing.T) {
	a, b, c := Prompts(1, 4, 5), Prompts(1, 4, 5), Prompts(2, 4, 5)
	if strings.Join(a, "|") != strings.Join(b, "|") || strings.Join(a, "|") == strings.Join(c, "|") {
		t.Errorf("prompts: %q %q %q", a, b, c)
	}
	if n := len(strings.Fields(a[0])); n != 5 {
		t.Errorf("%q has %d words", a[0], n)
	}
}

func TestScenarioNATKinds(t *testing.T) {
	base := "name: t\nnetwork: {mode: namespaces, regions: [{name: eu}]}\nmodel: {layers: 4, dim: 32, seed: 1}\n" +
		"load: {clients: 1, rate: 1, max_tokens: 4}\nduration: 5s\nnodes:\n  - {name: a, max_layers: 4, region: eu, nat: %s}\n"
	for in, want := range map[string]NATKind{"true": NATEIM, "eim": NATEIM, "symmetric": NATSymmetric, "false": NATNone, "none": NATNone} {
		s, err := ParseScenario(fmt.Appendf(nil, base, in))
		if err != nil {
			t.Errorf("nat: %s: %v", in, err)
			continue
		}
		if got := s.Nodes[0].NAT; got != want {
			t.Errorf("nat: %s parsed as %q, want %q", in, got, want)
		}
	}
	if _, err := ParseScenario(fmt.Appendf(nil, base, "full-cone")); err == nil || !strings.Contains(err.Error(), "full-cone") {
		t.Errorf("nat: full-cone: got %v, want an error naming it", err)
	}
}

func TestReportReachability(t *testing.T) {
	rep := &Report{Scenario: "nat", Reachability: []NodeReach{
		{Node: "n1", Reachability: "public", RelayedMB: 3.25, Links: map[string]string{"n5": "direct", "n3": "direct"}},
		{Node: "n3", Reachability: "private", Relays: []string{"n1", "n2"}, Links: map[string]string{"n4": "hole-punched", "n5": "relayed 2.5 MB/s"}},
		{Node: "n6", Reachability: "private", Unreachable: true},
		{Node: "n7", Err: "connection refused"},
	}}
	md := rep.Markdown()
	for _, want := range []string{
		"| n1 | public |  | 3.2 MB | n3 direct, n5 direct |",
		"| n3 | private | n1 n2 | 0.0 MB | n4 hole-punched, n5 relayed 2.5 MB/s |",
		"| n6 | private, UNREACHABLE |",
		"| n7 | error: connection refused |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// TestReportEntries: requests split by entry with their queue waits, the
// goodput, and the hot entry's p99 wait checked against the others'.
func TestReportEntries(t *testing.T) {
	ms := time.Millisecond
	sc, err := ParseScenario([]byte(strings.Replace(strings.Replace(goodScenario, "max_tokens: 8}",
		"max_tokens: 8, hot: a, hot_share: 0.9, phases: [{for: 5s, rate: 3}, {for: 5s, rate: 1}]}", 1),
		"max_recovery: 10s}", "max_recovery: 10s, max_wait_ratio: 1.5, min_wait: 100ms}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Load.rateAt(time.Second) != 3 || sc.Load.rateAt(7*time.Second) != 1 || sc.Load.rateAt(time.Minute) != 1 {
		t.Fatalf("rates %v %v %v", sc.Load.rateAt(time.Second), sc.Load.rateAt(7*time.Second), sc.Load.rateAt(time.Minute))
	}
	refs := []RefAnswer{{Text: "x"}}
	var results []result
	for i := range 10 {
		results = append(results, result{ID: i, Entry: "a", OK: true, Text: "x", Tokens: 4, End: time.Second, QueueWait: time.Duration(i+1) * 100 * ms})
	}
	results = append(results, result{ID: 10, Entry: "b", OK: true, Text: "x", Tokens: 4, End: time.Second, QueueWait: 50 * ms},
		result{ID: 11, Entry: "b", Err: "HTTP 503", End: time.Second})
	rep := buildReport(sc, results, refs, nil, nil, 4*time.Second, nil, nil)
	if len(rep.Entries) != 2 || rep.Entries[0].Entry != "a" || rep.Entries[0].OK != 10 || rep.Entries[1].Failed != 1 {
		t.Fatalf("entries %+v", rep.Entries)
	}
	if a := rep.Entries[0].QueueWait; a.P50Ms != 500 || a.P99Ms != 1000 || a.N != 10 {
		t.Fatalf("a's waits %+v", a)
	}
	if rep.GoodputTokensPerS != 11 || rep.QueueWait.N != 11 {
		t.Fatalf("goodput %v, waits %+v", rep.GoodputTokensPerS, rep.QueueWait)
	}
	// a's p99 (1 s) against b's (50 ms, taken as the 100 ms floor): over 1.5×.
	if !strings.Contains(strings.Join(rep.Violations, ";"), "hot entry a queue wait p99 1000 ms > 1.5 × the others' 100 ms") {
		t.Fatalf("violations %v", rep.Violations)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| a | 10 | 10 | 0 | 40 | 500 ms | 1000 ms |") || !strings.Contains(md, "Goodput 11.0 tokens/s") {
		t.Fatalf("markdown:\n%s", md)
	}
	sc.Expect.MaxWaitRatio = 20
	if rep := buildReport(sc, results, refs, nil, nil, 4*time.Second, nil, nil); strings.Contains(strings.Join(rep.Violations, ";"), "hot entry") {
		t.Fatalf("violations %v with a ratio of 20", rep.Violations)
	}
}
