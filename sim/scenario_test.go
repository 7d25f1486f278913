package sim

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }

const tinySwarm = `
name: tiny
seed: 3
data: helix
model: llama2_70b
start_s: 30
duration_s: 120
nodes:
  - helix_cluster: single24
workload:
  poisson_rate_per_s: 0.5
`

// TestReportJSON checks --json's schema: the keys issue 21 names, and the
// failure breakdown added since.
func TestReportJSON(t *testing.T) {
	sc, err := ParseScenario(filepath.Join("..", "testdata", "sim", "tiny.yaml"), []byte(tinySwarm))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), sc, nil, "strata", "petals")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if got := keys(m); !reflect.DeepEqual(got, []string{"policies", "published", "scenario"}) {
		t.Fatalf("top-level keys %v", got)
	}
	pols := m["policies"].([]any)
	if len(pols) != 2 {
		t.Fatalf("%d policies, want 2", len(pols))
	}
	want := []string{"attempts_broken_by_cause", "completed", "decode_tok_s", "failed", "failed_by_cause", "failed_where_path_existed",
		"goodput_tok_s", "policy", "tpot_p50_ms", "tpot_p99_ms", "ttft_p50_ms", "ttft_p99_ms", "use_by_gpu"}
	for _, p := range pols {
		pm := p.(map[string]any)
		w := want
		if pm["policy"] == "strata" {
			// The entry's admission queue and the stages' prefix cache.
			w = append(append([]string(nil), want...), "entry_queue", "prefix_cache")
			sort.Strings(w)
		}
		if got := keys(pm); !reflect.DeepEqual(got, w) {
			t.Fatalf("policy keys %v, want %v", got, w)
		}
		sum := 0.0
		for _, v := range pm["failed_by_cause"].(map[string]any) {
			sum += v.(float64)
		}
		if sum != pm["failed"].(float64) {
			t.Fatalf("%v: failed_by_cause sums to %g, failed is %g", pm["policy"], sum, pm["failed"])
		}
		if pm["goodput_tok_s"].(float64) <= 0 || pm["completed"].(float64) <= 0 || pm["decode_tok_s"].(float64) < pm["goodput_tok_s"].(float64) {
			t.Fatalf("%v served nothing", pm["policy"])
		}
	}
	b2, _ := json.Marshal(PublishedRow{})
	var pm map[string]any
	_ = json.Unmarshal(b2, &pm)
	if got := keys(pm); !reflect.DeepEqual(got, []string{"goodput_tok_s", "policy", "simulated_tok_s", "source"}) {
		t.Fatalf("published keys %v", got)
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestParseScenarioErrors(t *testing.T) {
	for name, y := range map[string]string{
		"not yaml":      "name: [",
		"no name":       "seed: 1\nhelix: {dir: x, setup: s, model: m}\n",
		"nothing":       "name: x\n",
		"unknown field": "name: x\nbogus: 1\nhelix: {dir: x, setup: s, model: m}\n",
		"bad mode":      "name: x\nhelix: {dir: x, setup: s, model: m, modes: [sometimes]}\n",
		"two workloads": "name: x\ndata: d\nmodel: m\nduration_s: 10\nnodes: [{count: 1, gpu: t4}]\nworkload: {poisson_rate_per_s: 1, helix_stream_rate: 700}\n",
		"no workload":   "name: x\ndata: d\nmodel: m\nduration_s: 10\nnodes: [{count: 1, gpu: t4}]\n",
		"bad group":     "name: x\ndata: d\nmodel: m\nduration_s: 10\nnodes: [{count: 0}]\nworkload: {poisson_rate_per_s: 1}\n",
		"bad load":      "name: x\nsynthetic_model: {layers: 8, dim: 16}\nduration_s: 10\nnodes: [{name: a, gpu: cpu, max_layers: 8}]\nworkload: {testnet_load: {clients: 0, rate: 1, prompts: 1, prompt_tokens: 1, max_tokens: 1}}\n",
		"named group":   "name: x\nsynthetic_model: {layers: 8, dim: 16}\nduration_s: 10\nnodes: [{name: a, count: 2, gpu: cpu, max_layers: 8}]\nworkload: {poisson_rate_per_s: 1}\n",
		"bad warmup":    "name: x\ndata: d\nmodel: m\nduration_s: 10\nwarmup_s: 10\nnodes: [{count: 1, gpu: t4}]\nworkload: {poisson_rate_per_s: 1}\n",
		"bad clients":   "name: x\ndata: d\nmodel: m\nduration_s: 10\nnodes: [{count: 1, gpu: t4}]\nworkload: {poisson_rate_per_s: 1, clients: -1}\n",
		"bad relayed":   "name: x\ndata: d\nmodel: m\nduration_s: 10\nnodes: [{count: 1, gpu: t4, relayed_fraction: 2}]\nworkload: {poisson_rate_per_s: 1}\n",
	} {
		if _, err := ParseScenario(name+".yaml", []byte(y)); !errors.Is(err, ErrScenario) {
			t.Errorf("%s: err %v, want ErrScenario", name, err)
		}
	}
}

func TestRelayedFraction(t *testing.T) {
	y := "name: x\ndata: helix\nmodel: llama2_70b\nduration_s: 10\nnodes: [{count: 50, gpu: t4, relayed_fraction: 0.1}]\nworkload: {poisson_rate_per_s: 1}\n"
	sc, err := ParseScenario(filepath.Join("..", "testdata", "sim", "x.yaml"), []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sc.SwarmSpec()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, nd := range spec.Nodes {
		if nd.Relayed {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d relayed of 50, want 5", n)
	}
}

func TestBadDataFiles(t *testing.T) {
	if _, err := LoadProfile(helixDir, "llama2_70b", "nope"); err == nil {
		t.Fatal("missing profile loaded")
	}
	if _, err := parseCSV(stringsReader("a,b\n1,\"x"), "bad.csv"); !errors.Is(err, ErrBadData) {
		t.Fatalf("err %v, want ErrBadData", err)
	}
}

// FuzzParseScenario: any bytes give a scenario or an ErrScenario, never a
// panic. The seeds are the shipped scenarios.
func FuzzParseScenario(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "sim", "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed scenarios: %v", err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(tinySwarm))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrScenario) {
				t.Fatalf("error %v does not wrap ErrScenario", err)
			}
			return
		}
		if sc.Name == "" || (sc.Helix == nil && len(sc.Nodes) == 0) {
			t.Fatalf("accepted an empty scenario: %+v", sc)
		}
	})
}

