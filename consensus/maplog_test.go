package consensus

import (
	"encoding/json"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/stratanet/strata/layers"
)

func testMap(t *testing.T, epoch uint64, split int) layers.LayerMap {
	t.Helper()
	m, err := layers.NewLayerMap(8, epoch,
		layers.Stage{Node: "12D3KooWA", Range: layers.Range{Start: 0, End: split}},
		layers.Stage{Node: "12D3KooWB", Range: layers.Range{Start: split, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The runner hashes maps it decoded from /v1/swarm's JSON and compares
// them with the hashes the nodes log: the hash must survive the round
// trip, and tell different maps apart.
func TestMapHash(t *testing.T) {
	a, b := testMap(t, 3, 4), testMap(t, 3, 5)
	if MapHash(a) == MapHash(b) || MapHash(a) == MapHash(testMap(t, 4, 4)) {
		t.Fatal("different maps, one hash")
	}
	j, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var back layers.LayerMap
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if MapHash(back) != MapHash(a) {
		t.Fatalf("hash changed over JSON: %s → %s", MapHash(a), MapHash(back))
	}
}

// A committed map folded in logs one line with its epoch, index and
// hash; other records log none.
func TestAppliedMapIsLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	c := newFeed(zap.New(core).Sugar(), make(chan struct{}, 1), make(chan struct{}, 1))
	m := testMap(t, 5, 3)
	s := State{committed: m}
	c.applied(41, Record{Event: MapCommitted{Epoch: 5}}, s)
	c.applied(42, Record{Event: NodeDraining{Node: "12D3KooWA"}}, s)
	c.restored(s)
	got := logs.All()
	if len(got) != 2 || got[0].Message != LogMapApplied || got[1].Message != LogMapRestored {
		t.Fatalf("lines %+v", got)
	}
	f := got[0].ContextMap()
	if f["epoch"] != uint64(5) || f["index"] != uint64(41) || f["hash"] != MapHash(m) || f["at_us"] == nil {
		t.Fatalf("fields %v", f)
	}
}
