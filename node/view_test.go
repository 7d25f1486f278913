package node

import (
	"testing"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
	"github.com/stratanet/strata/swarm"
)

// TestHealthOf: a hint (a peer never heard from) is routed to only while
// we are connected to it: a node that died is forgotten and may come back
// as a hint, and routing to it would fail every attempt at the dial.
func TestHealthOf(t *testing.T) {
	for _, c := range []struct {
		p    swarm.Peer
		want routing.Health
	}{
		{swarm.Peer{Liveness: swarm.Alive}, routing.Alive},
		{swarm.Peer{Liveness: swarm.Hint, Connected: true}, routing.Alive},
		{swarm.Peer{Liveness: swarm.Hint}, routing.Suspect},
		{swarm.Peer{Liveness: swarm.Suspect, Connected: true}, routing.Alive},
		{swarm.Peer{Liveness: swarm.Suspect}, routing.Suspect},
		{swarm.Peer{Liveness: swarm.Dead, Connected: true}, routing.Dead},
	} {
		if got := healthOf(c.p); got != c.want {
			t.Errorf("%v (connected %v): %v, want %v", c.p.Liveness, c.p.Connected, got, c.want)
		}
	}
}

// TestPinUsable: a followed path (Request.Follow) is taken only while
// every hop is alive, serving, not avoided and holds its layers on the
// committed map.
func TestPinUsable(t *testing.T) {
	m, err := layers.NewLayerMap(8, 1, layers.Stage{Node: "a", Range: layers.Range{Start: 0, End: 4}},
		layers.Stage{Node: "b", Range: layers.Range{Start: 4, End: 8}}, layers.Stage{Node: "c", Range: layers.Range{Start: 0, End: 8}})
	if err != nil {
		t.Fatal(err)
	}
	v := routing.NewView()
	for _, id := range []string{"a", "b", "c"} {
		v.Set(routing.NodeState{ID: id})
	}
	p := routing.Path{Hops: []routing.Hop{{Node: "a", From: 0, To: 4}, {Node: "b", From: 4, To: 8}}}
	if !pinUsable(m, v, p, nil) {
		t.Fatal("a serving path refused")
	}
	if pinUsable(m, v, p, []string{"b"}) {
		t.Fatal("an avoided hop taken")
	}
	if pinUsable(m, v, routing.Path{Hops: []routing.Hop{{Node: "a", From: 0, To: 8}}}, nil) {
		t.Fatal("a hop beyond its node's layers taken")
	}
	if pinUsable(m, v, routing.Path{Hops: []routing.Hop{{Node: "a", From: 0, To: 4}}}, nil) {
		t.Fatal("a path short of the last layer taken")
	}
	v.Update("b", func(n *routing.NodeState) { n.Health = routing.Suspect })
	if pinUsable(m, v, p, nil) {
		t.Fatal("a suspect hop taken")
	}
	if !pinUsable(m, v, routing.Path{Hops: []routing.Hop{{Node: "c", From: 0, To: 8}}}, nil) {
		t.Fatal("a one-hop path refused")
	}
}
