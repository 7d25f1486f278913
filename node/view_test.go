package node

import (
	"testing"

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
