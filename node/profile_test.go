package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/routing"
)

// TestSchedulerProfiles routes requests of one swarm with two profiles:
// the default one and a round-robin one, which must take the map's
// pipelines in turn. An unknown profile is a bad request, not a 503.
func TestSchedulerProfiles(t *testing.T) {
	cfg, err := routing.ParseSchedulerConfig([]byte(`
default: fast
profiles:
  - name: fast
    scorers: [{name: latency, weight: 1}, {name: load, weight: 1}]
  - name: rr
    picker: round-robin
`))
	if err != nil {
		t.Fatal(err)
	}
	c := newTestCluster(t, WithSchedulerConfig(cfg))
	var ids []peer.ID
	for range 2 {
		ids = append(ids, c.add().ID())
	}
	c.waitServing(30*time.Second, ids...)
	n := c.all()[0]
	if got := n.Swarm().Scheduler; got.Default != "fast" || len(got.Profiles) != 2 {
		t.Fatalf("effective config %+v", got)
	}
	pipes := routing.FixedPipelines(n.Committed())
	t.Logf("map %v: %d fixed pipelines", n.Committed().Stages, len(pipes))
	if len(pipes) < 2 {
		t.Fatalf("want two pipelines for round robin, map %v", n.Committed().Stages)
	}
	// Round robin skips pipelines its filters refuse: wait until this
	// node has heard from both (a heartbeat says the other is serving).
	rr, err := n.paths.profiles.Profile("rr")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "every pipeline usable", func() bool {
		m := n.Committed()
		now := time.Now()
		for _, p := range routing.FixedPipelines(m) {
			if _, err := rr.Router().Evaluate(m, n.paths.view(m, now), routing.Request{Entry: n.ID().String(), PromptTokens: 1, MaxTokens: 1}, now, p); err != nil {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const prompt, maxTokens = "Once upon a time", 4
	want := reference(t, prompt, maxTokens, engineGreedy())
	var seen []string
	for i := range 2 * len(pipes) {
		res, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Profile: "rr"})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if !slices.Equal(res.Tokens, want) {
			t.Fatalf("request %d: %v, want %v", i, res.Tokens, want)
		}
		if len(res.Paths) != 1 {
			t.Fatalf("request %d replayed: %v", i, res.Paths)
		}
		seen = append(seen, res.Paths[0])
	}
	// Round robin: with every node live, request i takes pipeline i mod n.
	for i := range seen {
		if seen[i] != seen[i%len(pipes)] {
			t.Fatalf("paths %v do not repeat with period %d", seen, len(pipes))
		}
	}
	if seen[0] == seen[1] {
		t.Fatalf("round robin took the same path twice in a row: %v", seen)
	}
	if _, err := n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Profile: "fast"}); err != nil {
		t.Fatalf("named default profile: %v", err)
	}
	// Every route reported each plugin of its profile to the node's
	// per-plugin histograms, and nothing else.
	hists := map[routing.PluginCall]PluginHistogram{}
	for _, h := range n.Metrics().SchedulerPlugins {
		hists[h.PluginCall] = h
	}
	for _, w := range []routing.PluginCall{
		{Profile: "rr", Plugin: routing.PickRoundRobin, Kind: routing.KindPicker},
		{Profile: "rr", Plugin: "live", Kind: routing.KindFilter},
		{Profile: "fast", Plugin: "latency", Kind: routing.KindScorer},
		{Profile: "fast", Plugin: "load", Kind: routing.KindScorer},
		{Profile: "fast", Plugin: routing.PickBestOfSlack, Kind: routing.KindPicker},
	} {
		h, ok := hists[w]
		atLeast := uint64(1)
		if w.Profile == "rr" {
			atLeast = uint64(2 * len(pipes))
		}
		if !ok || h.Count < atLeast || h.Counts[len(h.Counts)-1] > h.Count {
			t.Errorf("plugin histogram %+v: %+v (present %v), want at least %d routes", w, h, ok, atLeast)
		}
	}
	if _, ok := hists[routing.PluginCall{Profile: "fast", Plugin: "locality", Kind: routing.KindScorer}]; ok {
		t.Errorf("the fast profile's unused locality scorer was timed")
	}
	_, err = n.Complete(ctx, Request{Prompt: prompt, MaxTokens: maxTokens, Profile: "nope"})
	if !errors.Is(err, ErrBadRequest) || !errors.Is(err, routing.ErrUnknownProfile) {
		t.Fatalf("unknown profile: %v, want ErrBadRequest wrapping routing.ErrUnknownProfile", err)
	}
}

// TestSchedulerConfigInvalid: a configuration that names an unknown
// plugin stops New with ErrConfig and the field's name.
func TestSchedulerConfigInvalid(t *testing.T) {
	bad := routing.DefaultSchedulerConfig()
	bad.Profiles[0].Scorers = append(bad.Profiles[0].Scorers, routing.ScorerSpec{Name: "nope", Weight: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := New(ctx, append(baseOptions(t), WithSchedulerConfig(bad))...)
	if err == nil {
		n.Close()
		t.Fatal("New accepted an unknown scorer")
	}
	if !isConfig(err) || !errors.Is(err, routing.ErrUnknownPlugin) || !contains(err.Error(), "nope") {
		t.Fatalf("error %v: want ErrConfig wrapping ErrUnknownPlugin naming the plugin", err)
	}
	t.Log(err)
}
