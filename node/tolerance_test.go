package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// perturbStage is a test double for a non-deterministic engine (ggml on
// a GPU), not a mock of the forward pass: the real go engine computes,
// and its outputs are then moved by random noise, as summation order and
// quantised activations move another backend's. hidden is the relative
// noise on hidden rows, logits the noise on each logit as a share of max
// |logit|; lie, when set, also moves the argmax: the runner-up is lifted
// above the top by half of max |logit| (a node returning other logits).
type perturbStage struct {
	engine.Stage
	hidden, logits float32
	lie            bool
	// lieHidden: the node also returns other hidden rows (each row's
	// values in reverse order), as a lying hop before the last would.
	lieHidden bool
	mu        sync.Mutex
	rng       *rand.Rand
}

func perturbEngine(name string, hidden, logits float32, lie bool) Option {
	return perturbEngineWith(name, hidden, logits, lie, false)
}

// perturbEngineWith is perturbEngine that may also lie on hidden rows.
func perturbEngineWith(name string, hidden, logits float32, lie, lieHidden bool) Option {
	return WithEngine(Engine{Name: name, Open: func(path string, lo, hi, threads int) (engine.Stage, error) {
		st, err := openGo(path, lo, hi, threads)
		if err != nil {
			return nil, err
		}
		return &perturbStage{Stage: st, hidden: hidden, logits: logits, lie: lie, lieHidden: lieHidden,
			rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}, nil
	}})
}

func (p *perturbStage) Forward(ctx context.Context, s engine.Step) (engine.Output, error) {
	out, err := p.Stage.Forward(ctx, s)
	if err == nil {
		p.perturb(&out)
	}
	return out, err
}

func (p *perturbStage) ForwardBatch(ctx context.Context, steps []engine.Step) ([]engine.Output, error) {
	outs, err := p.Stage.ForwardBatch(ctx, steps)
	if err == nil {
		for i := range outs {
			p.perturb(&outs[i])
		}
	}
	return outs, err
}

func (p *perturbStage) perturb(o *engine.Output) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := func() float32 { return 2*p.rng.Float32() - 1 }
	for i := range o.Hidden {
		o.Hidden[i] *= 1 + p.hidden*u()
	}
	if d := p.Info().Hidden; p.lieHidden && d > 0 {
		for r := 0; r+d <= len(o.Hidden); r += d {
			slices.Reverse(o.Hidden[r : r+d])
		}
	}
	if len(o.Logits) == 0 {
		return
	}
	_, maxAbs := consensus.SummarizeLogits(o.Logits, 1)
	for i := range o.Logits {
		o.Logits[i] += p.logits * maxAbs * u()
	}
	if p.lie {
		top, m := consensus.SummarizeLogits(o.Logits, 2)
		o.Logits[top[1].ID] = top[0].Logit + m/2
	}
}

