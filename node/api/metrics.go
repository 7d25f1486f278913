package api

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stratanet/strata/swarm"
)

// The metrics of one server, in a registry of its own: several nodes in
// one process (tests, testnets) must not share counters, and the global
// registry would make a second server's registration fail.
//
// Two kinds: what the HTTP layer observes itself (requests by status,
// tokens, TTFT and per-token latency as clients see them), and what the
// node knows (hop failures, replays, queue, KV, epoch, peers, leader),
// read from the Backend at scrape time by a collector, so that nothing is
// copied between scrapes and the figures are the node's own.

// metricsNamespace prefixes every metric.
const metricsNamespace = "strata"

// Buckets: TTFT spans a warm single-hop prefill (ms) to a replay after a
// repair wait (tens of s); a token's latency spans a loopback hop (sub-ms)
// to a stalled step.
var (
	ttftBuckets  = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	tokenBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5}
)

type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec   // endpoint, code
	tokens       *prometheus.CounterVec   // kind: prompt, completion
	ttft         *prometheus.HistogramVec // endpoint
	perToken     *prometheus.HistogramVec // endpoint
	inFlight     prometheus.Gauge
	streamErrors *prometheus.CounterVec // code
	connsRefused prometheus.Counter

	leader *leaderWatch
}

func newMetrics(b Backend) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), leader: &leaderWatch{}}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "requests_total", Help: "HTTP requests by endpoint and status code (499: the client went away)."},
		[]string{"endpoint", "code"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "tokens_total", Help: "Tokens of finished API generations: prompt tokens read and completion tokens sent."},
		[]string{"kind"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "time_to_first_token_seconds", Help: "From the decoded request to the first generated token.", Buckets: ttftBuckets},
		[]string{"endpoint"})
	m.perToken = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "token_latency_seconds", Help: "Time between consecutive generated tokens of a request.", Buckets: tokenBuckets},
		[]string{"endpoint"})
	m.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "generations_in_flight", Help: "API generations running on this entry."})
	m.streamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "stream_errors_total", Help: "Streams that had started and ended with an error event, by error code."},
		[]string{"code"})
	m.connsRefused = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Subsystem: "api",
		Name: "connections_refused_total", Help: "Connections closed at accept: over the server's or one address's connection limit."})
	m.reg.MustRegister(m.requests, m.tokens, m.ttft, m.perToken, m.inFlight, m.streamErrors, m.connsRefused,
		&nodeCollector{b: b, leader: m.leader},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// leaderWatch counts the leader changes this node saw. Consensus has no
// leader-change feed, so the server polls Leader(); changes faster than
// the poll are undercounted, which for a counter meant to show churn is
// enough.
type leaderWatch struct {
	mu      sync.Mutex
	last    peer.ID
	known   bool
	changes uint64
}

func (l *leaderWatch) observe(id peer.ID, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		return // an election in progress is not a change until it ends
	}
	if l.known && id != l.last {
		l.changes++
	}
	l.last, l.known = id, true
}

func (l *leaderWatch) count() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changes
}

