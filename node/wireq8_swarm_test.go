package node

import (
	"context"
	"regexp"
	"slices"
	"strconv"
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

// hopRange is a hop's layers in a path as Result.Paths writes it.
var hopRange = regexp.MustCompile(`\[(\d+),(\d+)\)`)

// checkWireTokens fails t unless each of got is the token the
// single-process run would sample there, given the prompt and the tokens
// before it, with the hidden states crossing the cuts of one of the paths
// the generation used (r.Paths) as dt delivers them. A path may cut the
// model anywhere its holders' ranges allow: the router may split one
// range between two of its holders (a hop [4,5) on one, [5,8) on the
// other), and the tokens are then those of both cuts. A replay on a path
// with other cuts follows that path's run from where it took over.
func checkWireTokens(t *testing.T, dt DType, prompt string, got []int32, r Result, sp engine.SamplingParams) {
	t.Helper()
	path := testModel(t)
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(prompt, true, false)
	var runs [][][]float32 // per distinct cut set, the logits at each position
	var seen [][]int
	for _, ps := range r.Paths {
		cuts := []int{0}
		for _, m := range hopRange.FindAllStringSubmatch(ps, -1) {
			end, _ := strconv.Atoi(m[2])
			cuts = append(cuts, end)
		}
		if len(cuts) < 2 || slices.ContainsFunc(seen, func(c []int) bool { return slices.Equal(c, cuts) }) {
			continue
		}
		seen = append(seen, cuts)
		p, err := engine.OpenPipeline(path, cuts, engine.WithThreads(1))
		if err != nil {
			t.Fatal(err)
		}
		logits, _, err := wireRun(context.Background(), p, dt, ids, got, 0)
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, logits)
	}
	if len(runs) == 0 {
		t.Fatalf("%q: no path with layers among %v", prompt, r.Paths)
	}
	hist := slices.Clone(ids)
	for i, id := range got {
		if !slices.ContainsFunc(runs, func(l [][]float32) bool { return engine.Sample(l[i], sp, len(hist), hist) == id }) {
			t.Fatalf("%q: token %d of %v is not the %s single-process run's over the cuts %v of its paths %v",
				prompt, i, got, dt, seen, r.Paths)
		}
		hist = append(hist, id)
	}
}

// TestWireQ8Swarm: three nodes sending q8 between hops, every token
// boundary spot-checked. The tokens are the single-process run's with the
// same q8 round trip at the same cuts as the paths used (not the float32
// run's), the exact checks pass with no mismatch, and a generation whose
// last hop is killed half-way replays on the other holder, whose run it
// then follows.
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
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	const maxTokens = 16
	differs := 0
	for i, p := range []string{"Once upon a time", "The quick brown fox", "In a hole in the ground"} {
		s, err := nodes[i%len(nodes)].Generate(ctx, Request{Prompt: p, MaxTokens: maxTokens, Sampling: engineGreedy()})
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		got, err := recvAll(s)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		r, _ := s.Result()
		t.Logf("%q over %v", p, r.Paths)
		checkWireTokens(t, DTypeQ8, p, got, r, engineGreedy())
		if !slices.Equal(got, reference(t, p, maxTokens, engineGreedy())) {
			differs++
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
	// For its length only: its tokens depend on the cuts of its paths.
	r.want = wireReference(t, []int{0, 4, 8}, DTypeQ8, r.prompt, long, r.sp)
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
	checkWireTokens(t, DTypeQ8, r.prompt, r.got, r.result, r.sp)
	t.Logf("killed %s on %d running paths; %d replay(s)", shortID(victim.ID()), use, r.result.Replays)
	if use > 0 && r.result.Replays == 0 {
		t.Fatalf("the last hop was killed under the generation, which never replayed")
	}
}
