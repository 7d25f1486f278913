package layers

import "sort"

// KindNeed is how many nodes of one kind a model needs at the least: what
// "placement shows how many volunteers a model needs" asks for.
type KindNeed struct {
	// Kind is the hardware name the nodes share.
	Kind string `json:"kind"`
	// Have is how many nodes of the kind the fleet has.
	Have int `json:"have"`
	// Layers is the most layers one node of the kind holds with room for
	// one session's KV cache (no end, as Profile.Capacity(0)).
	Layers int `json:"layers_per_node"`
	// Min is the fewest nodes of this kind alone that hold every layer
	// once, the first holding the embedding and the last the head; 0 when
	// no number of them can.
	Min int `json:"min_nodes"`
}

// MinNodes is the fewest nodes like p that hold every layer of an L-layer
// model once: the first also holds the embedding, the last the head, the
// rest neither. It is 0 when no number of them can.
func (p Profile) MinNodes(L int) int {
	if L <= 0 {
		return 0
	}
	if p.Capacity(EndEmbed|EndHead) >= L {
		return 1
	}
	ce, ch, c0 := p.Capacity(EndEmbed), p.Capacity(EndHead), p.Capacity(0)
	if ce == 0 || ch == 0 {
		return 0
	}
	rest := L - ce - ch
	if rest <= 0 {
		return 2
	}
	if c0 == 0 {
		return 0
	}
	return 2 + (rest+c0-1)/c0
}

// Needs gives, per hardware kind in the fleet (sorted by name), the fewest
// nodes of that kind alone that hold the model once (KindNeed). Nodes of
// a kind that differ in their own layer cap are counted at the kind's
// largest capacity.
func (f *Fleet) Needs() []KindNeed {
	by := map[string]*KindNeed{}
	for _, p := range f.Profiles {
		k := p.Node.Hardware.Name
		n := by[k]
		if n == nil {
			n = &KindNeed{Kind: k}
			by[k] = n
		}
		n.Have++
		if c := p.Capacity(0); c > n.Layers || n.Have == 1 {
			n.Layers = c
			n.Min = p.MinNodes(f.Model.Layers)
		}
	}
	out := make([]KindNeed, 0, len(by))
	for _, n := range by {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// MinNodes is the fewest nodes of the fleet that can hold every layer
// once, taking the largest first and ignoring the ends (as Shortfall
// does); 0 when the whole fleet cannot.
func (f *Fleet) MinNodes() int {
	caps := make([]int, 0, len(f.Profiles))
	for _, p := range f.Profiles {
		caps = append(caps, p.Capacity(0))
	}
	sort.Sort(sort.Reverse(sort.IntSlice(caps)))
	sum := 0
	for i, c := range caps {
		sum += c
		if sum >= f.Model.Layers {
			return i + 1
		}
	}
	return 0
}