// run polls b's leader every interval until ctx ends.
func (l *leaderWatch) run(ctx context.Context, b Backend, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if snap := b.Swarm(); !snap.Static {
			l.observe(snap.Leader, snap.Leader != "")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
}

var (
	descGenerations  = desc("node_generations_total", "Generations this node started as an entry (API and in-process).")
	descGenFailed    = desc("node_generations_failed_total", "Entry generations that ended in an error.")
	descNodeTokens   = desc("node_tokens_total", "Tokens the entry delivered to callers.")
	descHopFailures  = desc("hop_failures_total", "Hop failures the entry noticed (errors, dead peers, timeouts).")
	descReplays      = desc("replays_total", "Hop failures the entry recovered from by replaying on a new path.")
	descReplayMax    = desc("replay_latency_max_seconds", "Largest time from noticing a hop failure to the next token.")
	descSteps        = desc("stage_steps_total", "Steps run on this node's layers.")
	descBatches      = desc("stage_batches_total", "Engine batches run on this node's layers.")
	descBatched      = desc("stage_batched_steps_total", "Steps that shared an engine batch with others.")
	descRejected     = desc("stage_rejected_total", "Steps answered with an error.")
	descBadFrames    = desc("bad_frames_total", "Activation frames that did not decode.")
	descSessions     = desc("stage_sessions", "Sessions open on this node's layers.")
	descQueue        = desc("queue_depth", "Sessions waiting for KV memory on this node.")
	descFreeKV       = desc("kv_free_tokens", "KV cache left on this node, in tokens (-1: no layers loaded).")
	descLayerLatency = desc("layer_latency_seconds", "EWMA of one layer's decode step on this node.")
	descPrefixHits   = desc("prefix_hits_total", "Sessions this node's stages resumed from cached prefixes.")
	descPrefixTokens = desc("prefix_reused_tokens_total", "Positions resumed from cached prefixes instead of recomputed.")
	descPrefixEvict  = desc("prefix_evictions_total", "Cached prefixes evicted to make room for sessions.")
	descPrefixBytes  = desc("prefix_cache_bytes", "Memory the prefix cache holds (yielded to sessions on demand).")
	descHeld         = desc("layers_held", "Layers this node has loaded.")
	descEpoch        = desc("epoch", "Epoch of the committed layer map this node routes on.")
	descPending      = desc("pending_epoch", "Epoch of the map in warmup (0: none).")
	descMembers      = desc("members", "Members of the swarm in the replicated state.")
	descPeers        = desc("peers", "Rows of the peer table by liveness.", "liveness")
	descLeader       = desc("is_leader", "1 when this node leads consensus.")
	descLeaderChg    = desc("leader_changes_total", "Leader changes this node observed.")
	descEntryQueue   = desc("entry_queue_length", "Requests waiting in this entry's admission queue for a path with KV room.")
	descEntryOldest  = desc("entry_queue_oldest_seconds", "How long the oldest request in the entry's queue has waited.")
	descStolen       = desc("entry_stolen_total", "Requests this entry took from a loaded peer's queue and drove (work stealing).")
	descEntryHeld    = desc("entry_fair_held_total", "Requests this entry held back for an older request queued at a peer entry (fair admission).")
	descStolenFrom   = desc("entry_stolen_from_total", "Requests peers took from this entry's queue (work stealing).")
	descEntryQueued  = desc("entry_queued_total", "Requests that waited in the entry's queue.")
	descEntryRefused = desc("entry_queue_refused_total", "Requests refused by the entry's queue (deadline passed or queue full).")
	descQueueWait    = desc("entry_queue_wait_seconds", "Time admitted requests waited in the entry's queue.")
	descPlugin       = desc("scheduler_plugin_seconds", "Time one scheduler plugin took in one route, by profile, plugin and kind (filter, scorer, picker).", "profile", "plugin", "kind")
	descChecks       = desc("verify_checks_total", "Spot checks this node's entry ran, by result: verified, inconclusive, mismatch (outputs differed), unresolved (no third holder settled a mismatch).", "result")
	descFaults       = desc("verify_faults_reported_total", "Faults this node's entry proved to the leader with signed evidence.")
	descUnchecked    = desc("verify_unchecked_total", "Token boundaries this node's entry drew for a spot check whose path had no hop that other holders could check (the placement left them unchecked).")
	descChecked      = desc("verify_steps_checked_total", "Positions covered by this entry's conclusive spot checks (agreeing or not): the steps verified.")
	descFirstMiss    = desc("verify_first_mismatch_timestamp_seconds", "When this entry's spot checks first found different outputs (Unix seconds; 0: never).")
	descVerifyRate   = desc("verify_rate", "Share of token boundaries this entry spot-checks now.")
	descTolChecks    = desc("verify_tolerance_checks_total", "Conclusive spot checks of last hops on engines that are not bit-reproducible, by their logits, by result: agreed, mismatch (beyond the tolerance).", "result")
	descTolDelta     = desc("verify_tolerance_max_agreeing_delta", "Largest relative logit difference (max |delta| / max |logit|) of a tolerance check that agreed.")
	descUploaded     = desc("upload_bytes_total", "Bytes of model chunks this node sent to peers fetching from it.")
	descUploadLimit  = desc("upload_limit_bytes_per_second", "Upload limit in force now: the adaptive limit while serving, else --upload-rate (0: none).")
	descUploadProbes = desc("upload_probes_total", "Short upload pauses the adaptive limit took to time idle steps.")
)

// nodeCollector reads the node at scrape time.
type nodeCollector struct {
	b      Backend
	leader *leaderWatch
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGenerations, descGenFailed, descNodeTokens, descHopFailures, descReplays,
		descReplayMax, descSteps, descBatches, descBatched, descRejected, descBadFrames, descSessions, descQueue,
		descFreeKV, descLayerLatency, descPrefixHits, descPrefixTokens, descPrefixEvict, descPrefixBytes, descHeld, descEpoch, descPending, descMembers, descPeers, descLeader, descLeaderChg,
		descEntryQueue, descEntryOldest, descEntryQueued, descStolen, descStolenFrom, descEntryHeld, descEntryRefused, descQueueWait, descPlugin,
		descChecks, descUnchecked, descFaults, descChecked, descFirstMiss, descVerifyRate, descTolChecks, descTolDelta, descUploaded, descUploadLimit, descUploadProbes} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.b.Metrics()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descGenerations, m.Requests)
	counter(descGenFailed, m.Failed)
	counter(descNodeTokens, m.Tokens)
	counter(descHopFailures, m.HopFailures)
	counter(descReplays, m.Replays)
	for _, r := range []struct {
		result string
		n      uint64
	}{{"verified", m.Verify.Verified}, {"inconclusive", m.Verify.Inconclusive}, {"mismatch", m.Verify.Mismatches},
		{"unresolved", m.Verify.Unresolved}} {
		ch <- prometheus.MustNewConstMetric(descChecks, prometheus.CounterValue, float64(r.n), r.result)
	}
	counter(descUnchecked, m.Verify.Unchecked)
	counter(descFaults, m.Verify.Reported)
	counter(descChecked, m.Verify.Checked)
	first := 0.0
	if !m.Verify.FirstMismatch.IsZero() {
		first = float64(m.Verify.FirstMismatch.UnixNano()) / 1e9
	}
	gauge(descFirstMiss, first)
	gauge(descVerifyRate, m.Verify.Rate)
	ch <- prometheus.MustNewConstMetric(descTolChecks, prometheus.CounterValue, float64(m.Verify.Tolerance-m.Verify.ToleranceMismatches), "agreed")
	ch <- prometheus.MustNewConstMetric(descTolChecks, prometheus.CounterValue, float64(m.Verify.ToleranceMismatches), "mismatch")
	gauge(descTolDelta, m.Verify.MaxAgreeingDelta)
	gauge(descReplayMax, m.MaxReplayLatency.Seconds())
	counter(descSteps, m.Steps)
	counter(descBatches, m.Batches)
	counter(descBatched, m.BatchedSteps)
	counter(descRejected, m.Rejected)
	counter(descBadFrames, m.BadFrames)
	gauge(descSessions, float64(m.Sessions))
	gauge(descQueue, float64(m.Queue))
	gauge(descFreeKV, float64(m.FreeKV))
	gauge(descLayerLatency, m.LayerLatency.Seconds())
	counter(descPrefixHits, m.PrefixHits)
	counter(descPrefixTokens, m.PrefixTokens)
	counter(descPrefixEvict, m.PrefixEvictions)
	gauge(descPrefixBytes, float64(m.PrefixBytes))
	gauge(descEntryQueue, float64(m.EntryQueue))
	gauge(descEntryOldest, m.EntryQueueOldest.Seconds())
	counter(descEntryQueued, m.EntryQueued)
	counter(descStolen, m.Stolen)
	counter(descStolenFrom, m.StolenFrom)
	counter(descEntryHeld, m.EntryHeld)
	counter(descEntryRefused, m.EntryRefused)
	counter(descUploaded, uint64(max(m.Uploaded, 0)))
	gauge(descUploadLimit, float64(m.UploadLimit))
	counter(descUploadProbes, m.UploadProbes)
	buckets := make(map[float64]uint64, len(m.QueueWait.Bounds))
	for i, b := range m.QueueWait.Bounds {
		buckets[b] = m.QueueWait.Counts[i]
	}
	ch <- prometheus.MustNewConstHistogram(descQueueWait, m.QueueWait.Count, m.QueueWait.Sum.Seconds(), buckets)
	for _, h := range m.SchedulerPlugins {
		b := make(map[float64]uint64, len(h.Bounds))
		for i, x := range h.Bounds {
			b[x] = h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(descPlugin, h.Count, h.Sum.Seconds(), b, h.Profile, h.Plugin, h.Kind)
	}
	gauge(descEpoch, float64(c.b.Committed().Epoch))

	var pending, members float64
	leader := 0.0
	snap := c.b.Swarm()
	gauge(descHeld, float64(snap.Held.Len()))
	if !snap.Static {
		if snap.HasPending {
			pending = float64(snap.Pending.Map.Epoch)
		}
		members = float64(len(snap.Members))
		if snap.IsLeader {
			leader = 1
		}
		c.leader.observe(snap.Leader, snap.Leader != "")
	}
	gauge(descPending, pending)
	gauge(descMembers, members)
	gauge(descLeader, leader)
	counter(descLeaderChg, c.leader.count())

	by := map[swarm.Liveness]int{swarm.Hint: 0, swarm.Alive: 0, swarm.Suspect: 0, swarm.Dead: 0}
	for _, p := range snap.Peers {
		by[p.Liveness]++
	}
	for l, n := range by {
		gauge(descPeers, float64(n), l.String())
	}
}

// observe records one finished API generation.
func (m *metrics) observeTokens(prompt, completion int) {
	m.tokens.WithLabelValues("prompt").Add(float64(prompt))
	m.tokens.WithLabelValues("completion").Add(float64(completion))
}

func (m *metrics) request(endpoint string, code int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
}
