package sim

import (
	"github.com/stratanet/strata/node/stage/sched"
)

// A node's life and range in the engine: it dies (kill), comes back
// empty (revive), or takes a new range while its open sessions finish on
// the layers they hold (reassign, released).

// kill takes a node down: everything queued or running on it is lost,
// for cause c.
func (s *Sim) kill(ni int, c cause) {
	n := s.nodes[ni]
	if n.down {
		return
	}
	n.down = true
	n.gen++
	var lost []*query
	for li, q := range n.queues {
		for _, it := range q {
			lost = append(lost, it.q)
		}
		n.queues[li] = nil
	}
	for _, it := range n.batch {
		lost = append(lost, it.q)
	}
	for _, it := range n.wait {
		lost = append(lost, it.q)
	}
	n.batch, n.wait, n.queued, n.busy, n.recv = nil, nil, 0, false, 0
	n.kvUsed, n.active, n.legacy = 0, 0, 0
	n.pc = sched.Cache[struct{}]{} // the cache dies with the process or the range
	for _, q := range lost {
		s.fail(q, c, ni)
	}
}

// revive brings a node back holding [first, end), empty: what it held
// before is lost as moved.
func (s *Sim) revive(ni, first, end int) {
	s.kill(ni, causeMoved)
	n := s.nodes[ni]
	n.down = false
	n.First, n.End, n.cur = first, end, first
	n.accFirst, n.accEnd, n.held = first, end, end-first
	n.queues = make([][]*iter, end-first)
	n.kvUsed, n.active = 0, 0
}

// reassign gives a live node a new range without breaking its sessions,
// as a committed map does on a real node (node/warmup.go's Release): new
// sessions are admitted to [first, end) at once; sessions already open go
// on, on the layers they hold, which stay loaded until the last of them
// ends; a prompt still waiting for memory on a released layer is refused.
func (s *Sim) reassign(ni, first, end int) {
	n := s.nodes[ni]
	if n.down || n.active == 0 {
		s.revive(ni, first, end)
		return
	}
	added := (end - first) - max(0, min(end, n.accEnd)-max(first, n.accFirst))
	n.held += added
	n.accFirst, n.accEnd = first, end
	n.rangeGen++
	n.legacy = n.active
	s.respan(n, min(n.First, first), max(n.End, end))
	keep := n.wait[:0]
	var refused []*iter
	for _, it := range n.wait {
		if it.entry < first || it.stop > end {
			refused = append(refused, it)
		} else {
			keep = append(keep, it)
		}
	}
	n.wait = keep
	for _, it := range refused {
		s.stats.rejected++
		s.fail(it.q, causeStale, ni)
	}
}

// respan re-indexes a node's per-layer queues to the span [first, end),
// which must hold every non-empty queue.
func (s *Sim) respan(n *node, first, end int) {
	if first == n.First && end == n.End {
		return
	}
	qs := make([][]*iter, end-first)
	for l := n.First; l < n.End; l++ {
		if l >= first && l < end {
			qs[l-first] = n.queues[l-n.First]
		}
	}
	n.queues, n.First, n.End = qs, first, end
	if n.cur < first || n.cur >= end {
		n.cur = first
	}
}

// released: a session admitted before the node's last range change
// ended. The span drops to the accepted range when sched.Unload, the
// stage scheduler's rule, lets the released layers go: here when no such
// session is left (the sim counts them per node, not per layer).
func (s *Sim) released(ni int) {
	n := s.nodes[ni]
	n.legacy--
	if !sched.Unload(true, n.legacy) {
		return
	}
	n.legacy = 0
	// What is left queued on a released layer belongs to sessions that
	// ended (their iterations are skipped when run): drop it.
	for l := n.First; l < n.End; l++ {
		if l < n.accFirst || l >= n.accEnd {
			n.queued -= len(n.queues[l-n.First])
		}
	}
	s.respan(n, n.accFirst, n.accEnd)
	n.held = n.accEnd - n.accFirst
	n.dropReleased()
	if s.onRange != nil {
		s.onRange(ni)
	}
}
