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
// whole route: a filter or scorer is called once per candidate stage, and
// timing each call separately would swamp the calls themselves. The
// picker's time is the rest of the route after filtering and scoring (the
// DP and the pick). Observe is called from the routing goroutine and must
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

// spentScorers is the scorers' part of s.spent, or nil when nothing is
// observed.
func (r *Router) spentScorers(s *scratch) []time.Duration {
	if r.obs == nil {
		return nil
	}
	return s.spent[len(r.filters):]
}

// startObserve resets the per-plugin times of s for a route.
func (r *Router) startObserve(s *scratch) {
	if r.obs == nil {
		return
	}
	s.spent = grow(s.spent, len(r.filters)+len(r.scorers))
	clear(s.spent)
}

// pickStart marks where the picker's share of a route begins: the end of
// filtering and scoring.
func (r *Router) pickStart(s *scratch) {
	if r.obs == nil {
		return
	}
	s.pickAt, s.pickSpent = r.obs.Mark(), sum(s.spent)
}

// report tells the observer what each plugin took in this route; picked
// says whether the route got as far as the picker.
func (r *Router) report(s *scratch, picked bool) {
	if r.obs == nil {
		return
	}
	end := r.obs.Mark()
	for i, f := range r.filters {
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: f.Name(), Kind: KindFilter}, s.spent[i])
	}
	for j, ws := range r.scorers {
		if ws.w == 0 {
			continue
		}
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: ws.s.Name(), Kind: KindScorer}, s.spent[len(r.filters)+j])
	}
	if picked {
		// Scoring the chosen hops again (finish) is the scorers' time, not
		// the picker's.
		d := end - s.pickAt - (sum(s.spent) - s.pickSpent)
		r.obs.Observe(PluginCall{Profile: r.profile, Plugin: r.picker, Kind: KindPicker}, max(d, 0))
	}
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
