package layers

import (
	"errors"
	"reflect"
	"testing"
)

func TestFleetSubset(t *testing.T) {
	m, err := Model("llama-3-8b")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Device("rtx4090")
	t4, _ := Device("t4")
	nodes := []Node{{ID: "c", Hardware: h}, {ID: "a", Hardware: t4}, {ID: "b", Hardware: h, MaxLayers: 5}}
	all, err := NewFleet(m, nodes, DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	sub, err := all.Subset([]string{"c", "a"})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewFleet(m, []Node{nodes[0], nodes[1]}, DefaultCostParams())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sub, direct) {
		t.Fatal("Subset differs from a fleet built from the same nodes")
	}
	if _, err := all.Subset([]string{"z"}); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("unknown id: err %v", err)
	}
	if _, err := all.Subset([]string{"a", "a"}); !errors.Is(err, ErrBadSpec) {
		t.Fatalf("duplicate id: err %v", err)
	}
}
