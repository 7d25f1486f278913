package routing

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/stratanet/strata/layers"
)

// RoundRobin is Parallax's production routing, kept as a baseline: a fixed
// set of pipelines used in turn whatever their load. It skips a pipeline
// that uses a node the router's filters drop (dead, suspect, draining) so
// that comparisons measure load-blindness, not failures. Its only state is
// the turn counter.
type RoundRobin struct {
	est   *Router
	pipes []Path
	turn  atomic.Uint64
}

var _ Policy = (*RoundRobin)(nil)

// NewRoundRobin returns the baseline over pipelines; est supplies the
// filters and prices each chosen path as the DP would (Path.Cost).
func NewRoundRobin(est *Router, pipelines ...Path) (*RoundRobin, error) {
	if est == nil {
		return nil, fmt.Errorf("%w: round robin needs a router to filter and price paths", ErrConfig)
	}
	if len(pipelines) == 0 {
		return nil, fmt.Errorf("%w: round robin over no pipelines", ErrNoPath)
	}
	rr := &RoundRobin{est: est}
	for i, p := range pipelines {
		if err := p.Validate(est.model.Layers); err != nil {
			return nil, fmt.Errorf("pipeline %d: %w", i, err)
		}
		rr.pipes = append(rr.pipes, Path{Hops: append([]Hop(nil), p.Hops...), Epoch: p.Epoch})
	}
	return rr, nil
}

// Pipelines returns the fixed pipelines.
func (rr *RoundRobin) Pipelines() []Path {
	out := make([]Path, len(rr.pipes))
	for i, p := range rr.pipes {
		out[i] = Path{Hops: append([]Hop(nil), p.Hops...), Epoch: p.Epoch}
	}
	return out
}

// Route returns the next usable pipeline in turn, priced.
func (rr *RoundRobin) Route(m layers.LayerMap, v *View, req Request, now time.Time) (Path, error) {
	n := uint64(len(rr.pipes))
	first := rr.turn.Add(1) - 1
	var last error
	for t := range n {
		p, err := rr.est.Evaluate(m, v, req, now, rr.pipes[(first+t)%n])
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, ErrNoPath) && !errors.Is(err, ErrBadPath) {
			return Path{}, err // the map or model is wrong: no pipeline will do
		}
		last = err
	}
	return Path{}, fmt.Errorf("%w: none of %d pipelines is usable (last: %w)", ErrNoPath, n, last)
}

// FixedPipelines builds disjoint pipelines from a map the way Parallax's
// scheduler does, one per head node: from each node that holds layer 0, in
// node order, follow the node that continues where the chain ends (one
// starting exactly there first, then the one reaching furthest), trimming
// overlaps. Nodes already in a pipeline are not reused; a chain that
// cannot reach the last layer is dropped.
func FixedPipelines(m layers.LayerMap) []Path {
	used := make(map[string]bool)
	var out []Path
	for _, head := range m.Stages {
		if head.Start != 0 || used[head.Node] || head.End > m.Layers {
			continue
		}
		chain := []Hop{{Node: head.Node, From: 0, To: head.End}}
		mine := map[string]bool{head.Node: true}
		at := head.End
		for at < m.Layers {
			best := -1
			for k, s := range m.Stages {
				if used[s.Node] || mine[s.Node] || !s.Contains(at) {
					continue
				}
				if best < 0 {
					best = k
					continue
				}
				b := m.Stages[best]
				if (s.Start == at) != (b.Start == at) {
					if s.Start == at {
						best = k
					}
					continue
				}
				if s.End > b.End {
					best = k
				}
			}
			if best < 0 {
				break
			}
			s := m.Stages[best]
			chain = append(chain, Hop{Node: s.Node, From: at, To: s.End})
			mine[s.Node] = true
			at = s.End
		}
		if at != m.Layers {
			continue
		}
		for id := range mine {
			used[id] = true
		}
		out = append(out, Path{Hops: chain, Epoch: m.Epoch})
	}
	return out
}
