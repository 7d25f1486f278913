//go:build faultinject

package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

// TestVerifyEvictsFaultyDeepSeek2 is TestVerifyEvictsFaultyNode's flip
// case on deepseek2: one node of six corrupts 1 output in 50; spot checks
// on every token boundary catch it, the leader evicts and bans it on the
// signed evidence, and every generation after that is the single-process
// run's.
func TestVerifyEvictsFaultyDeepSeek2(t *testing.T) {
	const faultyAt = 5
	path := deepSeek2Model(t)
	extra := modelEach(6, path)
	extra[faultyAt] = append(extra[faultyAt], WithFaultInjection(FaultSpec{Every: 50, Mode: FaultFlip}))
	// As testVerifyEvicts: a draw where the faulty node's range has no
	// third holder to settle a mismatch could never evict it.
	nodes := verifyClusterWhere(t, 6, extra, func(m layers.LayerMap, nodes []*Node) string {
		fr, ok := m.Range(nodes[faultyAt].ID().String())
		if !ok {
			t.Fatalf("faulty node not placed: %v", m.Stages)
		}
		if h := len(nodes[0].trust.Holders(fr.Start, fr.End)); h < 3 {
			return fmt.Sprintf("the faulty node's range %v has %d holders", fr, h)
		}
		return ""
	})
	fid := nodes[faultyAt].ID().String()
	honest := nodes[:faultyAt]
	const maxTokens = 16
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark and stormy night"}
	want := map[string][]int32{}
	for _, p := range prompts {
		want[p] = referenceOf(t, path, p, maxTokens, engineGreedy())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	evicted := func() bool {
		_, banned := honest[0].cons.Load().State().Banned(fid, time.Now())
		return banned
	}
	start := time.Now()
	gens, flagged := 0, 0
	for i := 0; !evicted(); i++ {
		if ctx.Err() != nil {
			t.Fatalf("not evicted after %d generations (%v): %+v", gens, time.Since(start), honest[0].Metrics().Verify)
		}
		p := prompts[i%len(prompts)]
		_, err := generate(ctx, t, honest[i%len(honest)], p, maxTokens)
		gens++
		switch {
		case errors.Is(err, ErrWrongTokens):
			flagged++
		case err != nil:
			t.Logf("generation %d: %v", i, err)
		}
	}
	t.Logf("evicted after %d generations, %v; generations flagged: %d", gens, time.Since(start).Round(time.Millisecond), flagged)
	servesRightWithout(ctx, t, honest, fid, prompts, want, maxTokens, 8)
	var reported uint64
	for _, n := range honest {
		reported += n.Metrics().Verify.Reported
		if !n.cons.Load().State().IsMember(fid) {
			continue
		}
		t.Fatalf("the faulty node is still a member on %s", shortID(n.ID()))
	}
	if reported == 0 {
		t.Fatal("evicted with no report")
	}
}
