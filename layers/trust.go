package layers

import "fmt"

// Trust is what placement knows of each node's verified work: how many
// spot checks it passed, as the leader counts them, and which nodes are
// trusted without checks (a public swarm's stewards). In a swarm anyone
// can join and an identity is free, so a planner that believed every
// member's declared hardware would hand a crowd of new nodes whole
// ranges. Trust does two things with it:
//
//   - Weight scales a node's modelled throughput by its verified work
//     (Weigh): a fresh node counts for 1/(Full+1) of what it declares and
//     grows by that much with every verified check, so its share of any
//     layer's capacity is capped until it has earned it;
//   - Planner.Vouch keeps a verified holder on every layer whenever the
//     verified nodes can hold the model: a fresh node may hold layers
//     beside them, never alone.
//
// The zero value (Full 0) weighs every node fully and vouches for all:
// placement as it was before trust.
type Trust struct {
	// Full is K: the verified checks after which a node counts fully.
	Full int
	// Checks are the verified checks by node; absent: none.
	Checks map[string]int
	// Trusted nodes count fully without checks.
	Trusted map[string]bool
}

// Weight is id's placement weight in (0, 1]: 1 once it is trusted or
// passed Full checks, (checks+1)/(Full+1) before.
func (t Trust) Weight(id string) float64 {
	if t.Full <= 0 || t.Trusted[id] {
		return 1
	}
	c := max(t.Checks[id], 0)
	if c >= t.Full {
		return 1
	}
	return float64(c+1) / float64(t.Full+1)
}

// Verified reports whether id counts fully.
func (t Trust) Verified(id string) bool { return t.Weight(id) == 1 }

// Weigh returns nodes with each one's Speed scaled by its weight (a Speed
// of 0 reads as 1, as NewProfile reads it). nodes is not modified.
func (t Trust) Weigh(nodes []Node) []Node {
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		w := t.Weight(n.ID)
		if w < 1 {
			if !(n.Speed > 0) {
				n.Speed = 1
			}
			n.Speed *= w
		}
		out[i] = n
	}
	return out
}

// Unvouched returns the maximal ranges of m's layers that no verified
// node holds (layers no node holds included).
func (t Trust) Unvouched(m LayerMap) []Range {
	return t.vouchedPart(m).Gaps()
}

// vouchedPart is m without the stages of nodes that are not verified.
func (t Trust) vouchedPart(m LayerMap) LayerMap {
	out := m.clone()
	out.Stages = out.Stages[:0]
	for _, st := range m.Stages {
		if t.Verified(st.Node) {
			out.Stages = append(out.Stages, st)
		}
	}
	return out
}

// Vouch returns m changed so that every layer has a verified holder, and
// true, when the verified nodes of f can give every layer one; m itself
// and false when they cannot (too few or too small: a swarm of fresh
// nodes is planned as before). Stages of nodes that are not verified stay
// as they are; verified nodes extend over the layers only fresh ones
// hold, or idle verified nodes take them, for the fewest layers loaded
// (the moves Repair makes); when no such change closes the gap, the
// verified nodes are planned afresh and the fresh stages kept beside
// them. The epoch is m's.
func (pl Planner) Vouch(f *Fleet, m LayerMap, t Trust) (LayerMap, bool, error) {
	if m.Layers != f.Model.Layers {
		return m, false, fmt.Errorf("%w: map has %d layers, model %d", ErrBadMap, m.Layers, f.Model.Layers)
	}
	mv := t.vouchedPart(m)
	if mv.Covers() {
		return m, true, nil
	}
	var ids []string
	for _, pr := range f.Profiles {
		if t.Verified(pr.Node.ID) {
			ids = append(ids, pr.Node.ID)
		}
	}
	if len(ids) == 0 {
		return m, false, nil
	}
	sub, err := f.Subset(ids)
	if err != nil {
		return m, false, err
	}
	for guard := 0; guard < 4*f.Model.Layers+sub.Len() && !mv.Covers(); guard++ {
		fixed := false
		for _, gap := range mv.Gaps() {
			if next, ok := pl.cheapestCover(sub, mv, gap, "", 1); ok {
				mv, fixed = next, true
				break
			}
		}
		if !fixed {
			break
		}
	}
	if !mv.Covers() {
		plan, err := pl.Full(sub, m.Epoch)
		if err != nil {
			return m, false, nil // the verified nodes cannot hold the model
		}
		mv = plan.Map
	}
	out := mv
	out.Epoch = m.Epoch
	for _, st := range m.Stages {
		if !t.Verified(st.Node) {
			out = out.With(st.Node, st.Range)
		}
	}
	return out, true, nil
}
