package routing

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// mustProfiles parses a YAML configuration and builds it for llama-3-70b.
func mustProfiles(t testing.TB, src string) *Profiles {
	t.Helper()
	c, err := ParseSchedulerConfig([]byte(src))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, src)
	}
	ps, err := NewProfiles(c, WithModel(mustModel(t, "llama-3-70b")))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// oneProfile is a best-of-slack profile with slack 0 over the given
// filters and scorers ("name:weight").
func oneProfile(t testing.TB, filters []string, scorers ...string) Policy {
	t.Helper()
	var b strings.Builder
	b.WriteString("profiles:\n- name: p\n  picker: best-of-slack\n  slack: 0\n")
	fmt.Fprintf(&b, "  filters: [%s]\n  scorers:\n", strings.Join(filters, ", "))
	for _, s := range scorers {
		name, w, _ := strings.Cut(s, ":")
		fmt.Fprintf(&b, "  - {name: %s, weight: %s}\n", name, w)
	}
	p, err := mustProfiles(t, b.String()).For("p")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPluginsOneByOne(t *testing.T) {
	m := mustMap(t, 80, stage("a", 0, 80), stage("b", 0, 80))
	base := func() *View {
		a, b := fresh(t, "a", "rtx4090"), fresh(t, "b", "rtx4090")
		a.Speed = 1.05
		v := NewView(fresh(t, "entry", "h100"), a, b)
		v.SetRTT("entry", "a", 0.01)
		v.SetRTT("entry", "b", 0.01)
		return v
	}
	req := Request{Entry: "entry", PromptTokens: 512, MaxTokens: 128, Seed: 1}
	prefix := BlockHashes(seq(1, 512), 64)
	holds := NewPrefixSummary(DefaultSummaryBits)
	holds.Add(prefix...)
	std := []string{"live", "phase"}
	for _, tc := range []struct {
		name    string
		filters []string
		scorers []string // added to latency:1 in the "with" profile
		worsen  func(*NodeState)
		req     func(*Request)
		view    func(*View)
	}{
		{name: "live", filters: []string{"live"}, worsen: func(n *NodeState) { n.Health = Suspect }},
		{name: "phase", filters: []string{"phase"}, worsen: func(n *NodeState) { n.Phase = Draining }},
		{name: "kv", filters: []string{"kv"}, worsen: func(n *NodeState) { n.FreeKV = 100 }},
		{name: "load", scorers: []string{"load:1"}, worsen: func(n *NodeState) { n.QueueDepth = 40 }},
		{name: "locality", scorers: []string{"locality:1"},
			view: func(v *View) { v.SetRTT("entry", "a", 0.3) }},
		{name: "stale", scorers: []string{"stale:0.25"},
			worsen: func(n *NodeState) { n.Updated = testNow.Add(-time.Minute) }},
		{name: "kv-headroom", scorers: []string{"kv-headroom:1"},
			worsen: func(n *NodeState) { n.FreeKV = 700 }},
		{name: "prefix-affinity", scorers: []string{"prefix-affinity:1"},
			req:  func(r *Request) { r.Prefix = prefix },
			view: func(v *View) { v.Update("b", func(n *NodeState) { n.Prefixes = holds }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := base()
			if tc.worsen != nil {
				v.Update("a", tc.worsen)
			}
			if tc.view != nil {
				tc.view(v)
			}
			r := req
			if tc.req != nil {
				tc.req(&r)
			}
			withF, withoutF := std, std
			if tc.filters != nil {
				withF, withoutF = tc.filters, nil
			}
			with := oneProfile(t, withF, append([]string{"latency:1"}, tc.scorers...)...)
			without := oneProfile(t, withoutF, "latency:1")
			pw, err := with.Route(m, v, r, testNow)
			if err != nil {
				t.Fatal(err)
			}
			po, err := without.Route(m, v, r, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if hops(pw) != "b[0,80)" || hops(po) != "a[0,80)" {
				t.Errorf("with %s: %v (want b), without: %v (want a)", tc.name, pw, po)
			}
		})
	}
	// Stale figures still route: with only the stale node holding the
	// model, the stale plugin must not refuse the request.
	t.Run("stale still serves", func(t *testing.T) {
		v := base()
		v.Update("a", func(n *NodeState) { n.Updated = testNow.Add(-time.Hour) })
		v.Remove("b")
		p, err := oneProfile(t, std, "latency:1", "stale:1").Route(mustMap(t, 80, stage("a", 0, 80)), v, req, testNow)
		if err != nil || hops(p) != "a[0,80)" {
			t.Fatalf("stale only holder: %v, %v", p, err)
		}
	})
}

func seq(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// The default profile must route exactly as today's router.
func TestDefaultProfileMatchesRouter(t *testing.T) {
	ps, err := NewProfiles(DefaultSchedulerConfig(), WithModel(mustModel(t, "llama-3-70b")))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("testdata/scheduler/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	interactive, err := mustProfiles(t, string(example)).For("interactive")
	if err != nil {
		t.Fatal(err)
	}
	def, err := ps.For("")
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(t)
	m, v := swarm(t, 300, 80, 5, 4)
	for i := range 50 {
		req := Request{Entry: "entry", PromptTokens: 100 + 37*i, MaxTokens: 64 + i, Seed: uint64(i)}
		want, err := r.Route(m, v, req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		for name, pol := range map[string]Policy{"default": def, "interactive": interactive} {
			got, err := pol.Route(m, v, req, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Same(want) || got.Cost != want.Cost || got.Terms != want.Terms {
				t.Fatalf("request %d: profile %s routed %v (cost %v), router %v (cost %v)", i, name, got, got.Cost, want, want.Cost)
			}
		}
	}
}

func TestProfileSelection(t *testing.T) {
	src, err := os.ReadFile("testdata/scheduler/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := mustProfiles(t, string(src))
	if got := strings.Join(ps.Names(), ","); got != "interactive,chat,batch,baseline" {
		t.Errorf("names %s", got)
	}
	if ps.Default().Name() != "interactive" {
		t.Errorf("default %s", ps.Default().Name())
	}
	for _, name := range ps.Names() {
		p, err := ps.Profile(name)
		if err != nil || p.Name() != name {
			t.Fatalf("Profile(%s) = %v, %v", name, p, err)
		}
	}
	if p, _ := ps.Profile("batch"); p.Spec().Picker != PickWeightedRandom || p.Spec().Candidates != 4 {
		t.Errorf("batch spec %+v", p.Spec())
	}
	if p, _ := ps.Profile("baseline"); strings.Join(p.Spec().Filters, ",") != "live,phase" {
		t.Errorf("baseline did not get the default filters: %v", p.Spec().Filters)
	}
	_, err = ps.For("interactiv")
	if !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), `"interactiv"`) {
		t.Errorf("unknown profile: %v", err)
	}
	// Every profile routes a real map.
	m, v, _ := fourPipelines(t)
	for _, name := range ps.Names() {
		pol, _ := ps.For(name)
		p, err := pol.Route(m, v, Request{Entry: "entry", PromptTokens: 100, MaxTokens: 50, Seed: 3}, testNow)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkPath(t, m, p)
	}
	// The effective config reads back as itself.
	c := ps.Config()
	c2, err := ParseSchedulerConfig(mustYAML(t, c))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, c2) {
		t.Errorf("config did not round-trip:\n%+v\n%+v", c, c2)
	}
}

func TestWeightedRandomIsDeterministic(t *testing.T) {
	ps := mustProfiles(t, "profiles: [{name: w, picker: weighted-random, candidates: 4, scorers: [{name: latency, weight: 1}, {name: load, weight: 1}, {name: locality, weight: 1}]}]")
	pol, _ := ps.For("w")
	m, v, pipes := fourPipelines(t)
	// Make pipeline 3 slower: it must get fewer requests, but some.
	for _, id := range pipes[3] {
		v.Update(id, func(s *NodeState) { s.Speed = 0.5 })
	}
	count := map[string]int{}
	const n = 2000
	for i := range n {
		req := Request{Entry: "entry", PromptTokens: 200, MaxTokens: 100, Seed: uint64(i)}
		p1, err := pol.Route(m, v, req, testNow)
		if err != nil {
			t.Fatal(err)
		}
		p2, _ := pol.Route(m, v.Clone(), req, testNow)
		if !p1.Same(p2) {
			t.Fatalf("seed %d: %v then %v", i, p1, p2)
		}
		count[p1.Hops[0].Node]++
	}
	t.Logf("weighted-random over 4 candidates, pipeline 3 half speed: %v", count)
	for k := range 3 {
		if c := count[pipes[k][0]]; c < n/6 || c <= count[pipes[3][0]] {
			t.Errorf("pipeline %d got %d of %d (slow one %d)", k, c, n, count[pipes[3][0]])
		}
	}
	if count[pipes[3][0]] == 0 {
		t.Errorf("the slow pipeline got nothing: weighted-random must still draw it")
	}
}

func TestRoundRobinPicker(t *testing.T) {
	ps := mustProfiles(t, "profiles: [{name: rr, picker: round-robin}]")
	pol, _ := ps.For("rr")
	m, v, pipes := fourPipelines(t)
	v.Update(pipes[2][1], func(s *NodeState) { s.Phase = Draining })
	var got []string
	for i := range 6 {
		p, err := pol.Route(m, v, Request{Entry: "entry", PromptTokens: 10, Seed: uint64(i)}, testNow)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Hops[0].Node)
	}
	// front2's pipeline is skipped (its back drains): its turn goes on.
	want := "front0 front1 front3 front3 front0 front1"
	if strings.Join(got, " ") != want {
		t.Errorf("round robin %s, want %s", strings.Join(got, " "), want)
	}
}

func mustYAML(t testing.TB, c SchedulerConfig) []byte {
	t.Helper()
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
