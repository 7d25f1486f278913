package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// wireReference is the single-process run of prompt with the hidden
// states crossing every cut as dt would deliver them: what a swarm whose
// paths cut the model there must give.
func wireReference(t *testing.T, cuts []int, dt DType, prompt string, maxTokens int, sp engine.SamplingParams) []int32 {
	t.Helper()
	path := testModel(t)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, cuts, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := tok.Encode(prompt, true, false)
	var sess []engine.Session
	for _, s := range p.Stages {
		ss, err := s.NewSession(len(ids) + maxTokens)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Close()
		sess = append(sess, ss)
	}
	ctx := context.Background()
	hist := slices.Clone(ids)
	logits, err := wireStep(ctx, p, sess, dt, ids)
	var out []int32
	for err == nil {
		next := engine.Sample(logits, sp, len(hist), hist)
		hist, out = append(hist, next), append(out, next)
		if tok.IsEnd(next) || len(out) == maxTokens {
			return out
		}
		logits, err = wireStep(ctx, p, sess, dt, []int32{next})
	}
	t.Fatal(err)
	return nil
}

// TestWireQ8Swarm: three nodes sending q8 between hops, every token
// boundary spot-checked. The tokens are the single-process run's with the
// same q8 round trip at the same cut (not the float32 run's), the exact
// checks pass with no mismatch, and a generation whose last hop is
// killed half-way replays on the other holder to the very same tokens.
func TestWireQ8Swarm(t *testing.T) {
	q8 := []Option{WithWire(WireQ8)}
	nodes := verifyClusterWhere(t, 3, map[int][]Option{0: q8, 1: q8, 2: q8}, func(m layers.LayerMap, nodes []*Node) string {
		last := 0
		for _, s := range m.Stages {
			if (s.Start != 0 && s.Start != 4) || (s.End != 4 && s.End != 8) {
				return "a range not cut at layer 4"
			}
			if s.Start == 4 {
				last++
			}
		}
		if last != 2 {
			return "one holder of the last range"
		}
		return ""
	})
	m := nodes[0].Committed()
	var first *Node
	var lasts []*Node
	for _, n := range nodes {
		if r, _ := m.Range(n.ID().String()); r.Start == 0 {
			first = n
		} else {
			lasts = append(lasts, n)
		}
	}
	cuts := []int{0, 4, 8}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const maxTokens = 16
	differs := 0
	for i, p := range []string{"Once upon a time", "The quick brown fox", "In a hole in the ground"} {
		want := wireReference(t, cuts, DTypeQ8, p, maxTokens, engineGreedy())
		if !slices.Equal(want, reference(t, p, maxTokens, engineGreedy())) {
			differs++
		}
		entry := nodes[i%len(nodes)]
		s, err := entry.Generate(ctx, Request{Prompt: p, MaxTokens: maxTokens, Sampling: engineGreedy()})
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		got, err := recvAll(s)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if !slices.Equal(got, want) {
			// Seen once in some 60 CI runs, not reproduced in 10,000
			// requests since: what each node did, for the next time.
			r, _ := s.Result()
			t.Logf("entry %s; paths %v; replays %d at %v", shortID(entry.ID()), r.Paths, r.Replays, r.ReplayedAt)
			for _, n := range nodes {
				m := n.Metrics()
				t.Logf("%s: steps %d, batched %d, rejected %d, prefix hits %d (%d positions), replays %d, hop failures %d, stolen %d/%d, checks %d verified, %d inconclusive",
					shortID(n.ID()), m.Steps, m.BatchedSteps, m.Rejected, m.PrefixHits, m.PrefixTokens, m.Replays, m.HopFailures,
					m.Stolen, m.StolenFrom, m.Verify.Verified, m.Verify.Inconclusive)
			}
			t.Fatalf("%q: %v, want the q8 single-process run's %v", p, got, want)
		}
	}
	t.Logf("q8 tokens differ from float32's for %d of 3 prompts", differs)
	var total VerifyStats
	for _, n := range nodes {
		s := n.Metrics().Verify
		total.Verified += s.Verified
		total.Mismatches += s.Mismatches
		total.Reported += s.Reported
		total.Unresolved += s.Unresolved
		total.Inconclusive += s.Inconclusive
	}
	t.Logf("spot checks: %+v", total)
	if total.Verified == 0 || total.Mismatches != 0 || total.Reported != 0 || total.Unresolved != 0 {
		t.Fatalf("spot checks over q8 links: %+v", total)
	}

	// A replay: the last hop of a running generation dies.
	const long = 64
	r := &genRun{prompt: "It was a dark and stormy night", sp: engineGreedy(), entry: first}
	r.want = wireReference(t, cuts, DTypeQ8, r.prompt, long, r.sp)
	wg := startRuns(ctx, t, []*genRun{r}, long)
	waitFor(t, 60*time.Second, "a quarter of the generation", func() bool {
		return int(r.count.Load()) >= min(long/4, len(r.want))
	})
	victim, use := busiest([]*Node{first}, lasts)
	victim.Kill()
	wg.Wait()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !slices.Equal(r.got, r.want) {
		t.Fatalf("after the kill: %v, want %v", r.got, r.want)
	}
	t.Logf("killed %s on %d running paths; %d replay(s)", shortID(victim.ID()), use, r.result.Replays)
	if use > 0 && r.result.Replays == 0 {
		t.Fatalf("the last hop was killed under the generation, which never replayed")
	}
}
