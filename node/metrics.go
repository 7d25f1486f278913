package node

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Metrics are the node's counters since start, for logs, tests and the
// metrics endpoint.
type Metrics struct {
	// Entry role.
	Requests    uint64 // generations started
	Failed      uint64 // generations that ended in an error
	Tokens      uint64 // tokens delivered to callers
	Replays     uint64 // hop failures the entry recovered from on a new path
	HopFailures uint64 // failures noticed (errors, dead peers, timeouts)
	// ReplayLatency is the last replay's time from noticing the failure to
	// the next token; MaxReplayLatency the largest.
	ReplayLatency    time.Duration
	MaxReplayLatency time.Duration
	// The entry's admission queue: requests waiting now and how long the
	// oldest has; requests that had to wait, and that were refused
	// (deadline passed or queue full); the waits of admitted requests.
	EntryQueue       int
	EntryQueueOldest time.Duration
	EntryQueued      uint64
	EntryRefused     uint64
	QueueWait        WaitHistogram
	// Work stealing (steal.go): requests this entry took from a loaded
	// peer's queue and drove, and requests peers took from its queue.
	Stolen, StolenFrom uint64
	// EntryHeld counts requests that fair admission held back at least
	// once for an older request at a peer entry (fair.go).
	EntryHeld uint64
	// SchedulerPlugins is each scheduler plugin's time per route, by
	// profile, plugin and kind (filter, scorer, picker).
	SchedulerPlugins []PluginHistogram
	// Verify counts the entry's spot checks (verify.go).
	Verify VerifyStats

	// Stage service.
	Steps        uint64 // steps run on this node's layers
	Batches      uint64 // engine batches
	BatchedSteps uint64 // steps that shared a batch with others
	Rejected     uint64 // steps answered with an error
	Waited       uint64 // sessions that waited for KV memory before they ran
	BadFrames    uint64 // frames that did not decode (the stream was reset)
	Sessions     int    // sessions open on this node's layers
	Queue        int    // sessions waiting for KV memory
	FreeKV       int64  // KV tokens left (-1: no layers)
	LayerLatency time.Duration

	// Prefix cache.
	PrefixHits      uint64 // sessions resumed from cached prefixes
	PrefixTokens    uint64 // positions those sessions did not recompute
	PrefixEvictions uint64 // cached prefixes evicted for memory
	PrefixBytes     int64  // memory the cache holds (free for sessions on demand)

	// Uploads to peers fetching the model's chunks: bytes sent, the
	// limit in force now (bytes/s; 0: none) and the adaptive limit's
	// probes (short pauses to time idle steps; WithAdaptiveUpload).
	Uploaded     int64
	UploadLimit  int64
	UploadProbes uint64
}

type counters struct {
	requests, failed, tokens, replays, hopFailures, badFrames atomic.Uint64
	replayLatency, maxReplayLatency                           atomic.Int64
	stolen, stolenFrom                                        atomic.Uint64

	mu      sync.Mutex
	badFrom map[peer.ID]uint64
}

func (c *counters) replayed(d time.Duration) {
	c.replayLatency.Store(int64(d))
	for {
		old := c.maxReplayLatency.Load()
		if int64(d) <= old || c.maxReplayLatency.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// badFrame counts a bad frame from p (bounded: peers past 4096 share a
// counter) and returns p's count.
func (c *counters) badFrame(p peer.ID) uint64 {
	c.badFrames.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.badFrom == nil {
		c.badFrom = map[peer.ID]uint64{}
	}
	if _, ok := c.badFrom[p]; !ok && len(c.badFrom) >= 4096 {
		p = ""
	}
	c.badFrom[p]++
	return c.badFrom[p]
}

// Metrics returns the node's counters.
func (n *Node) Metrics() Metrics {
	c := &n.counters
	m := Metrics{Requests: c.requests.Load(), Failed: c.failed.Load(), Tokens: c.tokens.Load(),
		Replays: c.replays.Load(), HopFailures: c.hopFailures.Load(), BadFrames: c.badFrames.Load(),
		ReplayLatency: time.Duration(c.replayLatency.Load()), MaxReplayLatency: time.Duration(c.maxReplayLatency.Load()),
		Verify: n.entry.verifyStats(), Stolen: c.stolen.Load(), StolenFrom: c.stolenFrom.Load()}
	m.EntryQueue, m.EntryQueueOldest = n.entry.adm.queued(n.cfg.clock.Now())
	m.EntryQueued, m.EntryRefused = n.entry.adm.queuedN.Load(), n.entry.adm.refusedN.Load()
	m.QueueWait = n.entry.adm.waits.snapshot()
	m.EntryHeld = n.entry.adm.heldN.Load()
	if n.paths != nil && n.paths.timer != nil {
		m.SchedulerPlugins = n.paths.timer.snapshot()
	}
	if st := n.svc.sched.status.Load(); st != nil {
		m.Steps, m.Batches, m.BatchedSteps, m.Rejected, m.Waited = st.Steps, st.Batches, st.BatchedSteps, st.Rejected, st.Waited
		m.Sessions, m.Queue, m.FreeKV, m.LayerLatency = st.Sessions, st.Queue, st.FreeKV, st.LayerLatency
		m.PrefixHits, m.PrefixTokens, m.PrefixEvictions, m.PrefixBytes = st.PrefixHits, st.PrefixTokens, st.PrefixEvictions, st.PrefixBytes
	}
	for _, s := range n.weights.Servers() {
		m.Uploaded += s.Sent()
	}
	if n.upload != nil {
		m.UploadLimit, _, m.UploadProbes = n.upload.State()
	} else {
		m.UploadLimit = n.cfg.uploadRate
	}
	return m
}

// badFramesFrom is how many undecodable frames peer p sent.
func (c *counters) badFramesFrom(p peer.ID) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.badFrom[p]
}