// TestTestnetScenario runs the simulated twin of the testnet's steady-5:
// every request the testnet's arrival draw makes completes, and the
// per-token latency is the path's: three messages and eight layers.
func TestTestnetScenario(t *testing.T) {
	path := filepath.Join("..", "testdata", "sim", "testnet-steady-5.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := ParseScenario(path, data)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sc.SwarmSpec()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Requests) == 0 || spec.Clients != sc.Workload.TestnetLoad.Clients {
		t.Fatalf("%d requests, %d clients", len(spec.Requests), spec.Clients)
	}
	res, err := RunSwarm(context.Background(), spec, "strata")
	if err != nil {
		t.Fatal(err)
	}
	if res.Completed != len(spec.Requests) || res.Failed != 0 {
		t.Fatalf("completed %d failed %d of %d", res.Completed, res.Failed, len(spec.Requests))
	}
	m := sc.SyntheticModel
	path3 := 3*sc.Network.InRegion.LatencyMS + float64(m.Layers)*m.LayerMS
	if got := res.TPOTp50 * 1e3; got < path3 || got > 1.2*path3 {
		t.Fatalf("per-token p50 %.3f ms, path %.3f ms", got, path3)
	}
	if got := res.TTFTp50 * 1e3; got < sc.Timing.EntrySetupMS {
		t.Fatalf("TTFT p50 %.3f ms below the entry's setup %.3f ms", got, sc.Timing.EntrySetupMS)
	}
}

// TestKVObjectiveOption: kv_objective reaches the spec, and only Strata's
// planner gets the requests' mean length, through the replicated state
// as a real founder gives it (a SessionTokensSet); the baselines keep
// the plain cost model.
func TestKVObjectiveOption(t *testing.T) {
	sc, err := ParseScenario(filepath.Join("..", "testdata", "sim", "tiny.yaml"), []byte(tinySwarm+"kv_objective: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := sc.SwarmSpec()
	if err != nil {
		t.Fatal(err)
	}
	if !spec.KVObjective || len(spec.Requests) == 0 {
		t.Fatalf("KVObjective %v, %d requests", spec.KVObjective, len(spec.Requests))
	}
	sum := 0
	for _, r := range spec.Requests {
		sum += r.Input + r.Output
	}
	mean := int(math.Round(float64(sum) / float64(len(spec.Requests))))
	if mean <= 0 {
		t.Fatalf("mean session length %d", mean)
	}
	for _, pol := range []string{"strata", "petals", "parallax"} {
		got, ok := planSessionTokens(spec, pol)
		if want := pol == "strata"; ok != want || (ok && got != mean) {
			t.Errorf("%s: session tokens %d %v, want %d only for strata", pol, got, ok, mean)
		}
	}
	// A whole run: Strata's replicated state holds the mean at the end,
	// and without the option none.
	for _, on := range []bool{true, false} {
		spec.KVObjective = on
		res, err := RunSwarm(context.Background(), spec, "strata")
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: mean, false: 0}[on]; res.PlanSessionTokens != want || res.LeaderDecisions == 0 {
			t.Errorf("kv_objective %v: the state's session tokens %d after %d decisions, want %d", on, res.PlanSessionTokens, res.LeaderDecisions, want)
		}
	}
}

// TestClientsCapInFlight: a workload's clients cap the requests in
// flight (a closed loop), which the same arrivals without the cap exceed.
func TestClientsCapInFlight(t *testing.T) {
	run := func(y string) SwarmResult {
		t.Helper()
		sc, err := ParseScenario(filepath.Join("..", "testdata", "sim", "tiny.yaml"), []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := sc.SwarmSpec()
		if err != nil {
			t.Fatal(err)
		}
		res, err := RunSwarm(context.Background(), spec, "strata")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	open := run(tinySwarm)
	capped := run(tinySwarm + "  clients: 2\n")
	if open.PeakInFlight <= 2 {
		t.Fatalf("without a cap at most %d requests were in flight: the test needs more", open.PeakInFlight)
	}
	if capped.PeakInFlight != 2 || capped.Completed == 0 {
		t.Fatalf("clients 2: peak %d in flight, %d completed", capped.PeakInFlight, capped.Completed)
	}
}
