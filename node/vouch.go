package node

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/swarm"
)

// Verified work (docs/internet.md, "Weight by verified work"): an entry
// counts, per peer, the spot checks of that peer's work it saw agree
// (unverifiedWork.passed), and its heartbeats carry the counts, signed
// with its host key (swarm.Vouch). The leader reads every member's from
// its peer table, its own beside them, and weighs placement by them
// (consensus.VerifiedChecks).

// DefaultChunkRequestRate and DefaultChunkRequestBurst pace each peer's
// chunk requests to this node (chunks.WithPeerRequestRate): at 4 MiB
// chunks, 512 MiB/s a peer, past what a link carries, so only a flood
// waits.
const (
	DefaultChunkRequestRate  = 128
	DefaultChunkRequestBurst = 128
)

// vouches are this entry's counts of checks passed, by peer.
func (w *unverifiedWork) vouches() []swarm.Vouch {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]swarm.Vouch, 0, len(w.checks))
	for p, n := range w.checks {
		out = append(out, swarm.Vouch{Peer: p, Checks: n})
	}
	return out
}

// leaderVouches are the vouches a leader weighs placement by: every
// peer's as its heartbeats said (atts), and this entry's own, as self's.
func (w *unverifiedWork) leaderVouches(self peer.ID, atts []swarm.Attestation) []consensus.Vouch {
	var out []consensus.Vouch
	for _, a := range atts {
		out = append(out, consensus.Vouch{Checker: a.Checker.String(), Subject: a.Subject.String(), Checks: int(a.Checks)})
	}
	for _, v := range w.vouches() {
		out = append(out, consensus.Vouch{Checker: self.String(), Subject: v.Peer.String(), Checks: int(v.Checks)})
	}
	return out
}

// byPeer is this entry's count of spot checks it saw each peer pass:
// what its heartbeats vouch.
func (w *unverifiedWork) byPeer() map[peer.ID]uint32 {
	out := map[peer.ID]uint32{}
	for _, v := range w.vouches() {
		out[v.Peer] = v.Checks
	}
	return out
}
