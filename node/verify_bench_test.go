package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// BenchmarkVerifyRate: the throughput cost of spot checks. One swarm on
// loopback (static map: layers [0,4) on two nodes, [4,8) on three, the
// entry a sixth node with no layers), four concurrent greedy generations
// of 32 tokens per round; each iteration runs one round at each verify
// rate, 0, 1%, 5% and 100%, on the same swarm. Reported: tokens per
// second at each rate and the ratio to rate 0.
func BenchmarkVerifyRate(b *testing.B) { benchVerifyRate(b, nil) }

// BenchmarkVerifyRateMidPath: the same with the two holders of [0,4) on
// another engine (the go engine under another name, so that the outputs
// still agree): every check is then a tolerance check of the first hop,
// a hop before the last (midAudit: a check session through the whole
// path with the other holder in its place), where before such a hop was
// never checked.
func BenchmarkVerifyRateMidPath(b *testing.B) {
	other := WithEngine(Engine{Name: "other-test", Open: openGo})
	benchVerifyRate(b, map[int][]Option{1: {other}, 2: {other}})
}

func benchVerifyRate(b *testing.B, extra map[int][]Option) {
	dirs, ids := staticIDs(b, 6)
	var stages []layers.Stage
	for i, id := range ids[1:] {
		r := layers.Range{Start: 0, End: 4}
		if i >= 2 {
			r = layers.Range{Start: 4, End: 8}
		}
		stages = append(stages, layers.Stage{Node: id.String(), Range: r})
	}
	m, err := layers.NewLayerMap(8, 1, stages...)
	if err != nil {
		b.Fatal(err)
	}
	c := newTestCluster(b, WithStaticMap(m), WithLogger(nil))
	var nodes []*Node
	for i := range ids {
		nodes = append(nodes, c.add(append([]Option{WithDataDir(dirs[i])}, extra[i]...)...))
	}
	c.waitServing(20*time.Second, ids[1:]...)
	entry := nodes[0]
	waitFor(b, 20*time.Second, "heartbeats naming the engines", func() bool {
		for i, n := range nodes {
			if entry.trust.Reproducible(n.ID()) == (len(extra[i]) > 0) {
				return false
			}
		}
		return true
	})
	ctx := context.Background()
	const streams, perGen = 4, 32
	// Warm the streams, the sessions' memory and the caches first: the
	// first sub-benchmark is the baseline.
	for range 3 * streams {
		if _, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: perGen}); err != nil {
			b.Fatal(err)
		}
	}
	// The rates take turns round by round (in a rotating order), so that
	// the load of a shared machine falls on all of them alike.
	rates := []float64{0, 0.01, 0.05, 1}
	tokens := make([]int, len(rates))
	spent := make([]time.Duration, len(rates))
	before := entry.Metrics().Verify
	round := func(rate float64) int {
		entry.entry.cfg.verifyRate = rate // no generation runs between rounds
		var wg sync.WaitGroup
		var mu sync.Mutex
		n := 0
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := entry.Complete(ctx, Request{Prompt: benchPrompt, MaxTokens: perGen})
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				n += len(res.Tokens)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return n
	}
	i := 0
	for b.Loop() {
		for k := range rates {
			j := (i + k) % len(rates)
			start := time.Now()
			tokens[j] += round(rates[j])
			spent[j] += time.Since(start)
		}
		i++
	}
	after := entry.Metrics().Verify
	if after.Mismatches != before.Mismatches || after.Unresolved != before.Unresolved {
		b.Fatalf("mismatches on an honest swarm: %+v", after)
	}
	if extra != nil && after.Tolerance == before.Tolerance {
		b.Fatalf("no tolerance check of the hops on the other engine: %+v", after)
	}
	base := float64(tokens[0]) / spent[0].Seconds()
	for j, rate := range rates {
		tps := float64(tokens[j]) / spent[j].Seconds()
		b.ReportMetric(tps, fmt.Sprintf("tok/s@%g", rate))
		if j > 0 {
			b.ReportMetric(tps/base, fmt.Sprintf("x_rate0@%g", rate))
		}
	}
	b.ReportMetric(float64(after.Verified-before.Verified), "checks")
	b.ReportMetric(float64(after.Tolerance-before.Tolerance), "tol_checks")
}
