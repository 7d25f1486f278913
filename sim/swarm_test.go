package sim

import (
	"context"
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
		Requests: Poisson(rate, dur, lens, 1), Duration: dur, WarmUpS: 200, Seed: 1}
}

func TestSwarmPrint(t *testing.T) {
	for _, p := range Policies {
		spec := single24Spec(t, 1.5, 1800)
		res, err := RunSwarm(context.Background(), spec, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: goodput %.1f decode %.1f ttft50 %.2f tpot50 %.3f completed %d failed %d retried %d rejected %d incomplete %.0fs moves %d events %d (%.0f ev/s)",
			p, res.GoodputTokS, res.DecodeTokS, res.TTFTp50, res.TPOTp50, res.Completed, res.Failed, res.Retried, res.Rejected, res.IncompleteS, res.Moves, res.Events, res.EventsPerSec)
	}
}
