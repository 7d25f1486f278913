package sim

import (
	"math"
	"math/rand/v2"
)

// Churn: machines' processes stop and start (drawn sessions and scripted
// changes), and each policy's control plane learns of it its own way.

// scheduleChurn draws every machine's sessions and the scripted changes.
func (w *world) scheduleChurn() {
	ch := w.spec.Churn
	end := w.spec.StartS + w.spec.Duration
	r := rand.New(rand.NewPCG(w.spec.Seed, 0xc4))
	for i, n := range w.spec.Nodes {
		if n.JoinAt > 0 {
			w.s.schedule(&event{at: n.JoinAt, kind: evCallback, fn: func() { w.nodeUp(i) }})
		}
		if ch.MedianSessionS <= 0 {
			continue
		}
		t := max(n.JoinAt, ch.StartS)
		sigma := ch.Sigma
		if sigma <= 0 {
			sigma = 1
		}
		first := true
		for t < end {
			up := ch.MedianSessionS * math.Exp(sigma*r.NormFloat64())
			if first && n.JoinAt <= 0 {
				// Machines up at the start are mid-session: the residual
				// of a session seen at a random time.
				up *= r.Float64()
			}
			first = false
			t += up
			if t >= end {
				break
			}
			w.s.schedule(&event{at: t, kind: evCallback, fn: func() { w.nodeDown(i) }})
			down := ch.MeanDowntimeS * r.ExpFloat64()
			if ch.MeanDowntimeS <= 0 {
				down = 1800 * r.ExpFloat64()
			}
			t += down
			if t < end {
				w.s.schedule(&event{at: t, kind: evCallback, fn: func() { w.nodeUp(i) }})
			}
		}
	}
	for _, sc := range ch.Script {
		if i, ok := w.m.idx[sc.Kill]; ok {
			w.s.schedule(&event{at: sc.AtS, kind: evCallback, fn: func() { w.nodeDown(i) }})
		}
		if i, ok := w.m.idx[sc.Join]; ok {
			w.s.schedule(&event{at: sc.AtS, kind: evCallback, fn: func() { w.nodeUp(i) }})
		}
	}
}

// nodeDown: the process dies. Everything on it is lost now; the control
// plane learns it after its own detection delay.
func (w *world) nodeDown(i int) {
	if !w.ro.up[i] {
		return
	}
	w.ro.up[i] = false
	w.res.Deaths++
	wasCovered := w.ro.covered
	w.ro.loading[i]++
	w.ro.stopServing(i)
	w.s.kill(i, causeDied) // sessions it still held after leaving the map
	if wasCovered && !w.ro.covered {
		w.ro.lostAt = append(w.ro.lostAt, w.s.now)
	} else if wasCovered {
		w.res.Recoveries = append(w.res.Recoveries, 0)
	}
	var detect float64
	switch w.policy {
	case "strata":
		if w.lead.self == i {
			w.lead.leaderDied()
		}
		w.s.schedule(&event{at: w.s.now + w.spec.Timing.DeadAfterS, kind: evCallback, fn: func() { w.lead.peerDead(i) }})
		return
	case "petals":
		detect = 240 // DHT expiry
	case "parallax":
		detect = 30 + 10*w.rand.Float64() // eviction after 30 s of silence, 10 s heartbeats
	}
	w.s.schedule(&event{at: w.s.now + detect, kind: evCallback, fn: func() { w.detected(i) }})
}

func (w *world) detected(i int) {
	if w.ro.up[i] || !w.ro.known[i] {
		return // back already, or already removed
	}
	w.ro.known[i] = false
	switch w.policy {
	case "petals":
		// The DHT forgets it; servers' rebalance checks see the gap.
		w.ro.petalsRebalance()
	case "parallax":
		w.ro.parallaxRebootstrap()
	}
}

// nodeUp: the process (re)starts and announces itself.
func (w *world) nodeUp(i int) {
	if w.ro.up[i] {
		return
	}
	w.ro.up[i] = true
	w.res.Joins++
	switch w.policy {
	case "strata":
		w.s.schedule(&event{at: w.s.now + w.spec.Timing.HeartbeatS, kind: evCallback, fn: func() { w.lead.strataUp(i) }})
	case "petals":
		delay := 10 * w.rand.Float64() // Petals joiners wait 0–10 s
		w.s.schedule(&event{at: w.s.now + delay, kind: evCallback, fn: func() { w.ro.petalsJoin(i) }})
	case "parallax":
		// A joiner waits in standby for the next allocation.
		w.ro.known[i] = true
	}
}
