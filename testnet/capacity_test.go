package testnet

import (
	"strings"
	"testing"
	"time"
)

// TestOverloadVerdict: a load that expects overload fails unless the hot
// entry queued at least min_wait at p99, and phases given as multiples
// of the capacity get rates from the measurement.
func TestOverloadVerdict(t *testing.T) {
	on := true
	sc := &Scenario{Load: LoadSpec{Hot: "n1", Phases: []PhaseSpec{{For: time.Minute, Times: 2}, {For: time.Minute, Rate: 3}}},
		Expect: Expect{Overloaded: &on, MinWait: 100 * time.Millisecond}}
	if got := sc.Load.offer(10); len(got) != 2 || got[0] != 20 || got[1] != 3 || sc.Load.Phases[0].Rate != 20 {
		t.Fatalf("offered %v, phases %+v", got, sc.Load.Phases)
	}
	rep := &Report{Capacity: &CapacityReport{RPS: 10, Offered: []float64{20, 3}}, Entries: []EntryReport{
		{Entry: "n1", QueueWait: Quantiles{P99Ms: 40}}, {Entry: "n2", QueueWait: Quantiles{P99Ms: 900}}}}
	v := checkOverload(sc, rep)
	if len(v) != 1 || !strings.Contains(v[0], "hot entry n1") || !strings.Contains(v[0], "10.0 req/s") {
		t.Fatalf("a hot entry that barely queued: %v", v)
	}
	rep.Entries[0].QueueWait.P99Ms = 250
	if v := checkOverload(sc, rep); len(v) != 0 {
		t.Fatalf("a hot entry that queued: %v", v)
	}
	sc.Load.Hot = ""
	rep.Entries[0].QueueWait.P99Ms = 0
	if v := checkOverload(sc, rep); len(v) != 0 {
		t.Fatalf("no hot entry, another queued: %v", v)
	}
}
