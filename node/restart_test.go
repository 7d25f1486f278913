package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stratanet/strata/swarm"
)

// TestRestartReloadsCommittedRange: a node killed and restarted from its
// data dir before the leader notices finds itself in the committed map
// without its layers. It must load them again and announce that it
// serves only once it holds them; meanwhile no request fails on it.
func TestRestartReloadsCommittedRange(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := c.add(WithDataDir(dirs[0]))
	b := c.add(WithDataDir(dirs[1]))
	d := c.add(WithDataDir(dirs[2]))
	c.waitServing(20*time.Second, a.ID(), b.ID(), d.ID())
	r, ok := a.Committed().Range(b.ID().String())
	if !ok {
		t.Fatal("b is not in the map")
	}
	const prompt, maxTokens = "The lighthouse keeper", 16
	want := reference(t, prompt, maxTokens, greedy)

	epoch := a.Committed().Epoch
	b.Kill()
	restarted := c.add(WithDataDir(dirs[1]))
	if restarted.ID() != b.ID() {
		t.Fatal("the restart has another identity")
	}
	waitFor(t, 5*time.Second, "the restarted node's committed map", func() bool { return restarted.Committed().Epoch >= epoch })
	if got, ok := restarted.Committed().Range(b.ID().String()); !ok || got != r || restarted.Committed().Epoch != epoch {
		t.Skipf("the map changed before the restart (epoch %d → %d): the case under test did not arise", epoch, restarted.Committed().Epoch)
	}
	// It announces serving only once it holds its range again, and from
	// then on every entry's requests are exact, through it or not.
	reload := waitFor(t, 10*time.Second, "the restarted node serves", func() bool {
		return restarted.ann.phase() == swarm.StateServing
	})
	if !restarted.ann.holds(r) {
		t.Fatalf("the restarted node announces serving without holding %v", r)
	}
	// The other entries route once its next heartbeat says so.
	c.waitServing(10*time.Second, a.ID(), b.ID(), d.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		for _, e := range []*Node{a, d, restarted} {
			res, err := e.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: greedy})
			if err != nil {
				t.Fatalf("request %d via %s: %v", n, e.ID().ShortString(), err)
			}
			if !slices.Equal(res.Tokens, want) {
				t.Fatalf("request %d: tokens %v, want %v", n, res.Tokens, want)
			}
			n++
		}
	}
	t.Logf("the restarted node reloaded %v and served %v after its start; then %d requests were exact", r, reload.Round(time.Millisecond), n)
}

// TestRestartAfterRemoval: a node killed long enough for the leader to
// remove it, then restarted from its data dir, is placed again: its
// stale state still lists it as a member, so it must ask to rejoin, and
// the leader must not take it for dead because its old peer-table row
// says so. (In process this passes even without those two fixes; the
// testnet churn scenario, with real processes, is where it failed.)
func TestRestartAfterRemoval(t *testing.T) {
	c := newTestCluster(t, WithMaxLayers(4))
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	a := c.add(WithDataDir(dirs[0]))
	b := c.add(WithDataDir(dirs[1]))
	d := c.add(WithDataDir(dirs[2]))
	c.waitServing(20*time.Second, a.ID(), b.ID(), d.ID())
	b.Kill()
	waitFor(t, 15*time.Second, "the map without the killed node", func() bool {
		_, in := a.Committed().Range(b.ID().String())
		return !in && a.Committed().Covers()
	})
	removed := a.Committed().Epoch
	start := time.Now()
	// Slow heartbeats, as in a real deployment (1 s), so that its join
	// request reaches the leader well before its first heartbeat does.
	restarted := c.add(WithDataDir(dirs[1]), WithSwarmOptions(swarm.WithHeartbeatInterval(time.Second),
		swarm.WithLiveness(3*time.Second, 4*time.Second, 2*time.Second))) // the defaults for 1 s
	placed := waitFor(t, 8*time.Second, "the restarted node placed again", func() bool {
		m := a.Committed()
		_, in := m.Range(restarted.ID().String())
		return in && m.Epoch > removed
	})
	c.waitServing(10*time.Second, a.ID(), restarted.ID(), d.ID())
	res, err := restarted.Complete(context.Background(), Request{Prompt: "Back again", MaxTokens: 8, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if want := reference(t, "Back again", 8, greedy); !slices.Equal(res.Tokens, want) {
		t.Fatalf("tokens %v, want %v", res.Tokens, want)
	}
	t.Logf("removed at epoch %d; placed again %v after its restart (epoch %d), serving %v after", removed,
		placed.Round(time.Millisecond), a.Committed().Epoch, time.Since(start).Round(time.Millisecond))
}
