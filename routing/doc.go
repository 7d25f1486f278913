// Package routing chooses the path a request takes through the swarm: a
// chain of hops (node, layers [from, to)) that covers the model's layers
// [0, L) exactly, picked from the committed layers.LayerMap and the entry's
// View of load and latency.
//
// It owns path selection and nothing else: the DP Router, the round-robin
// baseline (Parallax's production policy), herding avoidance, and the
// filters and scorers they use. It must not do I/O, start goroutines, read
// clocks or hold global mutable state: the caller passes the map, the view
// and the time in, and a seed for every random choice, so the same inputs
// always give the same path. Placement, liveness detection and the cost
// model itself belong to layers and swarm. Per-plugin timing goes through
// an Observer the caller injects (WithObserver), whose clock is the
// caller's; without one no clock is read.
//
// # Shape
//
// A route is filter → score → pick. Filters (LiveFilter, PhaseFilter,
// optionally KVFilter) drop nodes. The router then estimates each kept node
// (Estimate: its compute for this request at its current batch, the same
// with its queue, its link costs) and scorers turn estimates into costs,
// each times a weight in Config.Weights: LatencyScorer, LoadScorer,
// LocalityScorer, plus any added with WithScorer. The DP finds the cheapest
// chain; the pick spreads requests over the near-best ones.
//
// # Costs
//
// A path's cost estimates the whole request's time in seconds: the prefill
// plus one pass per output token. A node's compute comes from the layers
// cost model (the decode roofline, at batch = active sessions + 1), scaled
// by the node's measured per-layer latency EWMA when it reports one. A
// node that reports none, and declares no speed, is scaled by the median
// of its device name's measured nodes, so that a newcomer is not priced as
// faster than the same hardware already measured. Its
// load is the same with the queue in the batch as well; past its batch slots
// sessions take turns, so the time grows in proportion. A crossing between
// hops costs half a round trip per pass, the activations over each side's
// link, a fixed overhead, and the relay's bandwidth when a side is relayed
// (as measured, else Config.RelayBandwidth), plus Config.RelayDelay when no
// round trip through its relay was measured. The last hop pays the output head and both end hops pay the
// round trip to the entry. A node whose free KV cache cannot hold the
// session is charged Config.KVPenalty per pass; a node whose figures are
// older than Config.StaleAfter is charged Config.StalePenalty more, and
// still used. The activations on a crossing are charged at each side's
// link in turn, an upper bound (at most twice the slower side's time) that
// keeps the crossing separable.
//
// # The DP and its speed
//
// The state is (layer, node): layers [0, l] done, layer l on that node. A
// hop may leave a node at any layer of its range, so overlapping ranges
// give turning points for free. The round trip between two nodes is the
// only cost that depends on the pair, and taken literally it makes each
// layer boundary O(N²). Instead, an unmeasured pair is estimated as the
// mean round trip measured between the two nodes' regions (or
// Config.UnknownRTT) plus, for each node, how far its worst measured link
// exceeds that mean. The estimate separates: per boundary the DP keeps the
// cheapest exit per region and adds the region pair's mean. It is never
// below a measured pair, so the measured links are relaxed as explicit
// edges, exact corrections. A boundary costs O(holders + regions² +
// measured edges), and a view tells at most MaxRegions regions
// apart. Each route's working memory comes from a pool.
//
// # Herding
//
// Route multiplies each node's costs by a seeded factor in [1, 1+Slack]
// before the DP. The chosen path then costs at most (1+Slack) times the
// best, cheaper paths are likelier, and entries that route on the same
// stale view no longer all pick the same path. Paths returns k diverse
// paths for callers that want fallbacks or their own pick (PickWithin).
// # Profiles
//
// An operator configures scheduling in YAML (ParseSchedulerConfig; see
// testdata/scheduler/example.yaml) as named profiles, the shape of the
// Gateway API Inference Extension's endpoint picker: filters, weighted
// scorers and one picker, each named as a plugin. Filters: live, phase,
// kv. Scorers: latency, load and locality (the estimates above, in
// seconds), stale (the surcharge on stale figures: they still route),
// kv-headroom and prefix-affinity (UnitScorer: a score in [0, 1] becomes a
// surcharge of (1−score)·weight times the node's own compute time).
// Pickers: best-of-slack (Route), weighted-random (Paths, then a draw by
// 1/cost from the request's seed) and round-robin (FixedPipelines in
// turn). NewProfiles builds one Router per profile; Profiles.For picks one
// by name. DefaultSchedulerConfig routes exactly as a default Router.
//
// Prefix affinity reads NodeState.Prefixes, a small bloom filter of the
// block hashes (BlockHashes: a hash chain over fixed-size token blocks) a
// node's prefix cache holds, against Request.Prefix. The longest matched
// prefix is damped by the node's queue, so one hot prefix does not herd
// every request onto the path that cached it first.
package routing
