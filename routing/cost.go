package routing

import (
	"math"
	"time"

	"github.com/stratanet/strata/layers"
)

// estimate fills e for node n serving stage st; measured says whether
// the view holds a measured round trip of n.
func (r *Router) estimate(e *Estimate, n *NodeState, st layers.Stage, q *reqInfo, measured bool) {
	*e = Estimate{Node: n, Range: st.Range, Steps: int(q.steps)}
	h := n.Hardware
	speed := n.Speed
	batchCap := r.maxBatch
	if r.fleet != nil {
		if p, ok := r.fleet.Profile(n.ID); ok {
			if h.Validate() != nil {
				h = p.Node.Hardware
			}
			if !(speed > 0) {
				speed = p.Node.Speed
			}
			if b := p.Batch(st.Len(), layers.EndsOf(st.Range, r.model.Layers)); b > 0 {
				batchCap = b
			}
		}
	}
	if h.Validate() != nil {
		h = r.cfg.DefaultHardware
	}
	if !(speed > 0) || speed > 1e6 {
		speed = 1
	}
	e.Hardware = h
	a := min(max(n.ActiveSessions, 0), maxCount)
	qd := min(max(n.QueueDepth, 0), maxCount)
	e.Batch, e.MaxBatch = a+qd+1, batchCap

	// A measured layer latency calibrates the model: its ratio to the
	// modelled time at the batch it was measured at scales every modelled
	// time, so the load curve keeps the model's shape but the node's speed.
	corr := 1 / speed
	if lat := n.LayerLatency; lat > 0 && lat < maxSeconds {
		if m := r.dec(&h, max(a, 1)); m > 0 {
			corr = min(max(lat/m, 1e-3), 1e3)
			e.Measured = true
		}
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
