package routing

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/stratanet/strata/layers"
)

// device is what the cost model prices n on: its hardware (its own, else
// its fleet profile's, else def), its speed factor (0 when none was
// declared or measured) and its fleet profile, if it has one.
func device(n *NodeState, fleet *layers.Fleet, def layers.Hardware) (h layers.Hardware, speed float64, p layers.Profile, inFleet bool) {
	h, speed = n.Hardware, n.Speed
	if fleet != nil {
		if p, inFleet = fleet.Profile(n.ID); inFleet {
			if h.Validate() != nil {
				h = p.Node.Hardware
			}
			if !(speed > 0) {
				speed = p.Node.Speed
			}
		}
	}
	if h.Validate() != nil {
		h = def
	}
	if !(speed > 0) || speed > 1e6 {
		speed = 0
	}
	return h, speed, p, inFleet
}

// latencyRatio is a measured layer latency lat as a factor on the cost
// model's time m for the same step, and whether lat is a measurement.
func latencyRatio(lat, m float64) (float64, bool) {
	if !(lat > 0 && lat < maxSeconds) || !(m > 0) {
		return 0, false
	}
	return min(max(lat/m, 1e-3), 1e3), true
}

// calib is the factor a device name's measured nodes run at against the
// cost model: the median over the view's nodes of that name.
type calib struct {
	name string
	corr float64
}

// calibration prices a node that has not measured itself yet like the
// measured nodes of its device. Priced from its hardware alone, it looked
// far faster than its measured peers whenever the model was optimistic
// (always, on CPUs), and drew every route, detours through it included,
// until its first heartbeat with a latency. It is built on first use, at
// most once per route.
type calibration struct {
	v    *View
	done bool
	rows []calib // by name
}

func (c *calibration) reset(v *View) { c.v, c.done, c.rows = v, false, c.rows[:0] }

// corr is the median factor of the measured nodes named name. A nil
// calibration has none.
func (c *calibration) corr(r *Router, name string) (float64, bool) {
	if c == nil {
		return 0, false
	}
	if !c.done {
		c.done = true
		for i := range c.v.nodes {
			n := &c.v.nodes[i]
			if !(n.LayerLatency > 0) {
				continue
			}
			h, _, _, _ := device(n, r.fleet, r.cfg.DefaultHardware)
			a := min(max(n.ActiveSessions, 0), maxCount)
			if f, ok := latencyRatio(n.LayerLatency, r.dec(&h, max(a, 1))); ok {
				c.rows = append(c.rows, calib{h.Name, f})
			}
		}
		slices.SortFunc(c.rows, func(a, b calib) int {
			if a.name != b.name {
				return strings.Compare(a.name, b.name)
			}
			return cmp.Compare(a.corr, b.corr)
		})
		// Each name's run is replaced by one row holding its median.
		out := c.rows[:0]
		for i := 0; i < len(c.rows); {
			j := i
			for j < len(c.rows) && c.rows[j].name == c.rows[i].name {
				j++
			}
			k := i + (j-i)/2
			med := c.rows[k].corr
			if (j-i)%2 == 0 {
				med = (c.rows[k-1].corr + med) / 2
			}
			out = append(out, calib{c.rows[i].name, med})
			i = j
		}
		c.rows = out
	}
	i, ok := slices.BinarySearchFunc(c.rows, name, func(a calib, n string) int { return strings.Compare(a.name, n) })
	if !ok {
		return 0, false
	}
	return c.rows[i].corr, true
}

