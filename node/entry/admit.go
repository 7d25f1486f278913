package entry

import (
	"errors"
	"fmt"
	"slices"

	"github.com/stratanet/strata/routing"
)

// Admission counts KV as FastDeploy does, in blocks: ceil(prompt/block)
// for the prompt plus the blocks reserved for the output, here all of it
// (ceil(max tokens/block)), since a stage reserves a session's whole
// capacity when it opens. A hop's room is what its last report said,
// less what this entry admitted onto it since that report: the
// reservation is dropped once a report counts the session, or the
// generation ends. The stage's own admission stays the authority; this
// keeps the entry from sending work the stages would only park or
// refuse.

// KVBlock is the KV block size, in tokens, that admission counts in.
const KVBlock = 16

// KVBlocks is a session's KV need in blocks: ceil(prompt/block) +
// ceil(output/block).
func KVBlocks(prompt, output int) int {
	return (prompt+KVBlock-1)/KVBlock + (output+KVBlock-1)/KVBlock
}

// KVNeed is KVBlocks in tokens.
func KVNeed(prompt, output int) int { return KVBlocks(prompt, output) * KVBlock }

// Report is what a node last reported of its KV cache. Mark identifies
// the report (a heartbeat, a status, a beat number): reservations made
// against it are held until a newer one counts them.
type Report[M comparable] struct {
	Free     int // tokens; negative when unknown (admit: the stage decides)
	Sessions int // sessions open or waiting there
	Mark     M
}

// Unknown is a report that says nothing: the stage decides.
func Unknown[M comparable]() Report[M] { return Report[M]{Free: -1} }

// Reservation is KV this entry admitted onto a node that the node's
// report did not count yet. Until the session has opened there (the
// first token came back) no report can count it. After, the second
// report newer than the one current then does: the first may have been
// on its way, written before the session opened.
type Reservation[M comparable] struct {
	Node    string
	Need    int // tokens
	opened  bool
	mark    M // once opened: the report current then
	next    M // the first newer report seen
	hasNext bool
}

// countedBy reports whether rep counts r's session.
func (r *Reservation[M]) countedBy(rep Report[M]) bool {
	switch {
	case !r.opened || rep.Mark == r.mark:
		return false
	case !r.hasNext:
		r.next, r.hasNext = rep.Mark, true
		return false
	}
	return rep.Mark != r.next
}

// Ledger holds an entry's reservations, per node.
type Ledger[M comparable] struct {
	resv map[string][]*Reservation[M]
}

// NewLedger returns an empty ledger.
func NewLedger[M comparable]() *Ledger[M] {
	return &Ledger[M]{resv: map[string][]*Reservation[M]{}}
}

// Fits reports whether node has room for need tokens: its report, less
// the reservations it does not count yet. Reservations that the report
// counts are dropped here. A node that runs nothing is always given the
// request: its stage says whether it can ever hold it, which a wait
// would not change.
func (l *Ledger[M]) Fits(node string, rep Report[M], need int) bool {
	rs := l.resv[node]
	kept := rs[:0]
	held := 0
	for _, r := range rs {
		if !r.countedBy(rep) {
			kept = append(kept, r)
			held += r.Need
		}
	}
	clear(rs[len(kept):]) // no stale pointers past the kept ones
	if len(kept) == 0 {
		delete(l.resv, node)
	} else {
		l.resv[node] = kept
	}
	if rep.Free < 0 || rep.Sessions == 0 && len(kept) == 0 {
		return true
	}
	return rep.Free-held >= need
}

// Reserve records need tokens on node.
func (l *Ledger[M]) Reserve(node string, need int) *Reservation[M] {
	r := &Reservation[M]{Node: node, Need: need}
	l.resv[node] = append(l.resv[node], r)
	return r
}

// Opened re-bases reservations once their session is open on every hop
// (its first token came back): mark(node) is the report current now,
// and the second newer one counts the session. A reservation already
// opened keeps its base: a replay's first token (a new session on the
// same admission) does not hold it for two more reports.
func (l *Ledger[M]) Opened(rs []*Reservation[M], mark func(node string) M) {
	for _, r := range rs {
		if !r.opened {
			r.opened, r.mark = true, mark(r.Node)
		}
	}
}

