package routing

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"gopkg.in/yaml.v3"
)

// Errors of scheduling configurations, testable with errors.Is. Both come
// wrapped in ErrConfig when a configuration names the unknown thing.
var (
	ErrUnknownPlugin  = errors.New("unknown plugin")
	ErrUnknownProfile = errors.New("unknown profile")
)

// Pickers: how a profile chooses among the paths its scorers priced.
const (
	// PickBestOfSlack is the router's own choice: the cheapest path but for
	// seeded noise that spreads requests over paths within (1+slack) of it.
	PickBestOfSlack = "best-of-slack"
	// PickWeightedRandom draws among the profile's diverse candidate paths
	// (Router.Paths) with probability proportional to 1/cost, seeded by
	// Request.Seed.
	PickWeightedRandom = "weighted-random"
	// PickRoundRobin takes the map's fixed pipelines (FixedPipelines) in
	// turn whatever their load: the Parallax baseline.
	PickRoundRobin = "round-robin"
)

var pickers = []string{PickBestOfSlack, PickRoundRobin, PickWeightedRandom}

// Limits of a scheduling configuration.
const (
	MaxConfigBytes       = 1 << 20
	MaxProfiles          = 64
	maxProfileName       = 64
	DefaultCandidates    = 4
	maxProfileCandidates = 64
)

// SchedulerConfig is the YAML scheduling configuration: named profiles and
// the one requests get when they name none.
//
//	default: interactive
//	profiles:
//	  - name: interactive
//	    filters: [live, phase]
//	    scorers: [{name: latency, weight: 1}, {name: prefix-affinity, weight: 0.5}]
//	    picker: best-of-slack
type SchedulerConfig struct {
	Default  string        `yaml:"default" json:"default"`
	Profiles []ProfileSpec `yaml:"profiles" json:"profiles"`
}

// ProfileSpec is one profile: filters, weighted scorers, one picker.
type ProfileSpec struct {
	Name string `yaml:"name" json:"name"`
	// Filters by plugin name (FilterPlugins). Omitted: live and phase.
	Filters []string     `yaml:"filters" json:"filters"`
	Scorers []ScorerSpec `yaml:"scorers" json:"scorers"`
	// Picker is best-of-slack (the default), weighted-random or
	// round-robin.
	Picker string `yaml:"picker" json:"picker"`
	// Slack overrides the router's Config.Slack (best-of-slack only).
	Slack *float64 `yaml:"slack,omitempty" json:"slack,omitempty"`
	// Candidates is how many diverse paths weighted-random draws from
	// (0: DefaultCandidates).
	Candidates int `yaml:"candidates,omitempty" json:"candidates,omitempty"`
}

// ScorerSpec names a scorer plugin (ScorerPlugins) and its weight (> 0).
type ScorerSpec struct {
	Name   string  `yaml:"name" json:"name"`
	Weight float64 `yaml:"weight" json:"weight"`
}

// DefaultSchedulerConfig is one profile, "default", that routes exactly as
// a Router with DefaultConfig does.
func DefaultSchedulerConfig() SchedulerConfig {
	d := DefaultConfig()
	return SchedulerConfig{
		Default: "default",
		Profiles: []ProfileSpec{{
			Name:    "default",
			Filters: []string{"live", "phase"},
			Scorers: []ScorerSpec{
				{"latency", d.Weights.Latency}, {"load", d.Weights.Load},
				{"locality", d.Weights.Locality}, {"stale", d.StalePenalty},
			},
			Picker: PickBestOfSlack,
		}},
	}
}

