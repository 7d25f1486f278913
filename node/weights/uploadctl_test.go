package weights

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm/chunks"
)

// ctlTick is one tick of the adaptive upload limit's controller: what
// happened since the last one, and the decision expected.
type ctlTick struct {
	dt       time.Duration // since the last tick (0: 200 ms)
	batches  int           // engine batches run, each per per layer
	per      time.Duration
	tokens   int   // per batch (0: 1, a decode step)
	bytes    int64 // uploaded since the last tick
	sessions int
	want     uploadDecision
}

func TestUploadControl(t *testing.T) {
	const ms = time.Millisecond
	p := defaultUploadParams() // Floor 1e6, Start 4e6, Raise 1e6/s, Cut 0.5, MinSteps 5
	on := func(limit int64) uploadDecision { return uploadDecision{Limit: limit} }
	probe := func(limit int64) uploadDecision { return uploadDecision{Limit: limit, Pause: true} }
	idle := ctlTick{batches: 5, per: ms, want: on(4e6)} // learns the baseline: 1 ms per layer
	cases := []struct {
		name    string
		hardCap int64
		ticks   []ctlTick
	}{
		{"nothing served: no limit", 0, []ctlTick{
			{want: on(0)},
			{bytes: 50e6, want: on(0)},
		}},
		{"nothing served: the hard cap", 30e6, []ctlTick{
			{bytes: 6e6, want: on(30e6)},
		}},
		{"slow steps while uploading: cut down to the floor", 0, []ctlTick{
			idle,
			{batches: 5, per: 1500 * time.Microsecond, bytes: 1e6, want: on(2e6)},
			{batches: 5, per: 1500 * time.Microsecond, bytes: 1e6, want: on(1e6)},
			{batches: 5, per: 1500 * time.Microsecond, bytes: 1e6, want: on(1e6)},
		}},
		{"a decision waits for MinSteps batches", 0, []ctlTick{
			idle,
			{batches: 3, per: 2 * ms, bytes: 1e6, want: on(4e6)},
			{batches: 2, per: 2 * ms, bytes: 1e6, want: on(2e6)},
		}},
		{"the median is judged, not one slow batch", 0, []ctlTick{
			idle,
			{batches: 4, per: ms, bytes: 1e6, want: on(4e6)},
			{batches: 1, per: 50 * ms, bytes: 1e6, want: on(4e6 + 1e6*0.4)},
		}},
		{"steps within target and the limit used: raised slowly", 0, []ctlTick{
			idle,
			{batches: 5, per: 1050 * time.Microsecond, bytes: 800e3, want: on(4e6 + 1e6*0.2)},
			{batches: 5, per: 1090 * time.Microsecond, bytes: 840e3, want: on(4e6 + 1e6*0.4)},
		}},
		{"raised no higher than the hard cap", 4.1e6, []ctlTick{
			{batches: 5, per: ms, want: on(4e6)},
			{batches: 5, per: ms, bytes: 800e3, want: on(4.1e6)},
			{batches: 5, per: ms, bytes: 820e3, want: on(4.1e6)},
		}},
		{"the limit unused: not raised", 0, []ctlTick{
			idle,
			{batches: 5, per: ms, bytes: 100e3, want: on(4e6)},
		}},
		{"no baseline: uploads pause until idle batches give one", 0, []ctlTick{
			{batches: 5, per: ms, bytes: 1e5, want: probe(4e6)},
			{batches: 1, per: ms, bytes: 1e4, want: probe(4e6)}, // a piece in flight at the pause
			{batches: 2, per: ms, want: on(4e6)},
			{batches: 5, per: 2 * ms, bytes: 1e5, want: on(2e6)},
		}},
		{"a probe ends at ProbeMax, and the next waits ProbeGap", 0, []ctlTick{
			{batches: 5, per: ms, bytes: 1e5, want: probe(4e6)},
			{batches: 5, per: ms, bytes: 1e4, want: probe(4e6)},
			{batches: 5, per: ms, bytes: 1e4, want: probe(4e6)},
			{batches: 5, per: ms, bytes: 1e4, want: on(4e6)},
			{batches: 5, per: ms, bytes: 1e5, want: on(4e6)},
			{dt: p.ProbeGap, batches: 5, per: ms, bytes: 1e5, want: probe(4e6)},
		}},
		{"a stale baseline is measured again", 0, []ctlTick{
			idle,
			{dt: p.Stale + ms, batches: 5, per: 3 * ms, bytes: 1e5, want: probe(4e6)},
			{batches: 30, per: 2 * ms, want: on(4e6)}, // the EWMA moves to 2 ms
			{batches: 5, per: 2 * ms, bytes: 1e5, want: on(4e6)},
		}},
		{"batches are judged against their size class", 0, []ctlTick{
			{batches: 5, per: ms, want: on(4e6)},
			{batches: 5, per: 20 * ms, tokens: 32, want: on(4e6)},
			{batches: 5, per: 21 * ms, tokens: 32, bytes: 1e5, want: on(4e6)},
			{batches: 5, per: 21 * ms, tokens: 1, bytes: 1e5, want: on(2e6)},
		}},
		{"serving ends: the hard cap; it resumes at the limit it left", 50e6, []ctlTick{
			idle,
			{batches: 5, per: 2 * ms, bytes: 1e6, want: on(2e6)},
			{dt: 900 * ms, bytes: 1e6, want: on(2e6)}, // a step within Busy
			{dt: 200 * ms, bytes: 1e6, want: on(50e6)},
			{dt: 5 * time.Second, sessions: 1, bytes: 1e6, want: on(2e6)}, // a session open
			{batches: 5, per: ms, bytes: 1e5, want: on(2e6)},              // demand below half the limit
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newUploadControl(p, tc.hardCap)
			now := time.Unix(1e6, 0)
			var sent int64
			for i, tk := range tc.ticks {
				if tk.dt == 0 {
					tk.dt = 200 * ms
				}
				now = now.Add(tk.dt)
				for range tk.batches {
					c.observe(now, tk.per, max(tk.tokens, 1))
				}
				sent += tk.bytes
				if got := c.tick(now, sent, tk.sessions); got != tk.want {
					t.Fatalf("tick %d: %+v, want %+v", i, got, tk.want)
				}
			}
		})
	}
}