// Release gives reservations back: a generation's at its end, or ones
// never used (a head held back).
func (l *Ledger[M]) Release(rs []*Reservation[M]) {
	for _, r := range rs {
		list := l.resv[r.Node]
		if i := slices.Index(list, r); i >= 0 {
			list = slices.Delete(list, i, i+1)
		}
		if len(list) == 0 {
			delete(l.resv, r.Node)
		} else {
			l.resv[r.Node] = list
		}
	}
}

// Held is the tokens reserved on node.
func (l *Ledger[M]) Held(node string) int {
	n := 0
	for _, r := range l.resv[node] {
		n += r.Need
	}
	return n
}

// ErrNoRoom: a path exists, but none has KV room for the request now.
var ErrNoRoom = errors.New("no path has KV room now (the swarm is busy)")

// ErrHeld: the request fits, but fair admission holds it back for an
// older request at a peer entry.
var ErrHeld = errors.New("held back for an older request at a peer entry")

// Waitable reports whether err leaves a request in the queue: no room,
// no path yet, or held back.
func Waitable(err error) bool {
	return errors.Is(err, ErrNoRoom) || errors.Is(err, routing.ErrNoPath) || errors.Is(err, ErrHeld)
}

// admitTries bounds how many full hops TryAdmit routes around.
const admitTries = 8

// TryAdmit routes a request that needs need tokens of KV and reserves
// them on the path's hops, or says why it cannot now. route returns a
// path that avoids the given nodes and its hops' names; report, what a
// node last reported. A path whose hop lacks room is routed again
// without that hop, so that a request goes where room is rather than
// wait for one node. Nodes whose report is unknown get no reservation.
func TryAdmit[P any, M comparable](l *Ledger[M], need int, route func(avoid []string) (P, []string, error),
	report func(node string) Report[M]) (P, []*Reservation[M], error) {
	var zero P
	var avoid []string
	for range admitTries {
		path, hops, err := route(avoid)
		if err != nil {
			if len(avoid) > 0 && errors.Is(err, routing.ErrNoPath) {
				return zero, nil, fmt.Errorf("%w: %d hop(s) full", ErrNoRoom, len(avoid))
			}
			return zero, nil, err
		}
		short := ""
		reps := make([]Report[M], len(hops))
		for i, h := range hops {
			reps[i] = report(h)
			if !l.Fits(h, reps[i], need) {
				short = h
				break
			}
		}
		if short == "" {
			var rs []*Reservation[M]
			for i, h := range hops {
				if reps[i].Free >= 0 {
					rs = append(rs, l.Reserve(h, need))
				}
			}
			return path, rs, nil
		}
		avoid = append(avoid, short)
	}
	return zero, nil, ErrNoRoom
}

// Pump admits from the head of a queue while the head can go: try says
// whether it can (nil), why it must wait (a Waitable error) or why it
// never can (any other error, which takes it out too). A head that must
// wait stays the head, so that later requests do not overtake it. Pump
// returns how many left the queue; admit is told of each with its
// error (nil: admitted).
func Pump[W any](q []W, try func(W) error, admit func(W, error)) int {
	n := 0
	for n < len(q) {
		err := try(q[n])
		if err != nil && Waitable(err) {
			break
		}
		admit(q[n], err)
		n++
	}
	return n
}

// Arrival is a new request at the queue.
type Arrival struct {
	Queued int  // requests waiting ahead
	Bound  int  // the most the queue holds
	Jump   bool // tried at once even behind others (handed over by a thief, or given back)
	Head   bool // goes back to the head (a thief gave it back): never refused for the bound
	Wait   bool // it may wait (it did not ask not to queue)
}

// Verdict is what the queue does with an arrival.
type Verdict uint8

// The verdicts.
const (
	Admitted Verdict = iota // it goes now
	Refused                 // it never can: the error says why
	NoWait                  // it cannot go now and asked not to queue
	Full                    // the queue is at its bound
	Queued                  // it waits its turn
)

// Arrive decides an arrival's fate. One with nobody ahead of it (or one
// that jumps) is tried at once (try: nil when it goes, a Waitable error
// when it must wait, any other when it never can); one that cannot go
// now waits, unless it asked not to or the queue is full. The error is
// try's, nil when it was not tried.
func Arrive(a Arrival, try func() error) (Verdict, error) {
	var err error
	if a.Queued == 0 || a.Jump || a.Head {
		if err = try(); err == nil {
			return Admitted, nil
		}
		if !Waitable(err) {
			return Refused, err
		}
	}
	switch {
	case !a.Wait:
		return NoWait, err
	case !a.Head && a.Queued >= a.Bound:
		return Full, err
	}
	return Queued, err
}
