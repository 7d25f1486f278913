package routing

import (
	"math"
	"math/rand/v2"
	"slices"
)

// edge is a measured link from stage j to stage i, usable at boundaries
// lo..hi (j runs the layer before the boundary and i the one after it).
type edge struct {
	j, i, lo, hi int32
	c            float64
}

// pairCost is the round-trip cost of a crossing from stage j to stage i.
func (s *scratch) pairCost(j, i int32) float64 {
	c := s.zc[int(s.zone[j])*s.zoneCnt+int(s.zone[i])] + s.hx[j] + s.hx[i]
	for e := s.eoff[i]; e < s.eoff[i+1]; e++ {
		if s.erec[e].j == j {
			c = min(c, s.erec[e].c)
		}
	}
	return c
}

// working copies the scored costs into the DP's working arrays.
func (s *scratch) working() {
	S := len(s.view)
	s.wl, s.wv, s.wk, s.wt = grow(s.wl, S), grow(s.wv, S), grow(s.wk, S), grow(s.wt, S)
	copy(s.wl, s.layer)
	copy(s.wv, s.visit)
	copy(s.wk, s.link)
	copy(s.wt, s.last)
}

// perturb multiplies each node's costs by its own seeded factor in
// [1, 1+slack]. Every path's cost then grows by a factor in that range, so
// the cheapest perturbed path costs at most (1+slack) times the best one:
// one DP picks at random among the near-best paths, weighted towards the
// cheaper ones.
func (s *scratch) perturb(seed uint64, slack float64) {
	if slack <= 0 {
		return
	}
	pcg := rand.NewPCG(seed, perturbStream)
	for i := range s.wl {
		f := 1 + slack*unit(pcg)
		s.wl[i] *= f
		s.wv[i] *= f
		s.wk[i] *= f
		s.wt[i] *= f
	}
}

// dp fills the DP's table over the working costs and returns the stage
// the cheapest path ends on, or -1.
//
// State (l, i): layers [0, l] are done and layer l ran on stage i. Staying
// on i costs its layer cost; switching from j to i at a boundary costs
// j's exit, the round trip, i's entry and visit. The cheapest switch into
// each region comes from the cheapest exit per region plus the region
// pair's estimate, so a boundary costs O(holders + regions²) plus the
// measured links usable there, not O(holders²). The loops keep values
// only (min compiles to branch-free code); trace recovers the choices.
// A stage's own exit may be the cheapest into its region, but that switch
// never beats staying, as costs are non-negative, so it needs no care.
func (s *scratch) dp(L int) int32 {
	S := int32(len(s.view))
	inf := math.Inf(1)
	// Stages and measured links bucketed by first layer and boundary.
	s.sOff = grow(s.sOff, L+2)
	clear(s.sOff)
	for i := range S {
		s.sOff[s.start[i]+1]++
	}
	for l := 1; l <= L+1; l++ {
		s.sOff[l] += s.sOff[l-1]
	}
	s.sIdx = grow(s.sIdx, int(S))
	s.next = grow(s.next, L+1) // cursor per start layer
	copy(s.next, s.sOff[:L+1])
	for i := range S {
		st := s.start[i]
		s.sIdx[s.next[st]] = i
		s.next[st]++
	}
	s.eLo = grow(s.eLo, L+2)
	clear(s.eLo)
	for _, e := range s.erec {
		s.eLo[e.lo+1]++
	}
	for l := 1; l <= L+1; l++ {
		s.eLo[l] += s.eLo[l-1]
	}
	s.eby = grow(s.eby, len(s.erec))
	s.next = grow(s.next, L+1)
	copy(s.next, s.eLo[:L+1])
	for _, e := range s.erec {
		s.eby[s.next[e.lo]] = e
		s.next[e.lo]++
	}

	s.off = grow(s.off, int(S))
	total := int32(0)
	for i := range S {
		s.off[i] = total
		total += s.end[i] - s.start[i]
	}
	s.fh = grow(s.fh, int(total))
	s.x, s.eb = grow(s.x, int(S)), grow(s.eb, int(S))
	for i := range s.eb {
		s.eb[i] = inf
	}
	nz := s.zoneCnt
	s.zmin, s.inZ = grow(s.zmin, nz), grow(s.inZ, nz)
	fh, off, start, end, zone := s.fh, s.off, s.start, s.end, s.zone
	wl, wv, wk, hx, x, eb, eby := s.wl, s.wv, s.wk, s.hx, s.x, s.eb, s.eby

	s.active = s.active[:0]
	for _, i := range s.sIdx[s.sOff[0]:s.sOff[1]] {
		fh[off[i]] = s.entry[i] + wv[i] + wl[i]
		s.active = append(s.active, i)
	}
	s.holdOff = grow(s.holdOff, L+1)
	s.holdOff[0] = 0
	s.hold = append(s.hold[:0], s.active...)
	s.holdOff[1] = int32(len(s.hold))
	s.eact = s.eact[:0]
	for l := int32(1); l < int32(L); l++ {
		// Exits of the holders of layer l-1, cheapest per region.
		zmin := s.zmin
		for z := range zmin {
			zmin[z] = inf
		}
		for _, j := range s.active {
			xj := fh[off[j]+l-1-start[j]] + wk[j]
			x[j] = xj
			zmin[zone[j]] = min(zmin[zone[j]], xj+hx[j])
		}
		for r := range nz {
			best := inf
			for q, zq := range zmin {
				best = min(best, zq+s.zc[q*nz+r])
			}
			s.inZ[r] = best
		}
		// Measured links usable at this boundary; those still usable at
		// the next stay (written unconditionally, kept by the count, so
		// that the loop does not branch).
		for k := s.eLo[l]; k < s.eLo[l+1]; k++ {
			s.eact = append(s.eact, k)
		}
		n := 0
		eact := s.eact
		for _, k := range eact {
			e := &eby[k]
			eb[e.i] = min(eb[e.i], x[e.j]+e.c)
			eact[n] = k
			if e.hi > l {
				n++
			}
		}
		s.eact = eact[:n]
		// The holders of layer l.
		s.next = s.next[:0]
		for _, i := range s.active {
			if end[i] > l {
				s.next = append(s.next, i)
			}
		}
		s.next = append(s.next, s.sIdx[s.sOff[l]:s.sOff[l+1]]...)
		for _, i := range s.next {
			c := min(s.inZ[zone[i]]+hx[i], eb[i]) + wk[i] + wv[i]
			eb[i] = inf
			at := off[i] + l - start[i]
			if start[i] < l {
				c = min(c, fh[at-1])
			}
			fh[at] = c + wl[i]
		}
		s.hold = append(s.hold, s.next...)
		s.holdOff[l+1] = int32(len(s.hold))
		s.active, s.next = s.next, s.active
	}
	best, arg := inf, int32(-1)
	for _, i := range s.active {
		if c := fh[off[i]+int32(L)-1-start[i]] + s.wt[i] + s.entry[i]; c < best || (c == best && i < arg) {
			best, arg = c, i
		}
	}
	return arg
}

