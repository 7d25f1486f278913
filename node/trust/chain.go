package trust

// Checkers: which holders can re-run a hop's work, as a pure function of
// its inputs (every draw is the order of the holders given), so that
// every entry picks alike from the same map.

// Holder is a node that may check, with the layers [From, To) that its
// committed range covers.
type Holder struct {
	ID       string
	From, To int
}

// Link is one checker of a chain: ID runs layers [From, To), fed what
// the link before it emitted (the first, the checked hop's input).
type Link struct {
	ID       string
	From, To int
}

// maxVisits bounds the search of Checkers on a huge swarm with few
// short chains: past it, the chains found so far are all it returns.
const maxVisits = 20000

// Checkers lists the checkers that can re-run layers [from, to) from the
// checked hop's input: each is a chain of one or more links, of distinct
// holders, that cover exactly [from, to) in order. A chain of one link
// is a single second holder; longer chains stand in where none exists.
//
// The rule, so that every entry picks alike from the same map:
//   - fewest links first: every link is one more check session hop and
//     one more node the verdict rests on;
//   - among chains of as many links, the order of holders in the list
//     decides (lexicographically, by each link's holder in turn), so the
//     caller draws the tie-break by the order it gives;
//   - each link runs as far as its holder allows (up to to): the split
//     points are a function of the holders, and a holder adds a link only
//     if it carries the chain further;
//   - the first link's holder is not notFirst (the hop that feeds the
//     checked one: a path's consecutive hops are distinct nodes).
//
// holders must hold only nodes fit to check (not the checked hop, none
// avoided); a holder whose range misses [from, to) is ignored. At most
// limit chains of at most maxLinks links are returned; nil when none.
func Checkers(from, to int, holders []Holder, notFirst string, maxLinks, limit int) [][]Link {
	if from >= to || maxLinks <= 0 || limit <= 0 {
		return nil
	}
	// reach is how far one more link from any holder can carry a chain
	// that has reached r: the pruning bound (it ignores distinctness, so
	// it never cuts a chain that exists).
	reach := func(r int) int {
		best := r
		for _, h := range holders {
			if h.From <= r && r < h.To {
				best = max(best, min(h.To, to))
			}
		}
		return best
	}
	canReach := func(r, links int) bool {
		for ; links > 0 && r < to; links-- {
			next := reach(r)
			if next == r {
				return false
			}
			r = next
		}
		return r >= to
	}
	var out [][]Link
	visits := 0
	used := make([]bool, len(holders))
	var chain []Link
	// walk extends chain (which has reached r) by up to left more links,
	// in holder order, and keeps every chain that ends at to with exactly
	// left links more.
	var walk func(r, left int) bool
	walk = func(r, left int) bool {
		if r == to {
			if left == 0 {
				out = append(out, append([]Link(nil), chain...))
			}
			return len(out) < limit
		}
		if left == 0 || !canReach(r, left) {
			return true
		}
		for k, h := range holders {
			if visits++; visits > maxVisits {
				return false
			}
			if used[k] || h.From > r || h.To <= r || (len(chain) == 0 && h.ID == notFirst) || dup(chain, h.ID) {
				continue
			}
			used[k] = true
			chain = append(chain, Link{ID: h.ID, From: r, To: min(h.To, to)})
			more := walk(min(h.To, to), left-1)
			chain = chain[:len(chain)-1]
			used[k] = false
			if !more {
				return false
			}
		}
		return true
	}
	for n := 1; n <= maxLinks && len(out) < limit; n++ {
		if !walk(from, n) {
			break
		}
	}
	return out
}

// dup reports whether id already runs a link of chain (a holder listed
// twice, for two ranges, still checks once).
func dup(chain []Link, id string) bool {
	for _, l := range chain {
		if l.ID == id {
			return true
		}
	}
	return false
}

// Disjoint reports whether chains a and b share no node: a third opinion
// must come from other nodes than the checker it settles.
func Disjoint(a, b []Link) bool {
	for _, l := range a {
		if dup(b, l.ID) {
			return false
		}
	}
	return true
}
