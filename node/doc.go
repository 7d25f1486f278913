// Package node wires one running Strata node: the engine's layers, the
// swarm host, the consensus replica and the router, into the data plane.
// It holds no placement or routing algorithm (those are package layers'
// and routing's); it carries out their decisions.
//
// # Parts
//
// Node (node.go) is the composition root and nothing more: New builds the
// parts below, connects their seams (plain funcs and small interfaces),
// starts their goroutines and joins them on Close. Each role is a type of
// its own, testable without the others:
//
//   - The stage service (stageService, service.go) on /strata/act/1,
//     depending on a frame sender (the host) and a token sink (the entry),
//     not on Node: a step carries a
//     session ID, the remaining hops, the positions, the input tokens and,
//     after the first hop, the hidden states (shape and dtype checked
//     against the model). The node runs its layers in the session's KV
//     cache and forwards the output to the next hop; the last hop samples
//     (the draw for position p is a function of the seed and p) and sends
//     the token straight to the entry; for a session opened with
//     log-probabilities (Open.LogProbs) it sends with it engine.LogProbs
//     of the same logits row (the raw logits' log-softmax, and up to 20
//     alternatives) in a token frame of kind 8. The wire format is in
//     wire.go.
//     What it sends goes through the outbox (outbox.go): one FIFO queue
//     and one sender goroutine per peer, bounded, joined on Close, so
//     frames to a peer leave in the order they were produced.
//   - The scheduler (scheduler.go): one goroutine owns the loaded layers,
//     the KV memory and the batch slots, fed by a channel of a sealed
//     message type (inboxMsg). It writes to an outbox interface, so its
//     unit tests run on simulated stages with a fake (scheduler_test.go).
//     Its parts: the stage table (stageTable, stages.go) owns the engine
//     stages and which layer each serves, and closes a stage once it
//     serves no layer and no session, knowing nothing of sessions or KV;
//     the batch (batch.go) checks the ready steps, runs them through the
//     engine (runBatch, which touches no scheduler state) and hands each
//     result on; admission, batching and resume decisions are
//     node/stage/sched's pure functions; the prefix cache is
//     prefixcache.go. It admits
//     sessions by KV memory (capacity × the KV bytes of the hop's layers),
//     keeps a bounded FIFO of sessions waiting for memory, expires idle
//     sessions, and runs every ready step as one batch, layer by layer, so
//     decode steps of different sessions (and hops of different ranges)
//     share engine calls. Each layer is its own engine stage, so a hop may
//     run any sub-range of what the node holds. The stages are the
//     pure-Go engine's, or another backend's (WithEngine, engine.go: ggml
//     from its own module), whose name the heartbeats carry. Its status is published
//     before a load or release is reported done, and sync returns it as
//     of everything submitted before.
//   - The entry (entry, entry.go, client.go): Generate tokenizes, routes
//     and drives prefill and decode. Its decisions (replay, reroute,
//     back-off, spot-check draws, admission, fair holds, steal choices)
//     are node/entry's pure state machine and functions, which the
//     simulator calls too; this package carries out their effects on
//     the network, the engine and the clock. It depends on a route function, a
//     send function, a post function for closes, a draining check and
//     peer-down events (entryDeps), not on Node, so its unit tests
//     (entry_test.go) run it on a fake clock with in-process fake hops.
//     A request with no path with KV room waits in the entry's
//     admission queue (queue.go: FIFO, a deadline, a bound; KV counted
//     in blocks against the hops' reports less its own reservations),
//     woken by the peer table's changes, the node's status and its own
//     generations' ends.
//     When a hop fails it marks the peer suspect, routes
//     around it and replays the prompt and the tokens so far on the new
//     path: with greedy or seeded sampling the caller gets exactly the
//     tokens of a run without the failure. With no path at all, in-flight
//     generations wait for the leader's repair (WithRepairWait) and new
//     requests wait in the queue. When the members cannot hold every
//     layer between them (no map committed, or the only holders of some
//     layers left), no map or repair can come until more nodes join:
//     both are refused at once with ErrUncovered (and ErrNoCapacity),
//     naming the layers no node holds. The coverage unit (coverage,
//     coverage.go) decides this from the consensus replica, which it
//     only reads, and logs each change of verdict.
//   - The path finder (pathFinder, view.go) builds the routing view from
//     the committed map, the peer table and the members' capabilities, and
//     asks the router; no routing decision is made here.
//   - The announcer (announcer, status.go) knows the node's own standing:
//     the committed map it routes on, the layers it holds, its phase, and
//     the status its heartbeats carry. status.go also holds the liveness
//     adapter consensus reads and the peer-table watcher that feeds the
//     entry's peer-down events.
//   - Warmup (warmer, warmup.go) is consensus's StageLoader: it loads a
//     proposed range beside what it serves, and after a commit releases
//     the layers it no longer serves once their sessions end.
//   - Capabilities (caps.go): a simulated node declares its device; a
//     real-engine node measures one layer at start, through its engine,
//     cached in the data dir per engine.
//   - Weights (node/weights, wired in weights.go): serving the model's
//     chunks to peers, the info and manifest answers, the fetch of a
//     node's range from peers when it joined without the file, the
//     members' fetch rates for the planner, and the adaptive upload
//     limit (a Governor fed the scheduler's batches, on the node's
//     clock). The package reads the consensus replica through a small
//     interface (consSwarm) and reaches peers through the host's
//     streams; the node routes its control requests to it and loads
//     the slices it makes (warmup).
//   - Spot checks (package node/trust, docs/trust.md): every hop keeps
//     SHA-256 chains over the rows it took and gave per session
//     (trust.Chains) and signs them as a receipt on request (receipt.go);
//     at a share of token boundaries (WithVerifyRate) the entry's
//     trust.Auditor re-runs the session so far as one stateless prefill
//     on a second holder of a hop's layers, settles a mismatch with a
//     third, and reports signed evidence to the leader, who evicts and
//     bans the liar. This package only carries the checks out: the check
//     sessions and receipt requests on the network (verify.go, through
//     trust.Attempt), the rewind past a liar's tokens, and the swarm view
//     (trust.Swarm) wired to the peer table and the consensus replica.
//     Signed hops (sigframe.go): every float32 frame of hidden states
//     carries its sender's receipt signature over the rows sent
//     (trust.Chains.FrameReceipt), checked on arrival
//     (trust.Chains.VerifyFrame), and a check takes a hop's receipt from
//     the next hop, so evidence rests on what was sent. The fault
//     injector that tests lie with (faultinject.go) exists only under the
//     faultinject build tag.
//
// # Time
//
// The entry's step timeout, busy backoff and repair wait, the
// scheduler's idle and queue expiry, and the status interval run on the
// clock of WithClock (github.com/jonboulle/clockwork; the wall clock by
// default), so tests advance a fake clock instead of sleeping. Routing
// and the peer table stay on the wall clock, which heartbeat times are
// compared with.
//
// # Noticing a failed hop
//
// The entry fails the current step of every generation whose path uses a
// peer as soon as any of these says so: the peer table reports the peer's
// last connection closed (at once) or the peer dead (heartbeats missing,
// about 2 s at the default interval); a hop reports that it cannot
// forward to the next one, or refuses the step; or no token arrives within
// the step timeout (a hung hop whose heartbeats still flow). Late
// heartbeats alone do not fail anything, and a late but connected peer
// stays routable: stale figures cost a penalty in routing, never a
// refusal. A refused admission (busy) backs off and retries; a session
// that no hop of a layer can hold fails at once with ErrNoCapacity.
//
// # The client API
//
// Generate returns a Stream of Deltas (tokens and the text that is safe
// to show) and, at the end, a Result with the finish reason, usage
// counts and replay figures. Errors wrap the sentinels in errors.go, one
// per HTTP status the API layer needs (ErrBadRequest, ErrUnknownModel,
// ErrPromptTooLong, ErrNoCapacity with RetryAfter, ErrSessionLost).
package node
