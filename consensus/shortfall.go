package consensus

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/layers"
)

// placeable reports whether a plan made at now may place member m, as far
// as the state says: it is not draining, nor a laggard.
func placeable(m Member, now time.Time) bool {
	return !m.Draining && !now.Before(m.LaggardUntil)
}

// Shortfall is how far the members of s that a plan may place at now
// (placeable, and not dead by dead, which may be nil) fall short of
// holding every layer of model, with the cost parameters a leader plans
// with (s.SwarmConfig().PlanParams(params)): layers.Fleet.Shortfall of the fleet a
// leader would plan on. A swarm with no committed map that falls short
// waits for more nodes: no leader can plan a first map.
func Shortfall(s State, model layers.ModelSpec, params layers.CostParams, now time.Time, dead func(id string) bool) (layers.Shortfall, error) {
	var nodes []layers.Node
	for _, m := range s.Members() {
		if !placeable(m, now) || (dead != nil && dead(m.ID)) {
			continue
		}
		nodes = append(nodes, layers.Node{ID: m.ID, Hardware: m.Caps.Hardware, Region: m.Caps.Region, MaxLayers: m.Caps.MaxLayers})
	}
	f, err := layers.NewFleet(model, nodes, s.SwarmConfig().PlanParams(params))
	if err != nil {
		return layers.Shortfall{}, err
	}
	return f.Shortfall(), nil
}

// Shortfall is Shortfall of this replica's state now, with this member's
// model and cost parameters; a member is dead when this member's
// liveness says so (never this member itself).
func (c *Consensus) Shortfall() (layers.Shortfall, error) {
	dead := func(id string) bool {
		if c.live == nil || id == c.id.String() {
			return false
		}
		p, err := peer.Decode(id)
		if err != nil {
			return true
		}
		_, d := c.live.DeadSince(p)
		return d
	}
	return Shortfall(c.State(), c.cfg.model, c.cfg.costParams, time.Now(), dead)
}
