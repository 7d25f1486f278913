package routing

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stratanet/strata/layers"
)

// Profile is one named scheduling profile: filters, weighted scorers and a
// picker, as a Policy. Its only state is the round-robin turn.
type Profile struct {
	spec   ProfileSpec
	router *Router
	cands  int
	turn   atomic.Uint64
}

var _ Policy = (*Profile)(nil)

// Name is the profile's name.
func (p *Profile) Name() string { return p.spec.Name }

// Spec returns the profile's effective specification.
func (p *Profile) Spec() ProfileSpec { return cloneSpec(p.spec) }

// Router is the DP router the profile's filters and scorers configure; the
// round-robin picker prices its pipelines with it.
func (p *Profile) Router() *Router { return p.router }

// Route implements Policy with the profile's picker.
func (p *Profile) Route(m layers.LayerMap, v *View, req Request, now time.Time) (Path, error) {
	switch p.spec.Picker {
	case PickWeightedRandom:
		paths, err := p.router.Paths(m, v, req, now, p.cands)
		if err != nil {
			return Path{}, err
		}
		return pickWeighted(paths, req.Seed), nil
	case PickRoundRobin:
		return p.roundRobin(m, v, req, now)
	}
	return p.router.Route(m, v, req, now)
}

// roundRobin is RoundRobin over the map's own fixed pipelines, so that it
// follows the map as it changes: the turn advances per request and skips
// pipelines the filters make unusable.
func (p *Profile) roundRobin(m layers.LayerMap, v *View, req Request, now time.Time) (Path, error) {
	if err := m.Validate(); err != nil {
		return Path{}, fmt.Errorf("routing: %w", err)
	}
	pipes := FixedPipelines(m)
	if len(pipes) == 0 {
		return Path{}, fmt.Errorf("%w: the map has no full pipeline for round robin", ErrNoPath)
	}
	n := uint64(len(pipes))
	first := p.turn.Add(1) - 1
	var last error
	for t := range n {
		path, err := p.router.Evaluate(m, v, req, now, pipes[(first+t)%n])
		if err == nil {
			return path, nil
		}
		if !errors.Is(err, ErrNoPath) && !errors.Is(err, ErrBadPath) {
			return Path{}, err
		}
		last = err
	}
	return Path{}, fmt.Errorf("%w: none of %d pipelines is usable (last: %w)", ErrNoPath, n, last)
}

// pickWeighted draws one path with probability proportional to 1/cost,
// from seed. Paths of unusable cost get no weight unless all do.
func pickWeighted(paths []Path, seed uint64) Path {
	w := func(p Path) float64 {
		if !(p.Cost >= 0) || math.IsInf(p.Cost, 1) {
			return 0
		}
		return 1 / math.Max(p.Cost, 1e-12)
	}
	sum := 0.0
	for _, p := range paths {
		sum += w(p)
	}
	if !(sum > 0) || math.IsInf(sum, 0) {
		return paths[0]
	}
	x := unit(rand.NewPCG(seed, pickStream)) * sum
	for _, p := range paths {
		if x < w(p) {
			return p
		}
		x -= w(p)
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if w(paths[i]) > 0 {
			return paths[i]
		}
	}
	return paths[0]
}

// Profiles is a validated scheduling configuration built into policies,
// one per profile. It is immutable and safe for concurrent use.
type Profiles struct {
	cfg    SchedulerConfig
	byName map[string]*Profile
	def    *Profile
}

// NewProfiles builds every profile of c (normalised and validated as
// ParseSchedulerConfig does). base configures each profile's router (the
// model or fleet, cost parameters, Config); the profile then sets the
// weights, filters, stale penalty and slack its plugins name, so a base
// WithWeights, WithFilters or WithSlack is overridden.
func NewProfiles(c SchedulerConfig, base ...Option) (*Profiles, error) {
	c = c.normalized()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ps := &Profiles{cfg: c, byName: make(map[string]*Profile, len(c.Profiles))}
	for i, spec := range c.Profiles {
		r, err := New(append(append([]Option(nil), base...), profileOption(spec))...)
		if err != nil {
			return nil, fmt.Errorf("profiles[%d] (%s): %w", i, spec.Name, err)
		}
		p := &Profile{spec: cloneSpec(spec), router: r, cands: DefaultCandidates}
		if spec.Candidates > 0 {
			p.cands = spec.Candidates
		}
		ps.byName[spec.Name] = p
	}
	ps.def = ps.byName[c.Default]
	return ps, nil
}

// profileOption sets a router up as spec's plugins say.
func profileOption(spec ProfileSpec) Option {
	return func(r *Router) error {
		var b profileBuild
		for _, s := range spec.Scorers {
			scorerPlugins[s.Name](&b, s.Weight)
		}
		r.cfg.Weights = b.w
		r.cfg.StalePenalty = b.stale
		if spec.Slack != nil {
			r.cfg.Slack = *spec.Slack
		}
		r.filters = r.filters[:0:0]
		for _, f := range spec.Filters {
			r.filters = append(r.filters, filterPlugins[f]())
		}
		r.extra = append(r.extra[:len(r.extra):len(r.extra)], b.extra...)
		r.profile, r.picker = spec.Name, spec.Picker
		return nil
	}
}

// For returns the policy of the named profile; "" names the default. An
// unknown name is an error wrapping ErrUnknownProfile that names it.
func (ps *Profiles) For(name string) (Policy, error) {
	p, err := ps.Profile(name)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Profile is For with the concrete type.
func (ps *Profiles) Profile(name string) (*Profile, error) {
	if name == "" {
		return ps.def, nil
	}
	if p, ok := ps.byName[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("routing: %w %q (have: %s)", ErrUnknownProfile, name, strings.Join(ps.cfg.names(), ", "))
}

// Default returns the default profile.
func (ps *Profiles) Default() *Profile { return ps.def }

// Names lists the profiles in configuration order.
func (ps *Profiles) Names() []string { return ps.cfg.names() }

// Config returns the effective configuration, defaults filled in: what an
// endpoint showing the scheduler should print.
func (ps *Profiles) Config() SchedulerConfig { return ps.cfg.normalized() }

func cloneSpec(p ProfileSpec) ProfileSpec {
	return SchedulerConfig{Profiles: []ProfileSpec{p}}.normalized().Profiles[0]
}
