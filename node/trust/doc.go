// Package trust is the spot checks' unit (docs/trust.md): what a hop
// records of its work and signs, what a receiver of a signed frame
// checks, and how an entry checks a hop and proves a liar.
//
// It owns:
//   - Receipt chains (Chains, chains.go): per hop session, SHA-256 chains
//     over the rows it took and gave, kept at every prefix-cache block so
//     a resumed session continues a cold run's; the consensus.Receipt a
//     hop signs over them (Signer).
//   - Signed frames (frames.go): the receipt a hop signs for a frame of
//     hidden states it sends (FrameReceipt) and the receiver's check of it
//     against its own input chain (VerifyFrame, ErrSignature); the
//     router that hands an awaited receipt to its check (Receipts).
//   - The checks (Auditor, audit.go and tolerance.go): which hop to check
//     (PickAudit: the fewest inconclusive checks in the attempt, then the
//     most unverified work), its checkers (Checkers,
//     chain.go: single holders, then chains of holders), the exact check
//     with a third opinion, the tolerance checks of hops on engines that
//     are not bit-reproducible (the last hop by its logits, one before it
//     by the last hop's logits after it), and the evidence sent to the
//     leader (consensus.Evidence). A Verdict says whom the attempt must
//     replay without.
//   - The counts (Counters, Stats, CheckRecord) and the verified work an
//     entry vouches for in its heartbeats (Work).
//   - The swarm as the checks see it (Swarm): holders of layers from the
//     committed map, who computes bit-reproducibly from the peer table,
//     the replicated verify rate and where evidence goes, from the
//     consensus replica.
//
// Its seams are small interfaces, so that it imports nothing of package
// node: Attempt (the entry's check sessions and receipt requests on the
// network, on its clock), Peers (*swarm.PeerTable) and Replica
// (*consensus.Consensus); the rest are plain funcs (holders, report,
// clock) and a zap logger. Package node wires them and keeps the wire
// format (frames, including FrameSig's bytes), the scheduler that calls
// Chains and VerifyFrame on its loop, the entry's draw of when to check
// and the rewind of a generation past a liar's outputs.
//
// It must not touch the network, an engine or package node: a check
// session runs only through Attempt (package engine is imported for the
// go engine's label alone). Checkers and PickAudit are pure
// (every draw is an input); Auditor draws its tie-breaks from Rand.
package trust