// TestToleranceHonestPerturbed: nodes on a non-deterministic engine
// (the go engine's outputs plus noise: 1e-3 relative on hidden rows, ±2%
// of max |logit| on logits, several times ggml's measured error is not
// needed to pass) are checked by tolerance at every token boundary, and
// none is ever faulted; no exact check involves them. Every node but the
// first is perturbed, so checkers and upstream hops are too. Hops before
// the last are checked too where routes cross them (midAudit; the routes
// may all take the go node there, so TestToleranceHonestMidPath is the
// test that they are).
func TestToleranceHonestPerturbed(t *testing.T) {
	noisy := perturbEngine("noisy-test", 1e-3, 0.02, false)
	// The go node must not serve the last range: an entry's path that
	// ends on it has no tolerance candidate (and, fed by a perturbed hop,
	// no exact one), and an entry on the last range ends its paths on
	// itself, which it does not check. With the go node on the first
	// range its own generations always have a perturbed last hop with two
	// other holders to check it.
	nodes := verifyClusterWhere(t, 5, map[int][]Option{1: {noisy}, 2: {noisy}, 3: {noisy}, 4: {noisy}}, func(m layers.LayerMap, nodes []*Node) string {
		if r, ok := m.Range(nodes[0].ID().String()); ok && r.End < m.Layers {
			return ""
		}
		return "the go node serves the last range"
	})
	waitFor(t, 60*time.Second, "heartbeats naming the engines", func() bool {
		for _, n := range nodes {
			for _, o := range nodes[1:] {
				if n != o && n.trust.Reproducible(o.ID()) {
					return false
				}
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark night"}
	var total VerifyStats
	for i := range 16 {
		if _, err := generate(ctx, t, nodes[i%len(nodes)], prompts[i%len(prompts)], 12); err != nil {
			t.Fatalf("generation %d: %v", i, err)
		}
	}
	noisyIDs := map[string]bool{}
	for _, n := range nodes[1:] {
		noisyIDs[n.ID().String()] = true
	}
	m := nodes[0].Committed()
	midChecks := 0
	for _, n := range nodes {
		s := n.Metrics().Verify
		total.Tolerance += s.Tolerance
		total.ToleranceMismatches += s.ToleranceMismatches
		total.Reported += s.Reported
		total.Unresolved += s.Unresolved
		total.Verified += s.Verified
		total.MaxAgreeingDelta = max(total.MaxAgreeingDelta, s.MaxAgreeingDelta)
		for _, c := range s.Log {
			if !c.Tolerance && (noisyIDs[c.Hop.String()] || noisyIDs[c.Checker.String()]) {
				t.Fatalf("an exact check of %s by %s: a node on another engine took part", c.Hop, c.Checker)
			}
			if r, _ := m.Range(c.Hop.String()); c.Tolerance && r.End != m.Layers {
				midChecks++
			}
		}
	}
	t.Logf("tolerance checks: %d (%d of hops before the last), beyond the tolerance: %d, largest agreeing max|Δ|/max|logit|: %.4f (tolerance %.2f); unresolved %d, reported %d",
		total.Tolerance, midChecks, total.ToleranceMismatches, total.MaxAgreeingDelta, consensus.LogitsTolerance, total.Unresolved, total.Reported)
	if total.Tolerance == 0 {
		t.Fatalf("no tolerance check ran (map %v)", m.Stages)
	}
	if total.ToleranceMismatches != 0 || total.Reported != 0 || total.Unresolved != 0 {
		t.Fatalf("an honest perturbed swarm had mismatches: %+v", total)
	}
	for _, n := range nodes {
		if st := n.cons.Load().State(); len(st.Bans()) != 0 || st.Len() != len(nodes) {
			t.Fatalf("honest node evicted: %d members, bans %v", st.Len(), st.Bans())
		}
	}
}

// TestToleranceCatchesLiar: a last hop on another engine that moves the
// argmax of its logits is found by a tolerance check, a third holder
// sides with the checker, the leader takes the tolerance evidence and
// evicts it with the shorter ban (the cluster's hour / 24), and the
// generations after that are the single-process run's.
func TestToleranceCatchesLiar(t *testing.T) {
	toleranceEvicts(t, perturbEngine("liar-test", 1e-3, 0.02, true), true)
}

// TestToleranceHonestMidPath: in a swarm where every node is perturbed
// (as TestToleranceHonestPerturbed's), every hop before the last that is
// not the entry is a candidate for a mid-path tolerance check at every
// token boundary; over 16 generations such checks run and none accuses an
// honest node.
func TestToleranceHonestMidPath(t *testing.T) {
	noisy := perturbEngine("noisy-test", 1e-3, 0.02, false)
	extra := map[int][]Option{}
	for i := range 5 {
		extra[i] = []Option{noisy}
	}
	_, nodes := verifyCluster(t, 5, extra)
	waitFor(t, 60*time.Second, "heartbeats naming the engines", func() bool {
		for _, n := range nodes {
			for _, o := range nodes {
				if n != o && n.trust.Reproducible(o.ID()) {
					return false
				}
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark night"}
	start := time.Now()
	for i := range 16 {
		if _, err := generate(ctx, t, nodes[i%len(nodes)], prompts[i%len(prompts)], 12); err != nil {
			t.Fatalf("generation %d: %v", i, err)
		}
	}
	took := time.Since(start)
	m := nodes[0].Committed()
	var total VerifyStats
	mid := 0
	for _, n := range nodes {
		s := n.Metrics().Verify
		total.Tolerance += s.Tolerance
		total.ToleranceMismatches += s.ToleranceMismatches
		total.Reported += s.Reported
		total.Unresolved += s.Unresolved
		total.Audits += s.Audits
		total.MaxAgreeingDelta = max(total.MaxAgreeingDelta, s.MaxAgreeingDelta)
		for _, c := range s.Log {
			if !c.Tolerance {
				t.Fatalf("an exact check of %s by %s in a swarm of perturbed nodes", c.Hop, c.Checker)
			}
			if r, _ := m.Range(c.Hop.String()); r.End != m.Layers {
				mid++
			}
		}
	}
	t.Logf("16 generations in %v; checks started %d, tolerance checks %d (%d of hops before the last), beyond the tolerance %d, largest agreeing %.4f; unresolved %d, reported %d",
		took.Round(time.Millisecond), total.Audits, total.Tolerance, mid, total.ToleranceMismatches, total.MaxAgreeingDelta, total.Unresolved, total.Reported)
	if mid == 0 {
		t.Fatalf("no tolerance check of a hop before the last ran (map %v)", m.Stages)
	}
	if total.ToleranceMismatches != 0 || total.Reported != 0 || total.Unresolved != 0 {
		t.Fatalf("an honest perturbed swarm had mismatches: %+v", total)
	}
	for _, n := range nodes {
		if st := n.cons.Load().State(); len(st.Bans()) != 0 || st.Len() != len(nodes) {
			t.Fatalf("honest node evicted: %d members, bans %v", st.Len(), st.Bans())
		}
	}
}

// TestToleranceCatchesMidLiar: a node that claims a non-go engine and
// returns other hidden rows (each row reversed) from a range before the
// last is found by a tolerance check of the last hop's logits through the
// same downstream with a second holder in its place; a third holder
// sides with the checker, the leader takes the mid-path tolerance
// evidence and evicts it with the shorter ban, and the generations after
// that are the single-process run's. Before this check such a node was
// never checked, nor were the go hops after it.
func TestToleranceCatchesMidLiar(t *testing.T) {
	// The liar holds no last layer, so its receipts carry no logits: only
	// the mid-path kind (consensus.Evidence.Tails) can accuse it.
	toleranceEvicts(t, perturbEngineWith("liar-test", 1e-3, 0.02, false, true), false)
}

// toleranceEvicts runs a liar (liarOpt, on a node that claims another
// engine) on a range with 3 holders, the last range (last) or one before
// it, until the leader bans it: by a tolerance report within 240 s, with
// the tolerance kind's shorter ban (the cluster's hour / 24, not a
// proof's hour). The generations after that are the single-process
// run's.
func toleranceEvicts(t *testing.T, liarOpt Option, last bool) {
	const liarAt = 5
	where := "a last range"
	if !last {
		where = "one before the last"
	}
	nodes := verifyClusterWhere(t, 6, map[int][]Option{liarAt: {liarOpt}}, func(m layers.LayerMap, nodes []*Node) string {
		fr, ok := m.Range(nodes[liarAt].ID().String())
		if !ok {
			t.Fatalf("liar not placed: %v", m.Stages)
		}
		if (fr.End == m.Layers) == last && len(nodes[0].trust.Holders(fr.Start, fr.End)) >= 3 {
			return ""
		}
		return fmt.Sprintf("the liar's range %v is not %s with 3 holders", fr, where)
	})
	liar := nodes[liarAt]
	lid := liar.ID().String()
	honest := nodes[:liarAt]
	waitFor(t, 60*time.Second, "heartbeats naming the liar's engine", func() bool {
		for _, n := range honest {
			if n.trust.Reproducible(liar.ID()) {
				return false
			}
		}
		return true
	})
	const maxTokens = 12
	prompts := []string{"Once upon a time", "The quick brown fox", "In a hole in the ground", "It was a dark and stormy night"}
	want := map[string][]int32{}
	for _, p := range prompts {
		want[p] = reference(t, p, maxTokens, engineGreedy())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	banned := func() (time.Time, bool) { return honest[0].cons.Load().State().Banned(lid, time.Now()) }
	start := time.Now()
	gens, flagged := 0, 0
	for i := 0; ; i++ {
		if _, ok := banned(); ok {
			break
		}
		if ctx.Err() != nil {
			s := honest[0].Metrics().Verify
			s.Log = nil
			t.Fatalf("not evicted after %d generations: %+v", gens, s)
		}
		_, err := generate(ctx, t, honest[i%len(honest)], prompts[i%len(prompts)], maxTokens)
		gens++
		switch {
		case errors.Is(err, ErrWrongTokens):
			flagged++
		case err != nil:
			t.Logf("generation %d: %v", i, err)
		}
	}
	until, _ := banned()
	var reported, mism uint64
	for _, n := range honest {
		s := n.Metrics().Verify
		reported += s.Reported
		mism += s.ToleranceMismatches
	}
	t.Logf("liar on %s evicted after %d generations, %v; tolerance mismatches %d, reports accepted %d, generations flagged %d, banned until now+%v",
		where, gens, time.Since(start).Round(time.Millisecond), mism, reported, flagged, time.Until(until).Round(time.Second))
	if reported == 0 || mism == 0 {
		t.Fatalf("evicted without a tolerance report: reported %d, mismatches %d", reported, mism)
	}
	if d := time.Until(until); d > time.Hour/consensus.ToleranceBanDivisor+time.Minute {
		t.Fatalf("banned for %v: not the tolerance kind's shorter ban", d)
	}
	servesRightWithout(ctx, t, honest, lid, prompts, want, maxTokens, 4)
}
