package weights

import (
	"math"
	"math/bits"
	"time"

	"github.com/stratanet/strata/internal/stats"
)

// uploadParams tune the adaptive upload limit (uploadControl).
type uploadParams struct {
	// Floor is the lowest limit while serving, in bytes/s, so that
	// fetching peers still progress; Start is the limit when serving
	// begins with nothing learnt yet.
	Floor, Start float64
	// Raise is the bytes/s added per second of steps within Target;
	// Cut multiplies the limit on a decision above it.
	Raise, Cut float64
	// Target is the step time allowed, as a multiple of the idle
	// baseline.
	Target float64
	// Busy: the node serves while sessions are open or a step ran within
	// Busy.
	Busy time.Duration
	// MinSteps is the steps with uploads running that one decision
	// takes (their median is judged).
	MinSteps int
	// Alpha is the weight of one idle step in its baseline's EWMA.
	Alpha float64
	// Stale is the age past which a baseline is not trusted: steps
	// judged against none pause uploads to measure one again (a probe),
	// at most ProbeMax long and at most once per ProbeGap.
	Stale, ProbeMax, ProbeGap time.Duration
}

func defaultUploadParams() uploadParams {
	return uploadParams{Floor: 1e6, Start: 4e6, Raise: 1e6, Cut: 0.5, Target: 1.10, Busy: time.Second,
		MinSteps: 5, Alpha: 0.2, Stale: 10 * time.Second, ProbeMax: 600 * time.Millisecond, ProbeGap: 5 * time.Second}
}

// uploadDecision is what the chunk servers are told.
type uploadDecision struct {
	Limit int64 // bytes/s; 0: no limit
	Pause bool  // hold uploads (a probe of the idle step time)
}

// stepBaseline is the EWMA of the time per layer of steps with no upload
// running, for one size class of batch.
type stepBaseline struct {
	perLayer float64 // seconds
	at       time.Time
}

type stepSample struct {
	perLayer time.Duration
	tokens   int
}

// uploadControl is the adaptive upload limit: while the node serves, it
// compares the time per layer of its engine batches while uploads run
// with a baseline of batches while none ran, and sets the upload limit
// AIMD-style: cut by Cut when the median is above Target times the
// baseline, raised by Raise per second otherwise (and only while
// fetchers use at least half the limit, so that an idle limit does not
// grow without bound). When the node serves nothing there is no limit
// but the operator's hard cap.
//
// It is pure: the caller feeds batches (observe) and, every tick, the
// bytes uploaded so far and the sessions open; times come from the
// caller's clock. A tick in which no byte was uploaded makes its batches
// idle samples; any other makes them loaded ones. Batches are classed by
// their tokens (log2), since a prefill's time per layer is not a decode
// step's.
type uploadControl struct {
	p       uploadParams
	hardCap float64 // bytes/s; 0: none

	base     map[int]*stepBaseline
	pending  []stepSample // since the last tick
	ratios   []float64    // loaded batches' time over their baseline, since the last decision
	unjudged int          // loaded batches with no fresh baseline, since the last decision
	lastStep time.Time
	lastSent int64

	serving     bool
	rate        float64 // the limit while serving, bytes/s
	decidedAt   time.Time
	sentAt      int64 // bytes uploaded at decidedAt
	probeUntil  time.Time
	probeAt     time.Time
	probes      uint64
	lastDecided uploadDecision
}

// maxPending bounds the batches kept between ticks.
const maxPending = 4096

func newUploadControl(p uploadParams, hardCap int64) *uploadControl {
	c := &uploadControl{p: p, hardCap: float64(max(hardCap, 0)), base: map[int]*stepBaseline{}, rate: p.Start}
	c.rate = c.clamp(c.rate)
	return c
}

// sizeClass is a batch's class: its tokens, log2.
func sizeClass(tokens int) int { return bits.Len(uint(max(tokens, 1))) }

// observe records one engine batch: its time per layer and the tokens it
// ran (all steps together).
func (c *uploadControl) observe(now time.Time, perLayer time.Duration, tokens int) {
	c.lastStep = now
	if len(c.pending) < maxPending && perLayer > 0 {
		c.pending = append(c.pending, stepSample{perLayer, tokens})
	}
}

func (c *uploadControl) clamp(r float64) float64 {
	r = max(r, c.p.Floor)
	if c.hardCap > 0 {
		r = min(r, c.hardCap)
	}
	return r
}

func (c *uploadControl) limit() int64 {
	if c.rate >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(math.Round(c.rate))
}

// tick takes the bytes uploaded so far (a counter) and the sessions open,
// and returns the decision in force until the next tick.
func (c *uploadControl) tick(now time.Time, sent int64, sessions int) uploadDecision {
	d := c.decide(now, sent, sessions)
	c.lastDecided = d
	return d
}

func (c *uploadControl) decide(now time.Time, sent int64, sessions int) uploadDecision {
	uploaded := sent != c.lastSent
	c.lastSent = sent
	samples := c.pending
	c.pending = c.pending[:0]
	for _, s := range samples {
		k := sizeClass(s.tokens)
		b := c.base[k]
		switch {
		case !uploaded && b == nil:
			c.base[k] = &stepBaseline{perLayer: s.perLayer.Seconds(), at: now}
		case !uploaded:
			b.perLayer += c.p.Alpha * (s.perLayer.Seconds() - b.perLayer)
			b.at = now
		case b != nil && now.Sub(b.at) <= c.p.Stale && b.perLayer > 0:
			c.ratios = append(c.ratios, s.perLayer.Seconds()/b.perLayer)
		default:
			c.unjudged++
		}
	}
	if len(c.ratios) > maxPending {
		c.ratios = c.ratios[len(c.ratios)-maxPending:]
	}

	serving := sessions > 0 || (!c.lastStep.IsZero() && now.Sub(c.lastStep) < c.p.Busy)
	if !serving {
		c.serving = false
		c.probeUntil = time.Time{}
		c.restart(now, sent)
		return uploadDecision{Limit: int64(c.hardCap)}
	}
	if !c.serving {
		// This tick's batches count: only the window starts now.
		c.serving = true
		c.decidedAt, c.sentAt = now, sent
	}
	if !c.probeUntil.IsZero() {
		// A probe ends once a tick saw idle batches, or at ProbeMax.
		if (!uploaded && len(samples) > 0) || !now.Before(c.probeUntil) {
			c.probeUntil = time.Time{}
			c.restart(now, sent)
		} else {
			return uploadDecision{Limit: c.limit(), Pause: true}
		}
	}
	if c.unjudged >= c.p.MinSteps && (c.probeAt.IsZero() || now.Sub(c.probeAt) >= c.p.ProbeGap) {
		c.probeAt, c.probeUntil = now, now.Add(c.p.ProbeMax)
		c.probes++
		return uploadDecision{Limit: c.limit(), Pause: true}
	}
	if len(c.ratios) >= c.p.MinSteps {
		med := stats.Median(c.ratios)
		took := now.Sub(c.decidedAt).Seconds()
		if med > c.p.Target {
			c.rate = c.clamp(c.rate * c.p.Cut)
		} else if took > 0 && float64(sent-c.sentAt)/took >= c.rate/2 {
			c.rate = c.clamp(c.rate + c.p.Raise*took)
		}
		c.restart(now, sent)
	}
	return uploadDecision{Limit: c.limit()}
}

// restart begins a new decision window.
func (c *uploadControl) restart(now time.Time, sent int64) {
	c.decidedAt, c.sentAt = now, sent
	c.ratios, c.unjudged = c.ratios[:0], 0
}