// A limit past int64 is the largest int64, and a negative hard cap is
// none.
func TestUploadControlBounds(t *testing.T) {
	c := newUploadControl(defaultUploadParams(), -5)
	now := time.Unix(1e6, 0)
	if d := c.tick(now, 1e9, 0); d != (uploadDecision{}) {
		t.Fatalf("nothing served: %+v", d)
	}
	c.rate = 1e30
	c.observe(now, time.Millisecond, 1)
	if d := c.tick(now, 1e9, 1); d.Limit != math.MaxInt64 || d.Pause {
		t.Fatalf("huge limit: %+v", d)
	}
}

// The governor on a fake node clock: a batch starts the limit at once
// (not at the next tick); ticks lift it once nothing was served for Busy,
// and an open session alone sets it again. run returns when its context
// ends.
func TestUploadGovernorClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	var sessions atomic.Int64
	g := NewGovernor(clk, 0, func() []*chunks.Server { return nil }, func() int { return int(sessions.Load()) }, zap.NewNop())
	limit := func() int64 { l, _, _ := g.State(); return l }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	if l := limit(); l != 0 {
		t.Fatalf("limit %d before serving", l)
	}
	start := defaultUploadParams().Start
	g.Batch(8*time.Millisecond, 8, 1)
	if l := limit(); l != int64(start) {
		t.Fatalf("limit %d after a batch, want %v at once", l, start)
	}
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	if err := clk.BlockUntilContext(bctx, 1); err != nil { // the governor's ticker
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	waitFor(t, 30*time.Second, "no limit past Busy with nothing served", func() bool { return limit() == 0 })
	sessions.Store(1)
	waitFor(t, 30*time.Second, "a limit again with a session open", func() bool {
		clk.Advance(uploadEvery) // the next tick, if the last was taken
		return limit() == int64(start)
	})
}
