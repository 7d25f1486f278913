package baseline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

var benchDevices = []string{"rtx4090", "rtx3090", "a100-80g", "rtx4070", "h100", "l40s", "t4"}

func benchPlan(b *testing.B, p Policy, f *layers.Fleet) {
	b.Helper()
	var m layers.LayerMap
	for b.Loop() {
		var err error
		if m, err = p.Plan(context.Background(), f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(f.Flow(m), "flow_tps")
	b.ReportMetric(f.Flow(m)/f.UB(), "flow/UB")
}

// Petals on mixed fleets of seven devices for Llama-3-70B.
func BenchmarkPetals(b *testing.B) {
	b.Run("example", func(b *testing.B) { benchPlan(b, NewPetals(), fleetOf(b, "llama-3-70b", example(b))) })
	b.Run("nodes=100", func(b *testing.B) { benchPlan(b, NewPetals(), mixed(b, "llama-3-70b", 100, benchDevices...)) })
	b.Run("nodes=1000", func(b *testing.B) { benchPlan(b, NewPetals(), mixed(b, "llama-3-70b", 1000, benchDevices...)) })
}

// Parallax finishes the brief's fleet and 100 identical A100s; mixed
// fleets of 100 and any fleet of 1,000 exhaust its budget, so at 1,000
// nodes the benchmark measures how promptly a 1 s deadline is honoured.
func BenchmarkParallax(b *testing.B) {
	b.Run("example", func(b *testing.B) { benchPlan(b, NewParallax(), fleetOf(b, "llama-3-70b", example(b))) })
	b.Run("nodes=100", func(b *testing.B) {
		benchPlan(b, NewParallax(), fleetOf(b, "llama-3-70b", nodesOf(b, group{"a100-80g", 100})))
	})
	b.Run("nodes=1000/deadline=1s", func(b *testing.B) {
		f := mixed(b, "llama-3-70b", 1000, benchDevices...)
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := NewParallax().Plan(ctx, f)
			cancel()
			if !errors.Is(err, ErrTimedOut) {
				b.Fatalf("err = %v, want a timeout", err)
			}
		}
	})
}
