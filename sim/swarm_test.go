package sim

import (
	"context"
	"reflect"
	"testing"
)

func single24Spec(t testing.TB, rate, dur float64) SwarmSpec {
	t.Helper()
	nodes, err := HelixSwarmNodes(helixDir, "single24")
	if err != nil {
		t.Fatal(err)
	}
	lens, err := LoadAzureConvLengths(helixDir)
	if err != nil {
		t.Fatal(err)
	}
	link := LinkClass{Bandwidth: 1e9, LatencyMS: 1}
	return SwarmSpec{Dir: helixDir, Model: "llama2_70b", Nodes: nodes,
		Net:      Network{InRegion: link, CrossRegion: link, Entry: link, Relay: link},
		Requests: Poisson(rate, dur, lens, 1), Duration: dur, WarmUpS: 100, Seed: 1}
}

// TestSwarmNoLossWhenPathExists kills a node whose layers other nodes also
// serve, mid-run: its in-flight requests are replayed on other paths and
// none is lost.
func TestSwarmNoLossWhenPathExists(t *testing.T) {
	spec := single24Spec(t, 0.7, 900)
	spec.Churn.Script = []ScriptedChange{{AtS: 400, Kill: "n1"}}
	res, err := RunSwarm(context.Background(), spec, "strata")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("completed %d failed %d retried %d recoveries %v moves %d", res.Completed, res.Failed, res.Retried, res.Recoveries, res.Moves)
	if res.Deaths != 1 || len(res.Recoveries) != 1 || res.Recoveries[0] != 0 {
		t.Fatalf("deaths %d recoveries %v: want one death that left every layer served", res.Deaths, res.Recoveries)
	}
	if res.Retried == 0 {
		t.Fatal("the kill hit no request: the test proves nothing")
	}
	if res.Failed != 0 || res.FailedWithPath != 0 {
		t.Fatalf("%d requests lost although another path existed: %v", res.Failed, res.FailedByCause)
	}
	if res.BrokenByCause["node_died"] == 0 {
		t.Fatalf("no attempt broken by the kill: %v", res.BrokenByCause)
	}
	if res.Completed < 400 {
		t.Fatalf("only %d requests completed", res.Completed)
	}
}

// TestSwarmDeterministic: the same scenario and seed give the same report,
// churn and all.
func TestSwarmDeterministic(t *testing.T) {
	for _, p := range Policies {
		var got []SwarmResult
		for range 2 {
			spec := single24Spec(t, 0.7, 400)
			spec.Churn = Churn{MedianSessionS: 600, MeanDowntimeS: 120}
			res, err := RunSwarm(context.Background(), spec, p)
			if err != nil {
				t.Fatal(err)
			}
			res.Wall, res.EventsPerSec = 0, 0
			got = append(got, res)
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", p, got[0], got[1])
		}
		if got[0].Deaths == 0 {
			t.Errorf("%s: no churn happened", p)
		}
		sum := 0
		for _, v := range got[0].FailedByCause {
			sum += v
		}
		if sum != got[0].Failed {
			t.Errorf("%s: failed_by_cause %v sums to %d, failed is %d", p, got[0].FailedByCause, sum, got[0].Failed)
		}
	}
}
