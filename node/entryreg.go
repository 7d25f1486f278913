package node

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The entry's registry of attempts in flight: it routes the tokens,
// errors and peer failures the node hears to the attempt they concern,
// whose driver feeds them to its generation's node/entry.Gen.

// event is what reaches a generation's driver.
type event struct {
	sid  SessionID
	tok  *Token
	err  *ErrorMsg
	from peer.ID
	down peer.ID // a peer of the path failed
	why  string
}

// attemptReg is one attempt's entry in the registry.
type attemptReg struct {
	hops   []Hop
	events chan event
	// inconclusive counts, per peer, the spot checks of it in this
	// attempt that said nothing; the generation's goroutine alone
	// touches it (trust.Attempt).
	inconclusive map[peer.ID]int
}

// registry routes tokens and errors to the attempt they belong to.
type registry struct {
	mu   sync.Mutex
	gens map[SessionID]*attemptReg
}

func (r *registry) add(sid SessionID, a *attemptReg) {
	r.mu.Lock()
	r.gens[sid] = a
	r.mu.Unlock()
}

func (r *registry) remove(sid SessionID) {
	r.mu.Lock()
	delete(r.gens, sid)
	r.mu.Unlock()
}

// busy returns the peers an attempt in flight goes through.
func (r *registry) busy() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, a := range r.gens {
		for _, h := range a.hops {
			out[h.Peer.String()] = true
		}
	}
	return out
}

func (r *registry) get(sid SessionID) *attemptReg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gens[sid]
}

func (a *attemptReg) post(ev event) {
	select {
	case a.events <- ev:
	default: // the driver has what it needs to fail the attempt
	}
}

func (a *attemptReg) uses(p peer.ID) bool {
	for _, h := range a.hops {
		if h.Peer == p {
			return true
		}
	}
	return false
}

// onToken accepts a token only from the attempt's last hop.
func (r *registry) onToken(from peer.ID, t *Token) {
	a := r.get(t.Session)
	if a == nil || a.hops[len(a.hops)-1].Peer != from {
		return // a stale attempt's, or forged
	}
	a.post(event{sid: t.Session, tok: t, from: from})
}

// onError accepts an error from any hop of the attempt.
func (r *registry) onError(from peer.ID, e *ErrorMsg) {
	a := r.get(e.Session)
	if a == nil || !a.uses(from) {
		return
	}
	a.post(event{sid: e.Session, err: e, from: from})
}
