package routing

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Each bad configuration fails with ErrConfig and names its field.
func TestBadSchedulerConfigs(t *testing.T) {
	const ok = "{name: latency, weight: 1}"
	for _, tc := range []struct {
		name, src, field string
		is               error
	}{
		{"empty", "", "empty", nil},
		{"not yaml", "profiles: [", "yaml", nil},
		{"two documents", "profiles: [{name: a, scorers: [" + ok + "]}]\n---\ndefault: a\n", "more than one", nil},
		{"typo at top", "profile: []", "field profile not found", nil},
		{"typo in profile", "profiles: [{name: a, scorer: []}]", "field scorer not found", nil},
		{"typo in scorer", "profiles: [{name: a, scorers: [{name: latency, wieght: 1}]}]", "field wieght not found", nil},
		{"wrong type", "profiles: [{name: a, scorers: [{name: latency, weight: heavy}]}]", "heavy", nil},
		{"no profiles", "default: a\n", "profiles: need at least one", nil},
		{"no name", "profiles: [{scorers: [" + ok + "]}]", "profiles[0].name: missing", nil},
		{"bad name", "profiles: [{name: 'a b', scorers: [" + ok + "]}]", "profiles[0].name:", nil},
		{"duplicate name", "profiles: [{name: a, scorers: [" + ok + "]}, {name: a, scorers: [" + ok + "]}]",
			"profiles[1].name: \"a\" repeats profiles[0]", nil},
		{"unknown filter", "profiles: [{name: a, filters: [live, alive], scorers: [" + ok + "]}]",
			"profiles[0].filters[1]: unknown plugin \"alive\"", ErrUnknownPlugin},
		{"duplicate filter", "profiles: [{name: a, filters: [live, live], scorers: [" + ok + "]}]",
			"profiles[0].filters[1]: \"live\" listed twice", nil},
		{"unknown scorer", "profiles: [{name: a, scorers: [" + ok + "]}, {name: b, scorers: [" + ok + ", {name: prefix, weight: 1}]}]",
			"profiles[1].scorers[1].name: unknown plugin \"prefix\"", ErrUnknownPlugin},
		{"duplicate scorer", "profiles: [{name: a, scorers: [" + ok + ", " + ok + "]}]",
			"profiles[0].scorers[1].name: \"latency\" listed twice", nil},
		{"negative weight", "profiles: [{name: a, scorers: [" + ok + "]}, {name: b, scorers: [{name: load, weight: -1}]}]",
			"profiles[1].scorers[0].weight: must be > 0", nil},
		{"zero weight", "profiles: [{name: a, scorers: [{name: load}]}]", "profiles[0].scorers[0].weight: must be > 0", nil},
		{"infinite weight", "profiles: [{name: a, scorers: [{name: load, weight: .inf}]}]", "profiles[0].scorers[0].weight", nil},
		{"nan weight", "profiles: [{name: a, scorers: [{name: load, weight: .nan}]}]", "profiles[0].scorers[0].weight", nil},
		{"no scorers", "profiles: [{name: a, picker: weighted-random}]", "profiles[0].scorers: picker weighted-random needs", nil},
		{"unknown picker", "profiles: [{name: a, picker: best, scorers: [" + ok + "]}]", "profiles[0].picker: unknown picker \"best\"", nil},
		{"negative slack", "profiles: [{name: a, slack: -0.1, scorers: [" + ok + "]}]", "profiles[0].slack: must be ≥ 0", nil},
		{"slack on round robin", "profiles: [{name: a, picker: round-robin, slack: 0.1}]", "profiles[0].slack: only for picker best-of-slack", nil},
		{"candidates out of range", "profiles: [{name: a, picker: weighted-random, candidates: 65, scorers: [" + ok + "]}]",
			"profiles[0].candidates: must be in [1, 64]", nil},
		{"candidates on best", "profiles: [{name: a, candidates: 2, scorers: [" + ok + "]}]", "profiles[0].candidates: only for picker weighted-random", nil},
		{"unknown default", "default: b\nprofiles: [{name: a, scorers: [" + ok + "]}]", "default: unknown profile \"b\" (have: a)", ErrUnknownProfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSchedulerConfig([]byte(tc.src))
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %q", err, tc.field)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
		})
	}
	if _, err := ParseSchedulerConfig(make([]byte, MaxConfigBytes+1)); !errors.Is(err, ErrConfig) {
		t.Errorf("oversized config: %v", err)
	}
	// NewProfiles validates a config built in code, too.
	c := DefaultSchedulerConfig()
	c.Profiles[0].Scorers[0].Weight = 0
	if _, err := NewProfiles(c, WithModel(mustModel(t, "llama-3-70b"))); !errors.Is(err, ErrConfig) ||
		!strings.Contains(err.Error(), "profiles[0].scorers[0].weight") {
		t.Errorf("NewProfiles on a zero weight: %v", err)
	}
	// A router option that fails names the profile.
	if _, err := NewProfiles(DefaultSchedulerConfig()); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "default") {
		t.Errorf("NewProfiles without a model: %v", err)
	}
}

func TestSchedulerConfigDefaults(t *testing.T) {
	c, err := ParseSchedulerConfig([]byte("profiles: [{name: only, scorers: [{name: latency, weight: 2}]}]"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profiles[0]
	if c.Default != "only" || p.Picker != PickBestOfSlack || strings.Join(p.Filters, ",") != "live,phase" || p.Slack != nil {
		t.Errorf("defaults not filled: %+v", c)
	}
	// An explicit empty filter list stays empty: the operator asked for it.
	c, err = ParseSchedulerConfig([]byte("profiles: [{name: x, filters: [], picker: round-robin}]"))
	if err != nil || len(c.Profiles[0].Filters) != 0 || c.Profiles[0].Filters == nil {
		t.Errorf("empty filters: %+v, %v", c, err)
	}
	if got, want := FilterPlugins(), []string{"kv", "live", "phase"}; !reflect.DeepEqual(got, want) {
		t.Errorf("filters %v", got)
	}
	want := []string{"kv-headroom", "latency", "load", "locality", "prefix-affinity", "stale"}
	if got := ScorerPlugins(); !reflect.DeepEqual(got, want) {
		t.Errorf("scorers %v", got)
	}
}

// FuzzParseSchedulerConfig: any input parses or fails with ErrConfig; what
// parses builds into profiles and reads back as itself.
func FuzzParseSchedulerConfig(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/scheduler/*.yaml")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("profiles: [{name: a, scorers: [{name: latency, weight: 1}]}]"))
	f.Add([]byte("default: x\nprofiles: [{name: x, picker: round-robin, filters: []}]"))
	model := mustModel(f, "llama-3-70b")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseSchedulerConfig(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			return
		}
		ps, err := NewProfiles(c, WithModel(model))
		if err != nil {
			t.Fatalf("valid config does not build: %v", err)
		}
		for _, n := range ps.Names() {
			if _, err := ps.For(n); err != nil {
				t.Fatal(err)
			}
		}
		out, err := yaml.Marshal(ps.Config())
		if err != nil {
			t.Fatal(err)
		}
		c2, err := ParseSchedulerConfig(out)
		if err != nil {
			t.Fatalf("effective config does not parse back: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(c2, ps.Config()) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", ps.Config(), c2)
		}
	})
}
