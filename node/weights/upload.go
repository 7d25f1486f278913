package weights

import (
	"context"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm/chunks"
)

// uploadEvery is how often the adaptive upload limit decides.
const uploadEvery = 200 * time.Millisecond

// Governor runs the adaptive upload limit (uploadControl) on the
// node's clock: the scheduler reports each engine batch, and every tick
// the governor sums the bytes the chunk servers sent, asks the
// controller, and sets the servers' limit and pause. The hard cap
// (node.WithUploadRate) is the controller's ceiling.
type Governor struct {
	clock    clockwork.Clock
	every    time.Duration
	servers  func() []*chunks.Server // those serving now (the file's, a slice's)
	sessions func() int              // sessions open on this node's layers
	log      *zap.Logger

	mu   sync.Mutex
	off  bool             // see SetOff
	srvs []*chunks.Server // as of the last tick
	ctl  *uploadControl
	dec  uploadDecision // the last decision, for metrics
}

// NewGovernor is the adaptive upload limit of the chunk servers that
// servers lists (those serving now), under hardCap bytes/s (0: none),
// deciding on clock; sessions counts the sessions open on this node's
// layers.
func NewGovernor(clock clockwork.Clock, hardCap int64, servers func() []*chunks.Server, sessions func() int, log *zap.Logger) *Governor {
	return &Governor{clock: clock, every: uploadEvery, servers: servers, sessions: sessions, log: log,
		ctl: newUploadControl(defaultUploadParams(), hardCap), dec: uploadDecision{Limit: max(hardCap, 0)}}
}

// Batch records an engine batch of the scheduler's: its wall time, the
// layers it ran and its tokens. Called from the scheduler's goroutine.
func (g *Governor) Batch(elapsed time.Duration, layers, tokens int) {
	if layers <= 0 {
		return
	}
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.off {
		return
	}
	g.ctl.observe(now, elapsed/time.Duration(layers), tokens)
	if !g.ctl.serving {
		// Serving begins: the limit applies from this batch on, not from
		// the next tick (uploads would run unlimited meanwhile). The
		// servers are the last tick's.
		g.applyLocked(g.ctl.tick(now, sentBy(g.srvs), g.sessions()))
	}
}

// Run decides every tick until ctx ends, then lifts any pause (the
// servers are closing anyway, but a pause must not outlive the governor).
func (g *Governor) Run(ctx context.Context) {
	t := g.clock.NewTicker(g.every)
	defer t.Stop()
	defer func() {
		for _, s := range g.servers() {
			s.SetPaused(false)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
			g.tick()
		}
	}
}

func (g *Governor) tick() {
	// The server list and the counters are read before g.mu: the list
	// takes the fetch state's lock, which a slice copy holds for long,
	// and the scheduler's goroutine takes g.mu.
	srvs := g.servers()
	sent := sentBy(srvs)
	sessions := g.sessions()
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.srvs = srvs
	if !g.off {
		g.applyLocked(g.ctl.tick(now, sent, sessions))
	}
}

func sentBy(srvs []*chunks.Server) int64 {
	var n int64
	for _, s := range srvs {
		n += s.Sent()
	}
	return n
}

// applyLocked sets the servers' limit and pause; g.mu held.
func (g *Governor) applyLocked(d uploadDecision) {
	if d.Limit != g.dec.Limit {
		g.log.Debug("upload limit", zap.Int64("bytes_per_s", d.Limit))
	}
	g.dec = d
	for _, s := range g.srvs {
		s.SetUploadRate(d.Limit)
		s.SetPaused(d.Pause)
	}
}

// SetOff turns the governor off (it leaves the servers to whoever sets
// them, and hears nothing) or on again; once it returns, no decision of
// the governor's is applied until it is on, and then its last one is at
// once. Benchmarks compare fixed limits on the same node with it.
func (g *Governor) SetOff(off bool) {
	srvs := g.servers()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.off = off
	if !off {
		g.srvs = srvs
		g.applyLocked(g.dec)
	}
}

// State is the limit in force (0: none), whether uploads are paused, and
// the probes so far.
func (g *Governor) State() (limit int64, paused bool, probes uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dec.Limit, g.dec.Pause, g.ctl.probes
}
