package main

import (
	"bytes"
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
	name := peerNamer(map[string]string{idA: "n1"})
	var out bytes.Buffer
	printStatus(&out, v, name)
	got := out.String()
	for _, want := range []string{"epoch 3, leader n1; the map covers every layer", "n1       layers [0,4)  leader", "…2xkYXJ  layers [4,8)\n"} {
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
