// Package sim is Strata's discrete-event simulator: it drives a swarm of
// model-serving nodes on a virtual clock, so that placements, routing and
// batching can be measured at sizes and over durations no testbed reaches.
//
// It owns the event loop (a priority queue keyed by (time, seq), one
// goroutine, no wall clock), the node model (per-layer FIFO queues, a
// batcher with the stage caps of the scenario's profiles, KV accounting),
// the links (bandwidth, latency, one transmission at a time), the
// coordinator (arrivals, iterations, measurement windows) and the request
// schedulers the replayed systems use. It is neither the pure core
// (layers, routing) nor the networked shell (node, swarm): it must not
// open sockets, start goroutines or read clocks, so that the same scenario
// and seed always give the same report.
//
// # Units
//
// Times are seconds, sizes bytes, bandwidths bytes per second, as in
// Helix's simulator (see testdata/sim/helix/README.md): a link Helix
// declares as "1000 * mbps" carries 1e9 bytes/s here too. Profiled layer
// times are read in milliseconds and converted on load.
//
// # Calibration
//
// Replay runs one of Helix's published simulations (its placement, links,
// request stream and scheduler, from results/sim_runs.csv) and reports the
// decode throughput Helix measured next to ours.
package sim
