package testnet

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// The wide-area model of the namespace network: what happens to one
// packet between two regions. It is a pure function of the spec and a
// random source, so that it is tested without root; delay_nfqueue.go
// applies it to real packets.

// pathSpec is one direction of the path between two regions.
type pathSpec struct {
	OneWay time.Duration // half the configured RTT
	Jitter time.Duration // the one-way delay varies uniformly by ± this
	Loss   float64       // probability that a packet is dropped
}

// pathModel holds the path of every ordered pair of regions.
type pathModel struct {
	paths map[[2]string]pathSpec
}

// newPathModel checks spec and builds its paths: a region's own RTT
// within it, a link's between two regions, the same both ways. Every
// pair of regions must have a link, so that no path silently has no
// delay.
func newPathModel(spec NetworkSpec) (pathModel, error) {
	m := pathModel{paths: map[[2]string]pathSpec{}}
	path := func(rtt, jitter time.Duration, loss float64, what string) (pathSpec, error) {
		if rtt < 0 || jitter < 0 || loss < 0 || loss >= 1 {
			return pathSpec{}, fmt.Errorf("%s: rtt and jitter must be >= 0 and loss in [0, 1)", what)
		}
		// A round trip crosses the path twice, so each direction gets
		// half the RTT and half the jitter.
		return pathSpec{OneWay: rtt / 2, Jitter: jitter / 2, Loss: loss}, nil
	}
	known := map[string]bool{}
	for _, r := range spec.Regions {
		if r.Name == "" || known[r.Name] {
			return m, fmt.Errorf("network.regions: empty or repeated name %q", r.Name)
		}
		known[r.Name] = true
		p, err := path(r.RTT, r.Jitter, r.Loss, "region "+r.Name)
		if err != nil {
			return m, err
		}
		m.paths[[2]string{r.Name, r.Name}] = p
	}
	for _, l := range spec.Links {
		a, b := l.Between[0], l.Between[1]
		if !known[a] || !known[b] || a == b {
			return m, fmt.Errorf("network.links: %q-%q must name two different regions", a, b)
		}
		if _, dup := m.paths[[2]string{a, b}]; dup {
			return m, fmt.Errorf("network.links: %s-%s given twice", a, b)
		}
		p, err := path(l.RTT, l.Jitter, l.Loss, "link "+a+"-"+b)
		if err != nil {
			return m, err
		}
		m.paths[[2]string{a, b}], m.paths[[2]string{b, a}] = p, p
	}
	for a := range known {
		for b := range known {
			if _, ok := m.paths[[2]string{a, b}]; !ok {
				return m, fmt.Errorf("network.links: no link between regions %s and %s", a, b)
			}
		}
	}
	return m, nil
}

// decide returns how long a packet from region src to region dst is
// held, or drop. Regions without a path (a node with no region) get no
// delay.
func (m pathModel) decide(src, dst string, rnd *rand.Rand) (delay time.Duration, drop bool) {
	p, ok := m.paths[[2]string{src, dst}]
	if !ok {
		return 0, false
	}
	if p.Loss > 0 && rnd.Float64() < p.Loss {
		return 0, true
	}
	d := p.OneWay
	if p.Jitter > 0 {
		d += time.Duration(rnd.Int64N(int64(2*p.Jitter)+1)) - p.Jitter
	}
	return max(d, 0), false
}

// delayReleaseAt is when a packet that arrives at now with delay d leaves,
// given when the previous packet of the same direction between the same
// two hosts leaves (last). Jitter varies the spacing of a flow's packets
// but never reorders them (netem would, and TCP then retransmits
// spuriously, which is not what a WAN path with jitter mostly does).
func delayReleaseAt(now time.Time, d time.Duration, last time.Time) time.Time {
	t := now.Add(d)
	if t.Before(last) {
		return last
	}
	return t
}
