package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stratanet/strata/layers"
)

const (
	idA = "12D3KooWBmLwiWbWL3bCV1tg1ZfBJqjk6LGUD7du4165nAE8QRtV"
	idB = "12D3KooWH6rgxbG6YyPMMUdxDaKmburjrSDLoC6gitERJR2xkYXJ"
)

func TestPrintStatus(t *testing.T) {
	leader := idA
	v := swarmView{Leader: &leader}
	v.Model.ID = "m"
	v.Committed = layers.LayerMap{Epoch: 3, Layers: 8, Stages: []layers.Stage{
		{Node: idB, Range: layers.Range{Start: 4, End: 8}}, {Node: idA, Range: layers.Range{Start: 0, End: 4}}}}
	v.Members = []memberView{{ID: idB, Engine: "ggml-CUDA0", State: "serving"}}
	name := peerNamer(map[string]string{idA: "n1"})
	var out bytes.Buffer
	printStatus(&out, v, name)
	got := out.String()
	for _, want := range []string{"epoch 3, leader n1; the map covers every layer", "n1       layers [0,4)  leader",
		"…2xkYXJ  layers [4,8)  engine ggml-CUDA0, serving\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "[0,4)") > strings.Index(got, "[4,8)") {
		t.Errorf("stages not in layer order:\n%s", got)
	}
	v.Committed.Stages = v.Committed.Stages[:1]
	out.Reset()
	printStatus(&out, v, name)
	if !strings.Contains(out.String(), "DOES NOT cover every layer") {
		t.Errorf("a gap went unreported:\n%s", out.String())
	}
	if p := namePeers(idA+"[0,4) → "+idB+"[4,8)", name); p != "n1[0,4) → …2xkYXJ[4,8)" {
		t.Errorf("named path %q", p)
	}
}

func TestPrintReachability(t *testing.T) {
	v := swarmView{Node: idA}
	v.Committed = layers.LayerMap{Epoch: 1, Layers: 4, Stages: []layers.Stage{{Node: idB, Range: layers.Range{Start: 0, End: 4}}}}
	v.NAT.Reachability, v.NAT.Forced, v.NAT.Relays, v.NAT.Advice = "private", true, []string{idB}, "behind NAT: peers reach this node through its relays"
	v.Members = make([]memberView, 2)
	v.Members[0].ID, v.Members[0].Self = idA, true
	v.Members[1].ID, v.Members[1].Link = idB, "hole-punched"
	var out bytes.Buffer
	printStatus(&out, v, peerNamer(map[string]string{idA: "n2", idB: "n3"}))
	for _, want := range []string{"node n2: reachability private (configured), relay slots on n3\n  behind NAT",
		"n3       layers [0,4)  hole-punched", "links from n2: n3 hole-punched\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPrintRelaying(t *testing.T) {
	v := swarmView{Node: idA}
	v.NAT.Reachability, v.NAT.Advice = "public", "reachable directly; relays for members behind NAT"
	v.NAT.RelayService, v.NAT.RelayRate, v.NAT.RelayedMB = true, 26.2, 12.5
	v.Members = make([]memberView, 2)
	v.Members[0].ID, v.Members[0].Self = idA, true
	v.Members[1].ID, v.Members[1].Link, v.Members[1].LinkMBs = idB, "relayed", 3.25
	var out bytes.Buffer
	printReachability(&out, v, peerNamer(map[string]string{idA: "n2", idB: "n3"}))
	for _, want := range []string{"relayed 12.5 MB for others (capped at 26.2 MB/s)", "n3 relayed (3.2 MB/s measured)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintFetchProgress: the answering node's fetch of weights, as GET
// /v1/swarm reports it, is one line of status.
func TestPrintFetchProgress(t *testing.T) {
	var v swarmView
	if err := json.Unmarshal([]byte(`{"committed":{"epoch":1,"layers":8,"stages":[]},"members":[
		{"id":"`+idA+`","self":true,"fetch":{"done_bytes":3000000,"total_bytes":12000000,"fetched_bytes":4000000}},
		{"id":"`+idB+`"}]}`), &v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printStatus(&out, v, peerNamer(map[string]string{idA: "n1"}))
	if want := "n1       fetching its layers from peers: 2.9 MiB of 11.4 MiB (25%)"; !strings.Contains(out.String(), want) {
		t.Fatalf("status lacks %q:\n%s", want, out.String())
	}
	if strings.Count(out.String(), "fetching") != 1 {
		t.Fatalf("a member without a fetch printed one:\n%s", out.String())
	}
}

// TestPrintStatusNoMap: a swarm with no map committed yet, as GET
// /v1/swarm reports it (a zero map), prints its model, why it does not
// serve and its members with what each may hold, rather than failing to
// decode the map.
func TestPrintStatusNoMap(t *testing.T) {
	const why = "no path: layers [3,5) are served by no node; the swarm waits for more nodes (1 node, max 3 layers each; the model has 5)"
	var v swarmView
	if err := json.Unmarshal([]byte(`{"node":"`+idA+`","model":{"id":"llama","layers":5},"leader":"`+idA+`",
		"committed":{"epoch":0,"layers":0,"stages":[]},"routable":false,"not_ready":"`+why+`",
		"members":[{"id":"`+idA+`","self":true,"member":true,"voter":true,"state":"joining","liveness":"self",
		"capabilities":{"Hardware":{"name":"cpu"},"MaxLayers":3}}]}`), &v); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printStatus(&out, v, peerNamer(map[string]string{idA: "n1"}))
	for _, want := range []string{"model llama (real engine), 5 layers; no layer map committed yet; leader n1\n",
		"  not serving: " + why + "\n", "  n1       no layers      cpu, joining, voter, max 3 layers, leader\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintStatusHoldersLeft: a committed map whose only holder of some
// layers left the swarm says so, though the map itself covers them.
func TestPrintStatusHoldersLeft(t *testing.T) {
	leader := idA
	v := swarmView{Leader: &leader}
	v.Model.ID = "m"
	m, err := layers.NewLayerMap(8, 2, layers.Stage{Node: idB, Range: layers.Range{Start: 4, End: 8}},
		layers.Stage{Node: idA, Range: layers.Range{Start: 0, End: 4}})
	if err != nil {
		t.Fatal(err)
	}
	v.Committed = m
	v.Members = []memberView{{ID: idA, Member: true, Self: true}, {ID: idB, Liveness: "dead"}}
	var out bytes.Buffer
	printStatus(&out, v, peerNamer(map[string]string{idA: "n1", idB: "n2"}))
	for _, want := range []string{"the map covers every layer, but only nodes that left the swarm hold [4,8)\n",
		"n2       layers [4,8)  dead, left the swarm"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
