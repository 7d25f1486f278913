package testnet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// A load meant to overload the swarm first measures what the swarm can
// serve, in the same run, and offers a multiple of that: a fixed rate
// overloads one machine and not a faster one, and a report that never
// queued proves nothing about overload.

// CapacitySpec measures the swarm's capacity before the timed load: a
// closed loop of Clients concurrent requests (the load's prompts and
// lengths, entries in turn, no hot node) for For. The capacity is the
// requests completed per second in the loop's second half (the first
// warms the swarm up).
type CapacitySpec struct {
	For     time.Duration `yaml:"for"`
	Clients int           `yaml:"clients"`
}

// CapacityReport is what the measurement found and what was then offered.
type CapacityReport struct {
	// RPS: requests completed per second in the measurement's second
	// half; Requests, Failed and Mismatched count its requests.
	RPS        float64 `json:"rps"`
	Requests   int     `json:"requests"`
	Failed     int     `json:"failed"`
	Mismatched int     `json:"mismatched"`
	// Offered is each phase's arrival rate, in requests per second.
	Offered []float64 `json:"offered"`
}

// measureCapacity runs the closed loop and returns its results and the
// rate it sustained.
func (l *load) measureCapacity(ctx context.Context, c CapacitySpec) ([]result, float64) {
	t0 := time.Now()
	end := t0.Add(c.For)
	rng := rand.New(rand.NewPCG(l.spec.Seed, 0xc4a))
	var mu sync.Mutex
	var res []result
	next := 0
	var wg sync.WaitGroup
	for range c.Clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) {
				mu.Lock()
				id, prompt := next, rng.IntN(len(l.prompts))
				next++
				mu.Unlock()
				r := l.do(ctx, t0, -1-id, prompt, false)
				mu.Lock()
				res = append(res, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	half := c.For / 2
	done := 0
	for _, r := range res {
		if r.OK && r.End >= half && r.End <= c.For {
			done++
		}
	}
	return res, float64(done) / half.Seconds()
}

// offer resolves phases given as multiples of the capacity into rates.
func (l *LoadSpec) offer(capacity float64) []float64 {
	var offered []float64
	for i := range l.Phases {
		if p := &l.Phases[i]; p.Times > 0 {
			p.Rate = p.Times * capacity
		}
		offered = append(offered, l.Phases[i].Rate)
	}
	return offered
}

// checkOverload is the report's verdict on an expected overload: the hot
// entry (or, without one, some entry) must have queued, its p99 queue
// wait at least the scenario's min_wait.
func checkOverload(sc *Scenario, rep *Report) []string {
	x := sc.Expect
	if x.Overloaded == nil || !*x.Overloaded {
		return nil
	}
	floor := msOf(x.MinWait)
	var worst float64
	for _, e := range rep.Entries {
		if sc.Load.Hot == "" || e.Entry == sc.Load.Hot {
			worst = max(worst, e.QueueWait.P99Ms)
		}
	}
	if worst <= 0 || worst < floor {
		at := "any entry"
		if sc.Load.Hot != "" {
			at = "the hot entry " + sc.Load.Hot
		}
		return []string{fmt.Sprintf("no overload: %s's queue wait p99 %.0f ms < %.0f ms (capacity %s)", at, worst, floor, capacityText(rep.Capacity))}
	}
	return nil
}

func capacityText(c *CapacityReport) string {
	if c == nil {
		return "not measured"
	}
	return fmt.Sprintf("%.1f req/s measured, offered %.1f", c.RPS, c.Offered)
}
