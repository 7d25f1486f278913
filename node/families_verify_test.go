package node

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

// deepSeek2Model writes an 8-layer deepseek2 file: latent attention (the
// cache holds the latent), a leading dense layer, then 8 experts in 4
// groups, 2 groups kept, 2 experts used, sigmoid routing with
// exp_probs_b and a shared expert.
func deepSeek2Model(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "deepseek2.gguf")
	c := engine.GenConfig{Arch: "deepseek2", Layers: 8, Dim: 64, Heads: 4, FFN: 160, Vocab: 512, Seed: 12,
		Experts: 8, ExpertsUsed: 2, ExpertFFN: 32, DeepSeek2: engine.DeepSeek2Gen{ExpertGroups: 4, GroupsUsed: 2}}
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	return path
}

// referenceOf is reference on the model at path: the single-process
// run, the prompt with BOS.
func referenceOf(t testing.TB, path, prompt string, maxTokens int, sp engine.SamplingParams) []int32 {
	t.Helper()
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := engine.OpenPipeline(path, nil, engine.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ids := tok.Encode(prompt, true, false)
	s, err := p.NewSession(len(ids) + maxTokens)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Generate(context.Background(), ids, maxTokens, sp, tok.IsEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// modelEach gives every one of n nodes the model file at path.
func modelEach(n int, path string) map[int][]Option {
	m := map[int][]Option{}
	for i := range n {
		m[i] = []Option{WithModelFile(path)}
	}
	return m
}

// TestVerifyHonestDeepSeek2 is TestVerifyHonestSwarm on deepseek2: every
// token boundary spot-checked, a second holder recomputes a hop's range
// from its own latent cache and must agree bit for bit; the checks pass,
// nobody is reported or evicted, and the tokens are the single-process
// run's. A swarm whose routes have no hop with a second holder checks
// nothing; up to five swarms are drawn until one checks.
func TestVerifyHonestDeepSeek2(t *testing.T) {
	path := deepSeek2Model(t)
	const maxTokens = 12
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground"}
	want := map[string][]int32{}
	for _, p := range prompts {
		want[p] = referenceOf(t, path, p, maxTokens, engineGreedy())
	}
	for try := range 5 {
		checked := false
		t.Run(fmt.Sprintf("swarm-%d", try), func(t *testing.T) {
			checked = verifyHonestOn(t, path, prompts, want, maxTokens)
		})
		if checked || t.Failed() {
			return
		}
		t.Logf("swarm %d routed no path with a second holder for a hop: nothing checked; a fresh swarm", try)
	}
	t.Fatal("five swarms in a row routed no path that could be checked")
}

// verifyHonestOn runs the prompts on a 5-node swarm of the model at path
// and reports whether a spot check ran.
func verifyHonestOn(t *testing.T, path string, prompts []string, want map[string][]int32, maxTokens int) bool {
	_, nodes := verifyCluster(t, 5, modelEach(5, path))
	waitEngines(t, nodes, func(*Node) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i, p := range prompts {
		got, err := generate(ctx, t, nodes[i%len(nodes)], p, maxTokens)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		if !slices.Equal(got, want[p]) {
			t.Fatalf("%q: %v, want %v: %v", p, got, want[p], errMismatch)
		}
	}
	var total VerifyStats
	for _, n := range nodes {
		s := n.Metrics().Verify
		total.Audits += s.Audits
		total.Verified += s.Verified
		total.Mismatches += s.Mismatches
		total.Reported += s.Reported
		total.Unresolved += s.Unresolved
		total.Checked += s.Checked
	}
	t.Logf("map %v; spot checks: %+v", nodes[0].Committed().Stages, total)
	if total.Mismatches != 0 || total.Reported != 0 || total.Unresolved != 0 {
		t.Fatalf("an honest deepseek2 swarm had mismatches: %+v", total)
	}
	for _, n := range nodes {
		if st := n.cons.Load().State(); len(st.Bans()) != 0 || st.Len() != len(nodes) {
			t.Fatalf("honest node evicted: %d members, bans %v", st.Len(), st.Bans())
		}
	}
	if total.Audits == 0 {
		return false
	}
	if total.Verified == 0 || total.Checked == 0 {
		t.Fatalf("spot checks started but none passed: %+v", total)
	}
	return true
}
