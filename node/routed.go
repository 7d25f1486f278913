package node

import (
	"slices"
	"sync"
	"time"

	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
)

// routedPrefixes is what this entry sent through which paths lately: the
// block hashes of the positions a finished generation fed its hops, which
// every hop of the path holds from then on (in the session until its
// close arrives, then in its prefix cache). A request that continues one
// (the same prompt again, a chat's next turn) goes the same way while
// that path serves, idle of this entry's other generations and with no
// session waiting (stickUsable), whatever the router's estimates say:
// right after a generation they are at their least reliable. Gossip says
// what a hop holds one heartbeat late; the path's first hop looks
// slowest, its measured layer latency having just taken the prefill in;
// and the seeded pick among near-equal paths sent about half of such
// requests to a copy that holds nothing (issue 32).
//
// A record is kept for ttl, then for as long as every hop's gossiped
// summary still holds its blocks: an eviction ends it.
type routedPrefixes struct {
	ttl time.Duration
	mu  sync.Mutex
	// recs, oldest first; at most maxRouted.
	recs []routedPrefix
}

type routedPrefix struct {
	path   routing.Path
	key    string   // path.String()
	hashes []uint64 // routing.BlockHashes of the positions fed
	at     time.Time
}

// routedHeartbeats is how many heartbeat intervals a record is kept for
// without its hops' summaries confirming it.
const routedHeartbeats = 10

// maxRouted bounds the records kept: the newest win.
const maxRouted = 256

func newRoutedPrefixes(ttl time.Duration) *routedPrefixes {
	return &routedPrefixes{ttl: ttl}
}

// note records that path's hops now hold the blocks of hashes.
func (r *routedPrefixes) note(path routing.Path, hashes []uint64, now time.Time) {
	if len(hashes) == 0 || len(path.Hops) == 0 {
		return
	}
	key := path.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A record of the same path that this one extends says nothing more.
	r.recs = slices.DeleteFunc(r.recs, func(p routedPrefix) bool {
		return p.key == key && len(p.hashes) <= len(hashes) && p.hashes[len(p.hashes)-1] == hashes[len(p.hashes)-1]
	})
	r.recs = append(r.recs, routedPrefix{path: path, key: key, hashes: hashes, at: now})
	if n := len(r.recs) - maxRouted; n > 0 {
		r.recs = slices.Delete(r.recs, 0, n)
	}
}

// shared is how many leading blocks two hash chains share: hash i covers
// every block up to i, so the chains agree up to the last equal one.
func shared(a, b []uint64) int {
	n := min(len(a), len(b))
	// Equal hashes at i imply equal ones before: find the last by bisection.
	lo, hi := 0, n // a[:lo] shared; a[hi:n] not
	for lo < hi {
		mid := (lo + hi) / 2
		if a[mid] == b[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// pick returns the path of the record sharing the most leading blocks
// with prefix (the newest among equals) for which ok holds, and how many
// blocks it shares; false when none shares any. It first forgets the
// records past ttl whose hops' summaries in v no longer hold them.
func (r *routedPrefixes) pick(prefix []uint64, v *routing.View, now time.Time, ok func(routing.Path) bool) (routing.Path, int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = slices.DeleteFunc(r.recs, func(p routedPrefix) bool {
		if now.Sub(p.at) <= r.ttl {
			return false
		}
		for _, h := range p.path.Hops {
			if ns, found := v.Node(h.Node); !found || ns.Prefixes.Match(p.hashes) < len(p.hashes) {
				return true
			}
		}
		return false
	})
	if len(prefix) == 0 {
		return routing.Path{}, 0, false
	}
	best, bestN := -1, 0
	for i := len(r.recs) - 1; i >= 0; i-- {
		if n := shared(r.recs[i].hashes, prefix); n > bestN && ok(r.recs[i].path) {
			best, bestN = i, n
		}
	}
	if best < 0 {
		return routing.Path{}, 0, false
	}
	return r.recs[best].path, bestN, true
}

// stickUsable reports whether a path that holds a request's prefix may
// take it: usable as a pin is (pinUsable), no hop busy with another of
// this entry's generations, and none with sessions waiting for KV memory
// or too little free for this one. Past that the router decides: a cold
// path may serve sooner, and then caches the prefix too.
func stickUsable(m layers.LayerMap, v *routing.View, p routing.Path, avoid []string, busy map[string]bool, tokens int) bool {
	if !pinUsable(m, v, p, avoid) {
		return false
	}
	for _, h := range p.Hops {
		ns, _ := v.Node(h.Node)
		if busy[h.Node] || ns.QueueDepth > 0 || ns.FreeKV >= 0 && ns.FreeKV < tokens {
			return false
		}
	}
	return true
}
