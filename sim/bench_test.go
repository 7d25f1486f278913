package sim

import (
	"context"
	"os"
	"testing"
	"time"
)

// bareClockRate is the event rate of the virtual clock alone (push and
// pop of empty events), the baseline the simulator's rate is set against.
func bareClockRate() float64 {
	var c clock
	const n = 2_000_000
	t0 := time.Now()
	for i := range n {
		c.schedule(&event{at: float64(i % 1000)})
		if len(c.events) > 4096 {
			c.next()
		}
	}
	for len(c.events) > 0 {
		c.next()
	}
	return n / time.Since(t0).Seconds()
}

// BenchmarkVolunteer1000 runs testdata/sim/volunteer-1000.yaml (1,000
// machines, one simulated hour, 5 requests/s, churn from the start) with
// Strata's policy: the speed acceptance is < 3 minutes per run on the
// 2-core machine.
//
//	go test ./sim -run '^$' -bench Volunteer1000 -benchtime 1x
func BenchmarkVolunteer1000(b *testing.B) {
	path := "../testdata/sim/volunteer-1000.yaml"
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	sc, err := ParseScenario(path, data)
	if err != nil {
		b.Fatal(err)
	}
	spec, err := sc.SwarmSpec()
	if err != nil {
		b.Fatal(err)
	}
	spec.Now = time.Now
	base := bareClockRate()
	b.ResetTimer()
	var res SwarmResult
	for range b.N {
		if res, err = RunSwarm(context.Background(), spec, "strata"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.EventsPerSec, "events/s")
	b.ReportMetric(base, "bare-clock-events/s")
	b.ReportMetric(res.EventsPerSec/base, "ratio-to-bare-clock")
	b.ReportMetric(res.Wall.Seconds(), "wall-s/sim-hour")
}
