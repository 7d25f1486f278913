// Package entry is the entry role's decisions as pure state machines and
// functions, in the style of etcd raft's RawNode and of
// consensus.Decide: what to do with a token that arrived, a hop that
// failed, a timeout, a peer's changed load or a spot check's answer, and
// which request the admission queue admits, holds back for a peer entry
// or hands to a thief.
//
// It owns the rules: replay, reroute, back-off and give-up (Gen, its
// Replay state, Route), which token boundaries are spot-checked
// (ShouldAudit), the KV ledger of admission and its routing with full
// hops left out (Ledger, TryAdmit), the queue's head-first admission
// (Pump), fair holds (FairHold) and stealing (PickVictim, Stealable,
// StealMinWait, OldestPeerHead). Its scripted tests are in testdata
// (gen, admit; go test -rewrite writes their expected outputs anew).
//
// It must not touch the network, an engine, a clock, goroutines or
// randomness: time and every draw are inputs, so that the same events
// always give the same effects. The node's entry (package node) is the
// shell that carries out the effects, and the simulator (package sim)
// calls the same functions on its virtual clock.
package entry
