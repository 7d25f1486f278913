package layers

import "math"

// Shortfall says whether a fleet can hold every layer of its model at all,
// and if not, by how much it falls short: what a swarm with no map yet
// waits for. Ranges are contiguous, so the nodes can cover the model only
// if the layers each can hold add up to its layer count; a placement that
// fills from layer 0 upwards, each node taking as many as it can, leaves
// Gap without a node. Ends (the embedding, the head) only take room, so a
// fleet that falls short here falls short for every planner; one that
// does not may still fall short by its ends, which Shortfall does not
// look at.
type Shortfall struct {
	// Layers is the model's layer count.
	Layers int
	// Caps is, per node in the fleet's order, the most layers it can hold
	// with room for one session's KV cache (Profile.Capacity without
	// ends): the lower of its memory's share and its own cap
	// (Node.MaxLayers).
	Caps []int
	// Gap is the layers left without a node; empty when the caps add up
	// to the model.
	Gap Range
	// LayerBytes is the memory one layer takes with one session's KV
	// cache at the cost model's context; MaxMemory the most usable memory
	// (after the reserve) any node has. They say why a node holds no
	// layer at all.
	LayerBytes, MaxMemory float64
}

// Short reports whether the fleet cannot hold every layer.
func (s Shortfall) Short() bool { return !s.Gap.Empty() }

// Shortfall is how far f falls short of holding every layer of its model
// (see Shortfall).
func (f *Fleet) Shortfall() Shortfall {
	m := f.Model
	s := Shortfall{Layers: m.Layers, Caps: make([]int, len(f.Profiles)),
		LayerBytes: m.LayerWeightBytes() + float64(f.Params.Context)*m.KVBytesPerToken()}
	sum := 0
	for i, p := range f.Profiles {
		s.Caps[i] = p.Capacity(0)
		sum += s.Caps[i]
		s.MaxMemory = math.Max(s.MaxMemory, p.Node.Hardware.MemoryBytes*(1-f.Params.MemoryReserve))
	}
	if sum < m.Layers {
		s.Gap = Range{Start: sum, End: m.Layers}
	}
	return s
}
