//go:build faultinject

package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// TestVerifyEvictsFaultyNode: one node of six corrupts 1 output in 50;
// spot checks on every token boundary find it, the leader evicts and
// bans it on the signed evidence, the map is repaired without it, and
// every generation after that is the single-process run's.
func TestVerifyEvictsFaultyNode(t *testing.T) {
	for _, mode := range []struct {
		name string
		mode FaultMode
	}{{"flip", FaultFlip}, {"stale", FaultStale}, {"negate", FaultNegate}} {
		t.Run(mode.name, func(t *testing.T) { testVerifyEvicts(t, mode.mode) })
	}
}

func testVerifyEvicts(t *testing.T, mode FaultMode) {
	const faultyAt = 5
	_, nodes := verifyCluster(t, 6, map[int][]Option{faultyAt: {WithFaultInjection(FaultSpec{Every: 50, Mode: mode})}})
	faulty := nodes[faultyAt]
	fid := faulty.ID().String()
	m := nodes[0].Committed()
	fr, ok := m.Range(fid)
	if !ok {
		t.Fatalf("faulty node not placed: %v", m.Stages)
	}
	if h := len(nodes[0].holders(fr.Start, fr.End)); h < 3 {
		t.Fatalf("the faulty node's range %v has %d holders; a tie-break needs 3 (map %v)", fr, h, m.Stages)
	}
	honest := nodes[:faultyAt]
	const maxTokens = 16
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark and stormy night"}
	want := map[string][]int32{}
	for _, p := range prompts {
		want[p] = reference(t, p, maxTokens, engineGreedy())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	evicted := func() bool {
		_, banned := honest[0].Consensus().State().Banned(fid, time.Now())
		return banned
	}
	start := time.Now()
	var gens, wrongBefore, flagged int
	for i := 0; !evicted(); i++ {
		if ctx.Err() != nil {
			t.Fatalf("not evicted after %d generations (%v): %+v", gens, time.Since(start), honest[0].VerifyStats())
		}
		p := prompts[i%len(prompts)]
		got, err := generate(ctx, t, honest[i%len(honest)], p, maxTokens)
		gens++
		switch {
		case errors.Is(err, ErrWrongTokens):
			flagged++
		case err != nil:
			t.Logf("generation %d: %v", i, err)
		}
		for j := range min(len(got), len(want[p])) {
			if got[j] != want[p][j] && err == nil {
				wrongBefore++
			}
		}
	}
	detect := time.Since(start)
	t.Logf("evicted after %d generations, %v; wrong tokens delivered unflagged before: %d; generations flagged: %d",
		gens, detect.Round(time.Millisecond), wrongBefore, flagged)

	// The leader repairs the map without it; from then on every token is right.
	waitFor(t, 60*time.Second, "a map without the faulty node", func() bool {
		for _, n := range honest {
			if _, ok := n.Committed().Range(fid); ok {
				return false
			}
			if _, err := n.paths.route(routeReq{prompt: 1, max: 1}); err != nil {
				return false
			}
		}
		return true
	})
	for i := range 8 {
		p := prompts[i%len(prompts)]
		got, err := generate(ctx, t, honest[i%len(honest)], p, maxTokens)
		if err != nil {
			t.Fatalf("after eviction, %q: %v", p, err)
		}
		if !slices.Equal(got, want[p]) {
			t.Fatalf("after eviction, %q: %v, want %v", p, got, want[p])
		}
	}
	for _, n := range honest {
		st := n.Consensus().State()
		if st.IsMember(fid) {
			t.Fatalf("the faulty node is a member again")
		}
		if _, banned := st.Banned(fid, time.Now()); !banned {
			t.Fatalf("the faulty node is not banned on %s", shortID(n.ID()))
		}
		for _, h := range honest {
			if !st.IsMember(h.ID().String()) {
				t.Fatalf("honest node %s evicted", shortID(h.ID()))
			}
		}
	}
	var total VerifyStats
	for _, n := range honest {
		s := n.VerifyStats()
		total.Audits += s.Audits
		total.Verified += s.Verified
		total.Mismatches += s.Mismatches
		total.Reported += s.Reported
		total.Unresolved += s.Unresolved
	}
	t.Logf("spot checks: %+v", total)
	if total.Reported == 0 {
		t.Fatalf("evicted with no report: %+v", total)
	}
}