// estimate fills e for node n serving stage st; measured says whether
// the view holds a measured round trip of n.
func (r *Router) estimate(e *Estimate, n *NodeState, st layers.Stage, q *reqInfo, measured bool) {
	*e = Estimate{Node: n, Range: st.Range, Steps: int(q.steps)}
	h, speed, prof, inFleet := device(n, r.fleet, r.cfg.DefaultHardware)
	batchCap := r.maxBatch
	if inFleet {
		if b := prof.Batch(st.Len(), layers.EndsOf(st.Range, r.model.Layers)); b > 0 {
			batchCap = b
		}
	}
	e.Hardware = h
	a := min(max(n.ActiveSessions, 0), maxCount)
	qd := min(max(n.QueueDepth, 0), maxCount)
	e.Batch, e.MaxBatch = a+qd+1, batchCap

	// A measured layer latency calibrates the model: its ratio to the
	// modelled time at the batch it was measured at scales every modelled
	// time, so the load curve keeps the model's shape but the node's speed.
	// A node with neither a latency nor a speed of its own takes its
	// device's measured peers' ratio.
	corr := 1.0
	if f, ok := latencyRatio(n.LayerLatency, r.dec(&h, max(a, 1))); ok {
		corr, e.Measured = f, true
	} else if speed > 0 {
		corr = 1 / speed
	} else if f, ok := q.cal.corr(r, h.Name); ok {
		corr = f
	}
	// A prefix the node's cache holds is resumed, not recomputed: the
	// prefill is the rest of the prompt, at least one position (the
	// scheduler always computes the last). Without this every path
	// looked the same to a request whose prefix one of them holds, and
	// the seeded pick among near-best paths sent it elsewhere as often
	// as not (issue 32).
	if len(q.req.Prefix) > 0 && n.Prefixes != nil {
		e.Cached = min(n.Prefixes.Match(q.req.Prefix)*PrefixBlock, max(q.prompt-1, 0))
	}
	p := float64(max(q.prompt-e.Cached, 1))
	pre := max((r.weights(int(p))+p*r.kvTok)/h.MemBandwidth, p*q.fPre/(h.TFLOPS*1e12))
	sat := func(b int) float64 {
		if batchCap <= 0 || b <= batchCap {
			return 1
		}
		return float64(b) / float64(batchCap)
	}
	e.LayerTime = seconds(corr * (pre*sat(a+1) + q.decodes*r.share(&h, a+1, batchCap)))
	e.LoadedTime = seconds(corr * (pre*sat(e.Batch) + q.decodes*r.share(&h, e.Batch, batchCap)))
	head := max(r.headBytes/h.MemBandwidth, r.headFLOPs/(h.TFLOPS*1e12))
	e.HeadTime = seconds(corr * q.steps * head)

	lt := q.steps * r.cfg.HopOverhead / 2
	if h.NetBandwidth > 0 {
		lt += q.bytes / h.NetBandwidth
	}
	if n.Relayed {
		// A round trip measured to the node went through its relay and
		// already carries the detour, in its pair costs and in the
		// estimate of its unmeasured pairs: the fixed RelayDelay stands
		// in only when nothing was measured.
		if !measured {
			lt += q.steps * r.cfg.RelayDelay
		}
		bw := r.cfg.RelayBandwidth
		if b := n.RelayBandwidth; b > 0 && !math.IsInf(b, 0) {
			bw = b
		}
		lt += q.bytes / bw
	}
	e.LinkTime = seconds(lt)
	// Sessions waiting for KV memory (QueueDepth) are admitted first, in
	// order, whatever memory the node reports free: a new session there
	// waits for memory too (sim volunteer-1000: 685.1 → 746.2 goodput).
	e.KVShort = n.FreeKV >= 0 && n.FreeKV < q.req.Tokens() || n.QueueDepth > 0
	e.Stale = n.Updated.IsZero() || q.now.Sub(n.Updated) > q.stale
}

// seconds clamps a modelled time into [0, maxSeconds]; NaN counts as the
// worst.
func seconds(x float64) float64 {
	if !(x <= maxSeconds) {
		return maxSeconds
	}
	return max(x, 0)
}

// score runs the scorers over e. It returns the weighted total, its split
// by kind (the stale surcharge counted as load), and false when a scorer
// made the node unusable (NaN or +Inf).
//
// o, when not nil, is the route being observed (observe.go).
func (r *Router) score(req *Request, e *Estimate, o *scratch) (NodeCost, [kinds]NodeCost, bool) {
	var by [kinds]NodeCost
	for j, ws := range r.scorers {
		if ws.w == 0 {
			continue
		}
		var t0 time.Duration
		timed := false
		if o != nil {
			t0, timed = r.begin(o, len(r.filters)+j)
		}
		c := ws.s.Score(req, e)
		if timed {
			r.end(o, len(r.filters)+j, t0)
		}
		parts := [4]float64{c.Layer, c.Visit, c.Link, c.Last}
		for k, x := range parts {
			if math.IsNaN(x) || math.IsInf(x, 1) {
				return NodeCost{}, by, false
			}
			parts[k] = min(max(x, 0), maxSeconds) * ws.w
		}
		b := &by[ws.kind]
		b.Layer += parts[0]
		b.Visit += parts[1]
		b.Link += parts[2]
		b.Last += parts[3]
	}
	var tot NodeCost
	for _, b := range by {
		tot.Layer += b.Layer
		tot.Visit += b.Visit
		tot.Link += b.Link
		tot.Last += b.Last
	}
	if e.Stale && r.cfg.StalePenalty > 0 {
		s := r.cfg.StalePenalty
		by[kindLoad].Layer += s * tot.Layer
		by[kindLoad].Visit += s * tot.Visit
		by[kindLoad].Link += s * tot.Link
		by[kindLoad].Last += s * tot.Last
		tot.Layer, tot.Visit, tot.Link, tot.Last = tot.Layer*(1+s), tot.Visit*(1+s), tot.Link*(1+s), tot.Last*(1+s)
	}
	return tot, by, true
}

// scratch is one route's working memory, reused through the router's pool.
