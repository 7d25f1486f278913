// Package testnet runs scenarios on a real swarm: it starts real
// `strata node` processes on a Network (loopback, or one network
// namespace per node with emulated wide-area links), drives client load
// at their OpenAI-compatible APIs, carries out a timeline of events
// (join, kill -9, graceful leave, leader kill, rejoin, partition, heal),
// and reports what clients saw.
//
// A scenario file (see Scenario; testdata/testnet/*.yaml) names the
// network, the model (one the runner generates with the engine's
// generator, or a SIMULATED one), the nodes with their layer caps, the
// load (concurrent clients, Poisson arrival rate, prompt and response
// lengths, greedy requests streamed to measure time to first token and
// per-token latency), the events and what the run must show (Expect).
//
// The nodes start one at a time, each once the founder sees the one
// before placed, and the load starts once the swarm has settled (no map
// change pending, every node on the same epoch and seeing every stage
// holder serving); event times count from there.
//
// Every request is greedy, so every answer must equal the single-process
// engine's for its prompt whatever failed on the way; Reference computes
// those answers and the report counts mismatches. A request whose entry
// node the runner itself stops while it is in flight goes again, once, to
// another live node (counted as entry_retried). Like the official OpenAI
// SDKs, the client also tries again after a refusal that comes before any
// output: a 503 (such as no_capacity while the leader repairs the map
// after a kill) or 429, waiting its Retry-After capped at 2 s, or a
// refused connection, waiting a 0.5 s doubling backoff; at most 4 retries,
// none starting later than 15 s after the first attempt. A request that
// then succeeds counts as retried (and every retry in retries, with its
// cause), and its TTFT includes the waits. An error once output has begun
// is never retried. Any request that does not succeed counts as failed.
//
// Recovery after an event is the time from the event until both a
// committed map polled from a live node (every ~200 ms, after the runner
// carried the event out) covers every
// layer with stages on nodes the runner has not stopped, and a request
// sent at or after the event has succeeded; both must happen before the
// next event (or the end of the run) for the event to count as
// recovered.
//
// The report (Report, report.md and report.json in the run directory)
// holds requests ok/failed/entry_retried/retried/mismatched, the client's
// retries and their causes, TTFT and per-token p50 and p99, throughput
// over time, recovery per event and the map epochs seen.
//
// A scenario's nemesis section (nemesis.go) adds faults drawn from a
// seeded generator, one at a time and each undone after a few seconds:
// partitions (majority/minority, or two sides bridged by one node),
// SIGSTOP of the leader or of a hop, packet loss or delay on one node
// (the namespace network's delayer), kill -9 and rejoin. Every run also
// checks the committed maps' history (history.go): each node logs every
// map it applies (consensus.LogMapApplied), and the runner proves from
// those lines and its polls that they form one linearizable history,
// directly and with Porcupine. The nemesis report adds fault counts by
// kind, recovery times and a request checker's verdict (no answer wrong,
// duplicated or lost; no failure outside a fault). See docs/nemesis.md.
//
// The package touches nothing outside what it made: the processes it
// started (each in its own process group, all killed when a run ends,
// fails or is interrupted), the run directory, and the network it set up.
package testnet
