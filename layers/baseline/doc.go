// Package baseline reimplements the placement policies of the systems
// Strata must beat, Petals and Parallax, so that one quality measure
// (layers.Fleet.Flow) scores them and our planner side by side. They
// follow the descriptions in docs/baselines.md, not our planner's code and
// not the projects' code; where that page is silent we took the project's
// published default and say so below.
//
// Both policies implement Policy. They are pure and deterministic: no I/O,
// goroutines or clocks, and the same fleet gives the same map whatever
// order its nodes were listed in (the default join order is the fleet's
// ID order). Both take a context: when it ends they stop and return an
// error wrapping ErrTimedOut; callers give them DefaultTimeout (60 s).
// Neither ever answers with a cheaper search. Maps have epoch 0.
//
// # Petals
//
// Block count. A server holds
// n = ⌊(memory − reserve) / (layer bytes + cache tokens · KV bytes per token)⌋
// blocks, at most L (and at most the node's MaxLayers, as --num_blocks
// caps it). The cache is Petals' fixed attention cache reservation:
// 32768 tokens a block for a model with grouped-query attention, else
// 8192 (petals/server/server.py; older releases used 16384 and 4096),
// settable with PetalsCacheTokens. The reserve defaults to the fleet's
// CostParams.MemoryReserve share of memory, the room the cost model
// leaves every policy's runtime; Petals' own figure is its autograd
// estimate, 2 GiB·hidden/14336 (PetalsReserve). A server with no block
// does not join, as Petals refuses to start.
//
// Throughput. A server's throughput is its layers.Profile TPS for the
// range it holds, ends included (layers.EndsOf); t[b] is the sum over the
// servers covering block b, recomputed for every decision with servers in
// fleet order, as Petals' compute_spans sums sorted DHT records.
//
// Ends (deliberate deviation). Petals' client holds the embedding and the
// head; in Strata the first and last stage hold them. A server whose
// window touches an end, where the cost model says the window plus that
// end does not fit, holds as many layers of the window as fit, kept at
// the model's end; a window where not even one fits is not an option for
// that server. The window is still chosen as Petals chooses it, over all
// n blocks.
//
// Joining. Servers join one at a time in the join order (PetalsJoinOrder;
// this replaces the random 0–10 s wait) and every earlier server counts.
// A joiner sorts t[i:i+n] ascending for every start i and takes the
// lexicographically smallest list, ties to the lowest i. Two equal-length
// sorted lists compare at the smallest value one holds more often, so the
// scan slides a count difference per value rank and costs O(L) a server.
// Values closer than 10⁻¹²·N times the largest server throughput share a
// rank, so that rounding in running sums cannot break the lowest-start
// rule; that is far below the ε weighting.
//
// Rebalancing. Rounds of checks replace the random 0–120 s timers: every
// server checks once a round, in the join order, or in a fresh seeded
// shuffle each round with PetalsSeed. A check follows docs/baselines.md:
//  1. remove itself with weight 1+ε (ε = 10⁻³, PetalsEpsilon); if that
//     leaves one of its blocks unserved, stay;
//  2. find its best new start; if it is the current one, stay;
//  3. simulate: move there, then let every server (itself included), in
//     the same order, do steps 1–2 and move, until a pass moves nothing.
//     We read "repeat the same" as including the gap rule of step 1, so
//     no simulated server opens a gap (Petals' code checks the gap for
//     the checking server only);
//  4. move only if min t before / min t after < 0.75
//     (PetalsBalanceQuality), and min t after > 0.
//
// A move is break-before-make: the server leaves and chooses blocks as a
// joining server would, which can be the blocks it just left (counted in
// PetalsResult.Reloads but not Moves). The rebalance ends when a round
// changes no span (Converged), when the placement returns to an earlier
// one (Cycle; fixed order only, where it would repeat for ever), or after
// PetalsMaxRounds rounds, which also bounds each simulation; Petals has no
// bound.
//
// # Parallax
//
// Capacity. A node holds at most
// ⌊(memory · 0.65 − end bytes) / layer bytes⌋ layers (ParallaxCapacity),
// where the end bytes are the embedding for a first stage and the head
// for a last one. Strata nodes have one GPU, so the GPU count of docs/baselines.md is
// 1. The node's MaxLayers caps it.
//
// TFLOPS (decision). Parallax's detection knows a few GPUs (A100 80/40 GB,
// RTX 5090, RTX 4090, Apple M-series) and takes any other NVIDIA GPU for
// 50 TFLOPS and 600 GB/s. By default water-filling weighs nodes by the
// datasheet TFLOPS in layers.Hardware, the figures every policy sees, so
// that the baseline is not handicapped by a table it could fix in a line.
// ParallaxDeviceTable(true) emulates the detection (ParallaxTFLOPS). Either
// way it weighs by compute, not bandwidth: that is Parallax's choice.
//
// Allocation. Nodes are taken in join order (ParallaxJoinOrder), stably
// sorted by capacity, largest first. For each pipeline count
// k = 1 … min(N, Σ capacity / L), a memoised search finds s*(k), the least
// total number of stages that build k pipelines: each node is skipped,
// added to an open pipeline, or opens a new one, with Parallax's end
// accounting (a pipeline's first node counts its capacity with the
// embedding; a node that would cover the rest closes the pipeline only if
// it has room for the head, else it takes what fits beside the head) and
// its three prunes. The chosen k maximises k²/s*(k), ties to the smaller
// k, and its pipelines are rebuilt by replaying the search's choices
// (skip first, then open pipelines by residual, then a new one; a choice
// must be strictly better to win). Pipelines are disjoint. The memo keys
// are exact, one table per node index, and pruned states are not stored;
// none of this changes a value.
//
// Water-filling. Inside each pipeline the nodes are ordered by capacity,
// largest first, which is also the stage order; the first counts its
// capacity with the embedding and the last with the head (a one-node
// pipeline only with the embedding, as Parallax does). λ is found by
// bisection so that Σ min(capᵢ, λ·TFLOPSᵢ) = L; shares are rounded down
// and the remaining layers go one each by largest fractional part
// (WaterFill). A node left with no layer serves nothing.
//
// The map is the union of the pipelines' stages; nodes in no pipeline
// serve nothing. Parallax's code goes on to place such left-over nodes
// with its dynamic join; docs/baselines.md does not describe that step and the
// baseline does not take it.
//
// Budget. The search is exponential in the worst case. It looks at the
// context every 1024 steps, and it also stops at ParallaxMaxStates memo
// states for one k (about 35 bytes each), so that memory cannot run out
// before the time budget does; both are reported as ErrTimedOut. In
// practice it finishes on tens of nodes and on 100 identical large GPUs,
// and times out on 100 mixed nodes and on 1,000 nodes.
package baseline
