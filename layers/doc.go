// Package layers is Strata's placement core: model and hardware specs, the
// cost model, the LayerMap, the quality measures that score every placement
// policy, and the planner that the leader runs on every churn event.
//
// It is pure: no I/O, no goroutines, no clocks. The same inputs always give
// the same outputs, whatever order the nodes come in.
//
// # Cost model
//
// Decode is a roofline. One step of batch b in one layer reads the layer's
// weights once and each sequence's KV cache, and does b tokens of FLOPs:
//
//	t(b) = max((W + b·ctx·kv) / membw, b·F(ctx) / flops)
//
// where W is the layer's weight bytes, kv its KV bytes per token, ctx the
// context each session reserves (CostParams.Context) and F(ctx) the FLOPs
// per token (2 per weight multiply-add plus 4·ctx·hidden for attention).
// Prefill of n tokens reads the weights once and does n tokens of FLOPs at
// an average context of n/2.
//
// A node that holds k layers keeps (1 − MemoryReserve)·memory for itself and
// fills what its weights leave with KV cache: its batch is
// B(k) = ⌊(usable − k·W − ends) / (k·ctx·kv)⌋, where "ends" are the token
// embedding on the first stage and the output head on the last. Its
// throughput is
//
//	tps(k) = B(k) / (k·t(B(k)) + head time if it holds the head)
//
// Fewer layers leave more memory for KV cache, hence larger batches, so
// k·tps(k), the layer-tokens a node serves per second, usually peaks at a
// small k: a planner that fills memory with layers wastes most of a GPU.
// Decode is bound by memory bandwidth until the batch crosses the roofline's
// ridge, so stages must be balanced by bandwidth and memory, not by TFLOPS.
// The batch is capped at CostParams.MaxBatch (256 by default), so k·tps(k)
// is flat for small k and falls once memory, not the cap, sets the batch.
//
// Mixtures of experts: a layer's memory W counts every expert (routed and
// shared) and its router; F counts the active and shared experts only;
// and a step of b tokens reads, besides attention and the shared experts,
// only the routed experts its tokens touch, E·(1−(1−k/E)^b) of E in
// expectation under uniform routing (ModelSpec.LayerReadBytesBatch), so
// t(b) grows with b even while memory-bound. Multi-head latent attention
// caches kv_lora_rank + rope dim elements per token and layer. The
// planner takes every layer to cost the same, the largest: a model whose
// first layers are dense (DeepSeek-V3: 3 of 61, each a twentieth of an
// MoE layer) is planned as if they were MoE layers, which never
// overcommits memory and overstates DeepSeek-V3's weights by about 5%;
// ModelSpec.LayerParamsAt and TotalParams are exact. Fleet.Needs gives
// the fewest nodes of each kind that hold the model.
//
// Links: a node that passes activations on sends (and receives) one hidden
// state per token, so its declared network bandwidth caps its rate at
// bandwidth ÷ activation bytes. That is a node capacity, so the flow below
// stays a node-capacitated max flow and Menger's formula still holds; RTT
// does not limit throughput (pipelining hides it) but enters latency.
//
// # Quality
//
// Flow is the max flow from layer 0 to layer L through the nodes' ranges:
// a token that visits node i costs 1/tps_i(k_i) of its time, so Flow is the
// least, over layers, of the summed tps of the nodes serving that layer.
// UB and UB2 bound Flow from above for any map of the same nodes; every
// policy is scored by the same Fleet methods. Both ignore that a layer is
// served by a whole number of nodes: where one node's rate is a large share
// of the flow (memory-tight or link-bound swarms) no map comes near them.
//
// # Planner
//
// Planner.Full bisects on a flow target, building at each step a placement
// that lifts every layer towards it; local search then re-inserts single
// nodes at their best (layer count, start) and re-splits neighbouring pairs;
// seed maps (the committed map, other policies' plans) go through the same
// search; instances of at most 6 nodes and 16 layers are solved exactly by
// branch and bound. Planner.Join, Planner.Repair and Planner.Rebalance
// serve the leader on churn; OrderMoves sequences a migration so that every
// layer keeps a server that is not reloading it (make before break).
package layers
