package sim

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/layers/baseline"
)

// roster is who is up, who the control plane counts, and who serves
// which range: the policy's placement as the engine runs it, and the
// swarm's coverage of the model's layers over time.
type roster struct {
	w         *world
	up        []bool // process running
	known     []bool // the control plane counts it as a member
	serving   []bool // holds loaded layers and takes requests
	rng       []layers.Range
	loading   []uint32 // load generation, to void superseded loads
	committed layers.LayerMap
	servMap   layers.LayerMap
	mapDirty  bool
	covered   bool
	lostAt    []float64 // open recoveries: when coverage was lost
	incStart  float64
}

// newRoster is the roster of n machines, none up.
func newRoster(w *world, n int) *roster {
	return &roster{w: w, up: make([]bool, n), known: make([]bool, n), serving: make([]bool, n),
		rng: make([]layers.Range, n), loading: make([]uint32, n)}
}

// members are the machines the control plane counts.
func (ro *roster) members() []int {
	var out []int
	for i, k := range ro.known {
		if k {
			out = append(out, i)
		}
	}
	return out
}

// start places the machines that are up at time 0 with the policy's
// planner and loads them.
func (ro *roster) start(ctx context.Context) error {
	var init []int
	for i, n := range ro.w.spec.Nodes {
		if n.JoinAt <= 0 {
			init = append(init, i)
			ro.up[i], ro.known[i] = true, true
		}
	}
	if ro.w.policy == "strata" {
		// The leader's decisions place them: joins, the first map, its
		// warmup and commit.
		return ro.w.lead.startLeader(init)
	}
	lm, err := ro.plan(ctx, init)
	if err != nil {
		return err
	}
	ro.committed = lm
	ro.covered = false
	for _, st := range lm.Stages {
		ro.load(ro.w.m.idx[st.Node], st.Range, false, true)
	}
	return nil
}

func (ro *roster) plan(ctx context.Context, members []int) (layers.LayerMap, error) {
	f, err := ro.w.m.fleet(members)
	if err != nil {
		return layers.LayerMap{}, err
	}
	switch ro.w.policy {
	case "strata":
		p, err := layers.NewPlanner().Full(f, ro.committed.Epoch+1)
		return p.Map, err
	case "petals":
		return baseline.NewPetals(baseline.PetalsSeed(ro.w.spec.Seed)).Plan(ctx, f)
	case "parallax":
		var opts []baseline.ParallaxOption
		if ro.w.spec.ParallaxMaxStates > 0 {
			opts = append(opts, baseline.ParallaxMaxStates(ro.w.spec.ParallaxMaxStates))
		}
		return baseline.NewParallax(opts...).Plan(ctx, f)
	}
	return layers.LayerMap{}, fmt.Errorf("%w: policy %q (known: %s)", ErrScenario, ro.w.policy, strings.Join(Policies, ", "))
}

// load makes node i load range r. Make-before-break keeps it serving its
// old range meanwhile; break-before-make (Petals, Parallax) stops it first.
// initial loads are not counted as moves.
func (ro *roster) load(i int, r layers.Range, makeBeforeBreak, initial bool) {
	if r.Empty() || !ro.up[i] {
		return
	}
	added := r.Len()
	if ro.serving[i] {
		added = r.Len() - r.Intersect(ro.rng[i]).Len()
	}
	if !initial {
		ro.w.res.Moves++
		ro.w.res.BytesLoaded += float64(added) * ro.w.m.layerBytes()
	}
	if !makeBeforeBreak && ro.serving[i] {
		ro.stopServing(i)
	}
	ro.loading[i]++
	gen := ro.loading[i]
	dt := float64(added) * ro.w.m.layerBytes() / ro.w.spec.Timing.DiskBytesPerS
	ro.w.s.schedule(&event{at: ro.w.s.now + dt, kind: evCallback, fn: func() {
		if ro.loading[i] != gen || !ro.up[i] {
			return
		}
		ro.serve(i, r)
	}})
}

func (ro *roster) serve(i int, r layers.Range) {
	ro.w.s.revive(i, r.Start, r.End)
	ro.setCaps(i)
	ro.serving[i], ro.rng[i] = true, r
	ro.changed()
}

// reassign moves a serving node to range r the way a committed map does:
// its open sessions go on (sim.reassign).
func (ro *roster) reassign(i int, r layers.Range) {
	ro.w.s.reassign(i, r.Start, r.End)
	ro.setCaps(i)
	ro.serving[i], ro.rng[i] = true, r
	ro.changed()
}

// leaveMap takes a live node out of the map the way a committed map does:
// it takes no new session, and those it holds go on to their end.
func (ro *roster) leaveMap(i int) {
	ro.w.s.reassign(i, 0, 0)
	ro.setCaps(i)
	ro.serving[i], ro.rng[i] = false, layers.Range{}
	ro.changed()
}

// setCaps sets a node's batch caps and KV memory for the layers it holds
// (Helix's tables stop at the most a machine may hold: layers still in
// use past that get the last row).
func (ro *roster) setCaps(i int) {
	n := ro.w.s.nodes[i]
	tab := ro.w.m.capTab[ro.w.m.gpu[i]]
	kv := ro.w.m.kvTab[ro.w.m.gpu[i]]
	kk := min(max(n.held, 1), len(tab)) - 1
	n.Caps, n.KVCapacity = tab[kk], kv[kk]
}

func (ro *roster) stopServing(i int) {
	if ro.serving[i] {
		ro.serving[i] = false
		c := causeMoved
		if !ro.up[i] {
			c = causeDied
		}
		ro.w.s.kill(i, c)
		ro.changed()
	}
}

// changed recomputes the serving map and coverage after any change.
func (ro *roster) changed() {
	ro.mapDirty = true
	cov := make([]int, ro.w.m.model.Layers+1)
	for i, sv := range ro.serving {
		if sv {
			cov[ro.rng[i].Start]++
			cov[ro.rng[i].End]--
		}
	}
	ok, c := true, 0
	for l := 0; l < ro.w.m.model.Layers; l++ {
		c += cov[l]
		if c <= 0 {
			ok = false
			break
		}
	}
	now := ro.w.s.now
	if ok && !ro.covered {
		if now >= ro.w.s.win.Start {
			ro.w.res.IncompleteS += now - math.Max(ro.incStart, ro.w.s.win.Start)
		}
		for _, t := range ro.lostAt {
			ro.w.res.Recoveries = append(ro.w.res.Recoveries, now-t)
		}
		ro.lostAt = ro.lostAt[:0]
	}
	if !ok && ro.covered {
		ro.incStart = now
	}
	ro.covered = ok
	ro.w.eq.poke() // the entry's queue looks again
}

// servingMap is the map of what serves now, kept until the next change;
// a new one voids the paths the baselines cached for the old one.
func (ro *roster) servingMap() layers.LayerMap {
	if !ro.mapDirty {
		return ro.servMap
	}
	var st []layers.Stage
	for i, sv := range ro.serving {
		if sv {
			st = append(st, layers.Stage{Node: ro.w.spec.Nodes[i].ID, Range: ro.rng[i]})
		}
	}
	m, err := layers.NewLayerMap(ro.w.m.model.Layers, ro.committed.Epoch, st...)
	if err != nil {
		m = layers.LayerMap{Layers: ro.w.m.model.Layers}
	}
	ro.servMap, ro.mapDirty, ro.w.pa.pathOK = m, false, false
	ro.w.pa.pipes = nil
	return m
}
