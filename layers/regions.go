package layers

import (
	"encoding/binary"
	"math"
	"sort"
)

// alignRegions swaps ranges between nodes that are interchangeable (the
// same throughput for every range, so Flow does not change by a bit) to
// gather each region's stages into chains that cover more of the model, so
// that a path can stay inside one region. The objective is Σ over regions
// of (layers the region covers)², which favours completing a region over
// spreading every region thin.
func alignRegions(p *placement) {
	groups := map[string][]int{}
	regions := map[string]bool{}
	for i, pr := range p.f.Profiles {
		if p.rng[i].Empty() {
			continue
		}
		key := profileKey(pr)
		groups[key] = append(groups[key], i)
		regions[pr.Node.Region] = true
	}
	if len(regions) < 2 {
		return
	}
	regionCov := map[string][]int{}
	for i, pr := range p.f.Profiles {
		r := p.rng[i]
		if r.Empty() {
			continue
		}
		c := regionCov[pr.Node.Region]
		if c == nil {
			c = make([]int, p.L)
			regionCov[pr.Node.Region] = c
		}
		for l := r.Start; l < r.End; l++ {
			c[l]++
		}
	}
	covered := func(c []int) int {
		n := 0
		for _, v := range c {
			if v > 0 {
				n++
			}
		}
		return n
	}
	score := func(a, b string) int {
		ca, cb := covered(regionCov[a]), covered(regionCov[b])
		return ca*ca + cb*cb
	}
	shift := func(c []int, r Range, d int) {
		for l := r.Start; l < r.End; l++ {
			c[l] += d
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	budget := 200_000 // swap evaluations, each O(L)
	for pass := 0; pass < 4; pass++ {
		improved := false
		for _, k := range keys {
			g := groups[k]
			for x := 0; x < len(g); x++ {
				for y := x + 1; y < len(g); y++ {
					i, j := g[x], g[y]
					ra, rb := p.f.Profiles[i].Node.Region, p.f.Profiles[j].Node.Region
					if ra == rb || p.rng[i] == p.rng[j] {
						continue
					}
					if budget--; budget < 0 {
						return
					}
					before := score(ra, rb)
					ca, cb := regionCov[ra], regionCov[rb]
					shift(ca, p.rng[i], -1)
					shift(ca, p.rng[j], 1)
					shift(cb, p.rng[j], -1)
					shift(cb, p.rng[i], 1)
					if score(ra, rb) > before {
						ri, rj := p.rng[i], p.rng[j]
						p.rng[i], p.rng[j] = rj, ri
						p.t[i], p.t[j] = p.t[j], p.t[i]
						improved = true
						continue
					}
					shift(ca, p.rng[j], -1)
					shift(ca, p.rng[i], 1)
					shift(cb, p.rng[i], -1)
					shift(cb, p.rng[j], 1)
				}
			}
		}
		if !improved {
			return
		}
	}
}

// profileKey identifies nodes whose throughput tables are identical.
func profileKey(p Profile) string {
	n := p.Node
	h := n.Hardware
	return fmtKey(h.MemoryBytes, h.MemBandwidth, h.TFLOPS, h.NetBandwidth, n.Speed, float64(n.MaxLayers), float64(p.MaxLayers))
}

func fmtKey(vs ...float64) string {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return string(b)
}
