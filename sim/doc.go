// Package sim is Strata's discrete-event simulator: it drives a swarm of
// model-serving nodes on a virtual clock, so that placements, routing,
// batching and churn can be measured at sizes and over durations no
// testbed reaches.
//
// It owns the event loop (a priority queue keyed by (time, seq), one
// goroutine), the node model (per-layer FIFO queues, a batcher with the
// caps of the machine's profile, KV accounting or, for swarms, KV
// admission by node/stage/sched.Admit, the stage scheduler's rule), the links (bandwidth, latency,
// jitter, one transmission at a time), the clients (arrivals, iterations,
// replays, measurement windows), for the strata policy the entry's
// admission queue (entryq.go, node/entry's decisions) and the stages'
// prefix cache (prefix.go, on node/stage/sched's Cache and Resume), the request schedulers
// of the replayed Helix runs, and the control planes of the simulated
// policies. Placement
// and routing decisions are not its own: it calls layers (Plan, Join,
// Repair, Rebalance, OrderMoves), layers/baseline and routing. It is
// neither that pure core nor the networked shell (node, swarm, consensus):
// it reads its reference data from files, and must not open sockets,
// start goroutines or read clocks, so that the same scenario and seed
// always give the same report. A caller that wants wall-clock timings
// passes a clock in (SwarmSpec.Now).
//
// # Units
//
// Times are seconds, sizes bytes, bandwidths bytes per second, as in
// Helix's simulator (see testdata/sim/helix/README.md): a link Helix
// declares as "1000 * mbps" carries 1e9 bytes/s here too. Profiled layer
// times are read in milliseconds and converted on load.
//
// # Runs
//
// ReplayHelix runs one of Helix's published simulations (its placement,
// links, request stream and scheduler, from results/sim_runs.csv);
// CalibrateHelix sets our figures next to the published ones. RunSwarm
// runs one policy (strata, petals, parallax) on a swarm with churn: the
// policy places the machines, routes every request and reacts to deaths
// and joins with its own detection delays and loading rules. A swarm run
// is a world made of parts that own their state: machines (machines.go:
// the machines, their tables and the network model), the roster
// (roster.go, baselines.go: who is up and serves which range, the
// coverage), paths (paths.go: each policy's routing, the engine's
// scheduler), clients (clients.go: arrivals, replays), the entry's queue
// (entryq.go) and Strata's control plane (leader.go: it calls the
// consensus package's pure decision function). world plays the churn
// (churn.go) and keeps the result.
package sim