// ParseSchedulerConfig decodes a YAML scheduling configuration, fills its
// defaults (see ProfileSpec) and validates it. Unknown fields are errors,
// so that a typo does not silently fall back to a default. Every error
// wraps ErrConfig and names the offending field.
func ParseSchedulerConfig(data []byte) (SchedulerConfig, error) {
	if len(data) > MaxConfigBytes {
		return SchedulerConfig{}, fmt.Errorf("%w: scheduler config is %d bytes, more than %d", ErrConfig, len(data), MaxConfigBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c SchedulerConfig
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return SchedulerConfig{}, fmt.Errorf("%w: scheduler config is empty", ErrConfig)
		}
		return SchedulerConfig{}, fmt.Errorf("%w: scheduler config: %w", ErrConfig, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return SchedulerConfig{}, fmt.Errorf("%w: scheduler config holds more than one YAML document", ErrConfig)
	}
	c = c.normalized()
	if err := c.Validate(); err != nil {
		return SchedulerConfig{}, err
	}
	return c, nil
}

// normalized is c with its defaults filled in, sharing nothing with c.
func (c SchedulerConfig) normalized() SchedulerConfig {
	out := SchedulerConfig{Default: c.Default, Profiles: make([]ProfileSpec, len(c.Profiles))}
	for i, p := range c.Profiles {
		if p.Filters == nil {
			p.Filters = []string{"live", "phase"}
		} else {
			p.Filters = append([]string{}, p.Filters...)
		}
		p.Scorers = append([]ScorerSpec(nil), p.Scorers...)
		if p.Picker == "" {
			p.Picker = PickBestOfSlack
		}
		if p.Slack != nil {
			s := *p.Slack
			p.Slack = &s
		}
		out.Profiles[i] = p
	}
	if out.Default == "" && len(out.Profiles) > 0 {
		out.Default = out.Profiles[0].Name
	}
	return out
}

// Validate checks a configuration as ParseSchedulerConfig fills it in.
func (c SchedulerConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrConfig, field}, args...)...)
	}
	if len(c.Profiles) == 0 {
		return bad("profiles", "need at least one profile")
	}
	if len(c.Profiles) > MaxProfiles {
		return bad("profiles", "%d profiles, more than %d", len(c.Profiles), MaxProfiles)
	}
	seen := map[string]int{}
	for i, p := range c.Profiles {
		at := fmt.Sprintf("profiles[%d]", i)
		if err := checkProfileName(p.Name); err != nil {
			return bad(at+".name", "%v", err)
		}
		if j, dup := seen[p.Name]; dup {
			return bad(at+".name", "%q repeats profiles[%d]", p.Name, j)
		}
		seen[p.Name] = i
		fs := map[string]bool{}
		for k, f := range p.Filters {
			field := fmt.Sprintf("%s.filters[%d]", at, k)
			if _, ok := filterPlugins[f]; !ok {
				return bad(field, "%w %q (have: %s)", ErrUnknownPlugin, f, strings.Join(FilterPlugins(), ", "))
			}
			if fs[f] {
				return bad(field, "%q listed twice", f)
			}
			fs[f] = true
		}
		ss := map[string]bool{}
		for k, s := range p.Scorers {
			field := fmt.Sprintf("%s.scorers[%d]", at, k)
			if _, ok := scorerPlugins[s.Name]; !ok {
				return bad(field+".name", "%w %q (have: %s)", ErrUnknownPlugin, s.Name, strings.Join(ScorerPlugins(), ", "))
			}
			if ss[s.Name] {
				return bad(field+".name", "%q listed twice", s.Name)
			}
			ss[s.Name] = true
			if !finiteWeight(s.Weight) {
				return bad(field+".weight", "must be > 0 and at most %g, got %v", float64(maxSeconds), s.Weight)
			}
		}
		switch p.Picker {
		case PickBestOfSlack, PickWeightedRandom:
			if len(p.Scorers) == 0 {
				return bad(at+".scorers", "picker %s needs at least one scorer", p.Picker)
			}
		case PickRoundRobin:
		default:
			return bad(at+".picker", "unknown picker %q (have: %s)", p.Picker, strings.Join(pickers, ", "))
		}
		if p.Slack != nil {
			if p.Picker != PickBestOfSlack {
				return bad(at+".slack", "only for picker %s", PickBestOfSlack)
			}
			if s := *p.Slack; !(s >= 0) || math.IsInf(s, 0) || s > maxSeconds {
				return bad(at+".slack", "must be ≥ 0 and finite, got %v", s)
			}
		}
		if p.Candidates != 0 {
			if p.Picker != PickWeightedRandom {
				return bad(at+".candidates", "only for picker %s", PickWeightedRandom)
			}
			if p.Candidates < 1 || p.Candidates > maxProfileCandidates {
				return bad(at+".candidates", "must be in [1, %d], got %d", maxProfileCandidates, p.Candidates)
			}
		}
	}
	if _, ok := seen[c.Default]; !ok {
		return bad("default", "%w %q (have: %s)", ErrUnknownProfile, c.Default, strings.Join(c.names(), ", "))
	}
	return nil
}

func (c SchedulerConfig) names() []string {
	out := make([]string, len(c.Profiles))
	for i, p := range c.Profiles {
		out[i] = p.Name
	}
	return out
}

// checkProfileName keeps names usable in a header or a URL: 1–64 of
// [A-Za-z0-9._-].
func checkProfileName(n string) error {
	if n == "" {
		return errors.New("missing")
	}
	if len(n) > maxProfileName {
		return fmt.Errorf("longer than %d bytes", maxProfileName)
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q: only letters, digits, '.', '_' and '-'", n)
		}
	}
	return nil
}
