package node

import (
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/stratanet/strata/routing"
)

// pluginBounds are the scheduler plugin histogram's upper bounds, in
// seconds: one plugin's share of one route, microseconds to a few
// milliseconds on a large map.
var pluginBounds = []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1}

// PluginHistogram is the latency of one scheduler plugin in one profile,
// per route (cumulative counts, as WaitHistogram).
type PluginHistogram struct {
	routing.PluginCall
	WaitHistogram
}

// pluginTimer is the routing.Observer the node's profiles report to: it
// times plugins on the node's clock and keeps one histogram per (profile,
// plugin, kind). The set of keys is bounded by the configuration.
type pluginTimer struct {
	clock clockwork.Clock
	start time.Time

	mu   sync.Mutex
	hist map[routing.PluginCall]*pluginHist
}

type pluginHist struct {
	counts [12]uint64 // per bound, then +Inf
	sum    time.Duration
	n      uint64
}

var _ routing.Observer = (*pluginTimer)(nil)

func newPluginTimer(c clockwork.Clock) *pluginTimer {
	return &pluginTimer{clock: c, start: c.Now(), hist: map[routing.PluginCall]*pluginHist{}}
}

// Mark implements routing.Observer.
func (t *pluginTimer) Mark() time.Duration { return t.clock.Since(t.start) }

// Observe implements routing.Observer.
func (t *pluginTimer) Observe(c routing.PluginCall, d time.Duration) {
	s := d.Seconds()
	i := len(pluginBounds)
	for j, b := range pluginBounds {
		if s <= b {
			i = j
			break
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hist[c]
	if h == nil {
		h = &pluginHist{}
		t.hist[c] = h
	}
	h.counts[i]++
	h.sum += d
	h.n++
}

// snapshot returns the histograms sorted by profile, kind and plugin.
func (t *pluginTimer) snapshot() []PluginHistogram {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PluginHistogram, 0, len(t.hist))
	for c, h := range t.hist {
		w := WaitHistogram{Bounds: slices.Clone(pluginBounds), Counts: make([]uint64, len(pluginBounds)), Sum: h.sum, Count: h.n}
		var n uint64
		for i := range pluginBounds {
			n += h.counts[i]
			w.Counts[i] = n
		}
		out = append(out, PluginHistogram{PluginCall: c, WaitHistogram: w})
	}
	slices.SortFunc(out, func(a, b PluginHistogram) int {
		for _, x := range [][2]string{{a.Profile, b.Profile}, {a.Kind, b.Kind}, {a.Plugin, b.Plugin}} {
			if x[0] != x[1] {
				if x[0] < x[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return out
}
