// Package swarm is Strata's network shell: it owns the libp2p host and
// everything that talks to peers, and it turns what it hears into facts
// for the functional core.
//
// # What it owns
//
//   - The host (host.go): TCP and QUIC listeners, TLS and Noise, yamux, an
//     Ed25519 identity kept in the data dir (identity.go), the resource
//     manager (resources.go) and a connection manager whose protected tags
//     keep pipeline neighbours (TagNeighbour) and Raft voters (TagVoter)
//     from being trimmed.
//   - Private swarms (swarmkey.go): with a pre-shared key (libp2p pnet)
//     peers without the key cannot connect at all. go-libp2p runs no QUIC
//     under a PSK, so a host with a swarm key is TCP-only, and logs so.
//   - Discovery (discovery.go): kad-dht in server mode on /strata/kad/1.0.0,
//     a rendezvous key per swarm name and model, advertising with our own
//     retry and backoff. Found peers are dialled and enter the peer table
//     as hints only.
//   - Gossip (gossip.go, heartbeat.go): GossipSub topics
//     strata/<swarm>/heartbeat/1 and strata/<swarm>/map/1, strictly
//     signed. Heartbeats have a fixed, versioned binary schema (see
//     Heartbeat) and go out about every 500 ms. A validator rejects
//     oversize, undecodable, forged-sender and clock-skewed heartbeats and
//     counts rejections per peer.
//   - The peer table (peertable.go): liveness from heartbeats and
//     connection events. Suspect after 3 missed beats, dead after 4 (2 s
//     at 500 ms), and dead within 2 beats of the last connection closing
//     when nothing is heard meanwhile; dead rows are forgotten after
//     expiry, and a peer that comes back reuses its row.
//   - RTT (rtt.go): libp2p ping to a rotating sample of peers, smoothed by
//     an EWMA, gossiped in heartbeats and merged into an RTTMatrix.
//   - Streams (frame.go, streams.go, protocols.go): one versioned protocol
//     ID per purpose, length-prefixed frames (internal/codec) whose
//     maximum size is checked before any allocation, one persistent
//     activation stream per neighbour (reopened on failure), a
//     request/response helper with deadlines for control RPCs, and
//     Handle/Open for the protocols that live elsewhere (steal, chunks,
//     Raft): they get a framed *Stream, never the libp2p host.
//   - The Host's parts (parts.go): Streams, Links (connections and
//     reachability), Beats (status, heartbeats, monitor) and Discovery,
//     in the manner of go-libp2p's core/host and core/network.
//   - NAT traversal (nat.go): AutoNAT, circuit relay v2 (public hosts
//     relay unless told not to; an unreachable host reserves slots and
//     advertises /p2p-circuit addresses), DCUtR hole punching. Links that
//     go through a relay are marked in the peer table. A relay serves
//     members only and paces what it carries for them (relayrate.go,
//     WithRelayRate); relayed links are pinged through the relay and
//     their bandwidth probed on /strata/bw/1 (bwprobe.go), for routing.
//
// # What it must not touch
//
// It does not decide layer placement (package layers), choose paths
// (package routing), run the model (engine) or keep the replicated map
// (consensus). It carries opaque map notices and activation frames; what
// they mean is the node's business. It exposes facts (Peer rows, an
// RTTMatrix) in its own types; adapting them to routing.View is done where
// the node wires the two together.
//
// # Transport choice for activations
//
// On loopback the prototype moved 4 MB activation frames at ~1.2 GB/s over
// TCP+TLS, ~0.85 GB/s over TCP+Noise and ~0.47 GB/s over QUIC (raw TCP:
// ~3.9 GB/s). So TLS is offered before Noise, and the dial ranker dials
// TCP first and QUIC only 250 ms later as a fallback: the connection
// activations ride on is TCP+TLS+yamux whenever TCP works. A host behind
// NAT (reachability private) dials QUIC first instead: its UDP mapping is
// the one hole punching gets through most often.
//
// # Errors
//
// Errors wrap the sentinels in errors.go (ErrFrameTooLarge,
// ErrHeartbeatSchema, ErrSwarmKey, ...), so callers test them with
// errors.Is. No peer input panics the host: decoders are fuzzed, handler
// panics are recovered, and bad frames reset only their stream.
package swarm
