package routing

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tickObserver is an Observer whose clock advances one microsecond per
// reading, so that every timed call takes a known, nonzero time.
type tickObserver struct {
	ticks atomic.Int64
	mu    sync.Mutex
	calls map[PluginCall][]time.Duration
}

func (o *tickObserver) Mark() time.Duration { return time.Duration(o.ticks.Add(1)) * time.Microsecond }

func (o *tickObserver) Observe(c PluginCall, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[PluginCall][]time.Duration{}
	}
	o.calls[c] = append(o.calls[c], d)
}

// wallObserver times on the wall clock and keeps per-plugin totals, as a
// node's histograms would: the benchmarks' realistic observer.
type wallObserver struct {
	start time.Time
	mu    sync.Mutex
	sum   map[PluginCall]time.Duration
}

func newWallObserver() *wallObserver {
	return &wallObserver{start: time.Now(), sum: map[PluginCall]time.Duration{}}
}

func (o *wallObserver) Mark() time.Duration { return time.Since(o.start) }

func (o *wallObserver) Observe(c PluginCall, d time.Duration) {
	o.mu.Lock()
	o.sum[c] += d
	o.mu.Unlock()
}

func TestObserverSeesEveryPlugin(t *testing.T) {
	c, err := ParseSchedulerConfig([]byte(`default: chat
profiles:
- name: chat
  filters: [live, phase, kv]
  scorers:
  - {name: latency, weight: 1}
  - {name: load, weight: 1}
  - {name: prefix-affinity, weight: 2}
  picker: best-of-slack
- name: spread
  scorers: [{name: latency, weight: 1}]
  picker: weighted-random
  candidates: 3
`))
	if err != nil {
		t.Fatal(err)
	}
	obs := &tickObserver{}
	model := WithModel(mustModel(t, "llama-3-70b"))
	observed, err := NewProfiles(c, model, WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewProfiles(c, model)
	if err != nil {
		t.Fatal(err)
	}
	m, v := swarm(t, 40, 80, 7, 3)
	const routes = 5
	for _, name := range []string{"chat", "spread"} {
		for seed := range uint64(routes) {
			req := Request{Entry: "entry", PromptTokens: 256, MaxTokens: 64, Seed: seed}
			po, _ := observed.Profile(name)
			pp, _ := plain.Profile(name)
			got, err := po.Route(m, v, req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			want, err := pp.Route(m, v, req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Same(want) || got.Cost != want.Cost {
				t.Fatalf("%s seed %d: observing changed the route: %v (%g) vs %v (%g)", name, seed, got.Nodes(), got.Cost, want.Nodes(), want.Cost)
			}
		}
	}
	want := map[PluginCall]bool{
		{"chat", "live", KindFilter}: true, {"chat", "phase", KindFilter}: true, {"chat", "kv", KindFilter}: true,
		{"chat", "latency", KindScorer}: true, {"chat", "load", KindScorer}: true,
		{"chat", "prefix-affinity", KindScorer}: true, {"chat", PickBestOfSlack, KindPicker}: true,
		{"spread", "live", KindFilter}: true, {"spread", "phase", KindFilter}: true,
		{"spread", "latency", KindScorer}: true, {"spread", PickWeightedRandom, KindPicker}: true,
	}
	for c, ds := range obs.calls {
		if !want[c] {
			t.Errorf("unexpected observation %+v (a zero-weight scorer or a plugin the profile lacks)", c)
			continue
		}
		if len(ds) != routes {
			t.Errorf("%+v observed %d times in %d routes", c, len(ds), routes)
		}
		for _, d := range ds {
			// Each plugin ran at least once per route, and every timed
			// call spans at least one tick.
			if d < time.Microsecond {
				t.Errorf("%+v: %v, want at least one tick", c, d)
			}
		}
	}
	for c := range want {
		if _, ok := obs.calls[c]; !ok {
			t.Errorf("%+v never observed", c)
		}
	}
}

// A route that fails in the filters still reports them, but no picker.
func TestObserverOnNoPath(t *testing.T) {
	obs := &tickObserver{}
	r, err := New(WithModel(mustModel(t, "llama-3-70b")), WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	m := mustMap(t, 80, stage("a", 0, 80))
	dead := fresh(t, "a", "rtx4090")
	dead.Health = Dead
	if _, err := r.Route(m, NewView(fresh(t, "entry", "h100"), dead), Request{Entry: "entry", PromptTokens: 8, MaxTokens: 8}, testNow); err == nil {
		t.Fatal("routed over a dead node")
	}
	if n := len(obs.calls[PluginCall{"", "live", KindFilter}]); n != 1 {
		t.Errorf("live filter observed %d times, want 1", n)
	}
	for c := range obs.calls {
		if c.Kind == KindPicker {
			t.Errorf("picker observed on a route that never reached it: %+v", c)
		}
	}
}