// solve runs the DP and traces its cheapest path.
func (s *scratch) solve(v *View, L int) ([]Hop, bool) {
	last := s.dp(L)
	if last < 0 {
		return nil, false
	}
	return s.trace(v, last, L)
}

// trace walks the DP's table back from the final stage and returns the
// hops in order, leaving their stages in s.hopStage. At each layer it
// stays on the stage if that is what gave the table's value (staying wins
// ties), and otherwise finds the cheapest predecessor, the lowest stage on
// ties. It reports false if the table has no way back, which a table
// filled by dp over covered layers always has.
func (s *scratch) trace(v *View, last int32, L int) ([]Hop, bool) {
	s.hopStage = s.hopStage[:0]
	rev := make([]Hop, 0, 8)
	i, l, to := last, int32(L-1), int32(L)
	for {
		base := s.off[i] - s.start[i]
		for l > s.start[i] && s.fh[base+l-1]+s.wl[i] == s.fh[base+l] {
			l--
		}
		rev = append(rev, Hop{Node: v.nodes[s.view[i]].ID, From: int(l), To: int(to)})
		s.hopStage = append(s.hopStage, i)
		if l == 0 {
			break
		}
		// The cheapest way in: over a region estimate from any holder of
		// the layer before, or over a measured link.
		best, arg := math.Inf(1), int32(-1)
		row := s.zc[int(s.zone[i]):]
		for _, j := range s.hold[s.holdOff[l-1]:s.holdOff[l]] {
			if j == i {
				continue
			}
			c := s.fh[s.off[j]+l-1-s.start[j]] + s.wk[j] + s.hx[j] + row[int(s.zone[j])*s.zoneCnt] + s.hx[i]
			if c < best || (c == best && j < arg) {
				best, arg = c, j
			}
		}
		for e := s.eoff[i]; e < s.eoff[i+1]; e++ {
			j := s.erec[e].j
			if s.start[j] >= l || s.end[j] < l {
				continue
			}
			c := s.fh[s.off[j]+l-1-s.start[j]] + s.wk[j] + s.erec[e].c
			if c < best || (c == best && j < arg) {
				best, arg = c, j
			}
		}
		if arg < 0 {
			return nil, false
		}
		i, to, l = arg, l, l-1
	}
	slices.Reverse(rev)
	slices.Reverse(s.hopStage)
	return rev, true
}
