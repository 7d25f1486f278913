package baseline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stratanet/strata/layers"
)

// Policy is a placement policy that plans a whole map for a fleet.
type Policy interface {
	// Name is the policy's name in reports ("petals", "parallax").
	Name() string
	// Plan places the fleet's nodes. It returns an error wrapping
	// ErrTimedOut when ctx is done before it finishes.
	Plan(ctx context.Context, f *layers.Fleet) (layers.LayerMap, error)
}

var (
	// ErrTimedOut reports a policy that did not finish within its budget:
	// the context ended, or the Parallax search hit its state budget. The
	// error also wraps ctx.Err() when the context ended.
	ErrTimedOut = errors.New("baseline: timed out")
	// ErrNoNodes reports a nil or empty fleet.
	ErrNoNodes = errors.New("baseline: no nodes")
	// ErrNoCapacity reports a fleet where the policy cannot place anything
	// (Petals: no node holds a block; Parallax: no pipeline can be built).
	ErrNoCapacity = errors.New("baseline: not enough capacity")
	// ErrBadOption reports an invalid option or a join order that does not
	// match the fleet.
	ErrBadOption = errors.New("baseline: bad option")
)

// DefaultTimeout is the budget callers should give a baseline through the
// context (the 60 s). The package reads no clock itself.
const DefaultTimeout = 60 * time.Second

// Defaults returns both baselines with their default options.
func Defaults() []Policy {
	return []Policy{NewPetals(), NewParallax()}
}

func checkFleet(f *layers.Fleet) error {
	if f == nil || f.Len() == 0 {
		return ErrNoNodes
	}
	if f.Model.Layers <= 0 || f.Model.Layers > layers.MaxMapLayers {
		return fmt.Errorf("%w: model %q has %d layers", ErrNoCapacity, f.Model.Name, f.Model.Layers)
	}
	return nil
}

// joinOrder returns fleet indices in the caller's join order: the named
// nodes first, in the given order, then every other node in fleet (ID)
// order, so that the default does not depend on how the nodes were listed.
func joinOrder(f *layers.Fleet, ids []string) ([]int, error) {
	seen := make([]bool, f.Len())
	out := make([]int, 0, f.Len())
	for _, id := range ids {
		i := f.Index(id)
		if i < 0 {
			return nil, fmt.Errorf("%w: join order names %q, which is not in the fleet", ErrBadOption, id)
		}
		if seen[i] {
			return nil, fmt.Errorf("%w: join order names %q twice", ErrBadOption, id)
		}
		seen[i] = true
		out = append(out, i)
	}
	for i := range f.Profiles {
		if !seen[i] {
			out = append(out, i)
		}
	}
	return out, nil
}

func timedOut(ctx context.Context, what string) error {
	return fmt.Errorf("%w: %s: %w", ErrTimedOut, what, context.Cause(ctx))
}

// splitmix64 is a tiny PRNG whose output is fixed by this code, so that a
// seeded run gives the same plan on every Go version.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// shuffle is a Fisher–Yates shuffle; the modulo bias is irrelevant here.
func (s *splitmix64) shuffle(x []int) {
	for i := len(x) - 1; i > 0; i-- {
		j := int(s.next() % uint64(i+1))
		x[i], x[j] = x[j], x[i]
	}
}
