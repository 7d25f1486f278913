package routing

import "time"

// Plugin kinds an Observer is told about.
const (
	KindFilter = "filter"
	KindScorer = "scorer"
	KindPicker = "picker"
)

// PluginCall names the plugin an observation is of: the profile it runs
// in ("" for a router built outside a profile), its name, and its kind
// (KindFilter, KindScorer or KindPicker).
type PluginCall struct {
	Profile, Plugin, Kind string
}

// Observer times the plugins a router runs, for per-plugin latency
// metrics. Routing stays pure: it reads no clock itself, only Mark, so the
// caller decides what time is (a wall clock in a node, a fake one in
// tests).
//
// Each route reports, once per plugin, the time that plugin took over the
// whole route: a filter or scorer is called once per candidate stage, so
// one in observeEvery of its calls is timed and the sum scaled (a clock
// read costs more than most plugins' calls). The picker's time is the
// rest of the route after filtering and scoring (the DP and the pick). Observe is called from the routing goroutine and must
// be safe for concurrent use when the router is.
type Observer interface {
	// Mark reads the observer's monotonic clock.
	Mark() time.Duration
	// Observe records that c took d in one route.
	Observe(c PluginCall, d time.Duration)
}

// WithObserver makes the router report each plugin's time to o. Without
// one, routing reads no clock and allocates nothing for it.
func WithObserver(o Observer) Option {
	return func(r *Router) error {
		r.obs = o
		return nil
	}
}

// observeEvery samples plugin calls: each plugin's first call in a route
// and every observeEvery-th after it are timed, and the route's total is
// scaled up from them. Timing every call of a 1000-stage map would read
// the clock tens of thousands of times per route.
const observeEvery = 8

// observed is s when the route is observed, else nil.
func (r *Router) observed(s *scratch) *scratch {
	if r.obs == nil {
		return nil
	}
	return s
}

// begin counts a call of plugin i and, if it is sampled, starts its timer.
func (r *Router) begin(s *scratch, i int) (time.Duration, bool) {
	c := s.calls[i]
	s.calls[i]++
	if c%observeEvery != 0 {
		return 0, false
	}
	return r.obs.Mark(), true
}

// end stops the timer of a sampled call of plugin i.
func (r *Router) end(s *scratch, i int, t0 time.Duration) {
	s.spent[i] += r.obs.Mark() - t0
	s.timed[i]++
}

// startObserve resets the per-plugin figures of s for a route.
func (r *Router) startObserve(s *scratch) {
	if r.obs == nil {
		return
	}
	n := len(r.filters) + len(r.scorers)
	s.calls, s.timed, s.spent = grow(s.calls, n), grow(s.timed, n), grow(s.spent, n)
	clear(s.calls)
	clear(s.timed)
	clear(s.spent)
}

// pickStart marks where the picker's share of a route begins: the end of
// filtering and scoring.
func (r *Router) pickStart(s *scratch) {
	if r.obs == nil {
		return
	}
	s.pickAt = r.obs.Mark()
}

// total is plugin i's estimated time in the route: its sampled calls'
// time scaled to all its calls.
func (s *scratch) total(i int) time.Duration {
	if s.timed[i] == 0 {
		return 0
	}
	return time.Duration(float64(s.spent[i]) * float64(s.calls[i]) / float64(s.timed[i]))
}

// report tells the observer what each plugin took in this route; picked
// says whether the route got as far as the picker, whose time includes
// pricing the chosen hops.
func (r *Router) report(s *scratch, picked bool) {
	if r.obs == nil {
		return
	}
	end := r.obs.Mark()
	for i, f := range r.filters {
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: f.Name(), Kind: KindFilter}, s.total(i))
	}
	for j, ws := range r.scorers {
		if ws.w == 0 {
			continue
		}
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: ws.s.Name(), Kind: KindScorer}, s.total(len(r.filters)+j))
	}
	if picked {
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: r.picker, Kind: KindPicker}, max(end-s.pickAt, 0))
	}
}
