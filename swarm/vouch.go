package swarm

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Vouches carry verified work (consensus/trust.go): each node counts the
// spot checks of others' work it saw agree and gossips the counts in its
// heartbeats, MaxVouches at a time. Every receiver merges what a peer
// said into the peer's row, so a leader has every member's counts
// however many each one rotates through.

// maxVouchSubjects bounds the subjects remembered per peer: a peer that
// vouches for more (a Sybil naming made-up IDs) has its newest ones
// dropped, so memory stays bounded per peer.
const maxVouchSubjects = 1024

// Attestation is one peer's vouch, as this host has heard it.
type Attestation struct {
	Checker, Subject peer.ID
	Checks           uint32
}

// SetVouches sets the counts the next heartbeats carry, in rotation when
// there are more than MaxVouches. A vouch for oneself or of 0 checks is
// left out, a repeated peer counts once (the largest).
func (bt *Beats) SetVouches(vs []Vouch) {
	s := bt.h
	best := map[peer.ID]uint32{}
	for _, v := range vs {
		if v.Checks > 0 && v.Peer != "" && v.Peer != s.h.ID() && len(v.Peer) <= maxIDLen {
			best[v.Peer] = max(best[v.Peer], v.Checks)
		}
	}
	out := make([]Vouch, 0, len(best))
	for p, n := range best {
		out = append(out, Vouch{Peer: p, Checks: n})
	}
	slices.SortFunc(out, func(a, b Vouch) int { return cmpID(a.Peer, b.Peer) })
	bt.statusMu.Lock()
	bt.vouches = out
	bt.statusMu.Unlock()
}

func cmpID(a, b peer.ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// nextVouches is the next heartbeat's share of the vouches.
func (bt *Beats) nextVouches() []Vouch {
	bt.statusMu.Lock()
	defer bt.statusMu.Unlock()
	n := len(bt.vouches)
	if n <= MaxVouches {
		return slices.Clone(bt.vouches)
	}
	bt.vouchAt %= n
	out := make([]Vouch, 0, MaxVouches)
	for i := range MaxVouches {
		out = append(out, bt.vouches[(bt.vouchAt+i)%n])
	}
	bt.vouchAt += MaxVouches
	return out
}

// mergeVouches keeps, per subject, the largest count e's peer announced
// (counts only grow; a smaller one is older news).
func (e *entry) mergeVouches(vs []Vouch) {
	for _, v := range vs {
		if v.Peer == e.ID {
			continue
		}
		if e.vouches == nil {
			e.vouches = map[peer.ID]uint32{}
		}
		if old, ok := e.vouches[v.Peer]; ok || len(e.vouches) < maxVouchSubjects {
			e.vouches[v.Peer] = max(old, v.Checks)
		}
	}
}

// Attestations returns every vouch heard from peers in the table, in a
// slice the caller owns. A forgotten peer's vouches go with its row.
func (t *PeerTable) Attestations() []Attestation {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Attestation
	for id, e := range t.peers {
		for subj, n := range e.vouches {
			out = append(out, Attestation{Checker: id, Subject: subj, Checks: n})
		}
	}
	return out
}
