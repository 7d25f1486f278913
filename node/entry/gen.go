package entry

import (
	"fmt"
	"slices"
	"time"
)

// A generation at the entry runs as attempts: each opens a fresh session
// on a routed path, a prefill of everything known and then one decode
// step per token. When a hop fails (an error, its peer's death, the step
// timeout, a token that does not check) the attempt ends, its hops are
// told to close the session, and the next attempt replays the whole
// prefix on a path that avoids the failed peer. Gen decides all of this;
// the node's entry carries it out.

// EndKind says how an attempt ended.
type EndKind uint8

// The ways an attempt ends.
const (
	EndFailure    EndKind = iota // a hop failed: replay elsewhere
	EndBusy                      // a hop's admission queue is full: back off
	EndNoKV                      // a hop can never hold the session: avoid it for good
	EndMove                      // a hop is draining: move the session at a token boundary
	EndFault                     // a hop failed a spot check: replay from the last verified point
	EndPrefixMiss                // hops' prefix caches disagreed: replay cold
	// EndUnreachable: the entry could not even dial the first hop (a
	// dial backoff, a relay that does not know it yet). The hop did no
	// work and may be reachable in a moment: back off and route again,
	// without spending a replay.
	EndUnreachable
)

var endNames = [...]string{"failure", "busy", "no-kv", "move", "fault", "prefix-miss", "unreachable"}

func (k EndKind) String() string {
	if int(k) < len(endNames) {
		return endNames[k]
	}
	return fmt.Sprintf("end(%d)", k)
}

// End is how an attempt ended: its kind, the peers to avoid on the next
// attempt, and why.
type End struct {
	Kind   EndKind
	Blame  []string
	Reason string
}

// FailKind says why a generation was given up.
type FailKind uint8

// The ways a generation is given up.
const (
	// FailBusy: hops answered busy for longer than the repair wait.
	FailBusy FailKind = iota + 1
	// FailReplays: the replay cap was reached.
	FailReplays
	// FailUnreachable: the first hops could not be dialled for longer
	// than the repair wait.
	FailUnreachable
)

// Config is what a generation's decisions depend on.
type Config struct {
	Self        string        // the entry's own peer: never avoided
	MaxReplays  int           // failures recovered before the generation is given up
	RepairWait  time.Duration // how long a run of busy answers may last
	StepTimeout time.Duration // how long a step may wait for its token
	Vocab       int           // tokens at or above it are outside the vocabulary
}

// BusyBackoff is the wait before the retry-th attempt on busy hops:
// doubling from 20 ms, at most a second.
func BusyBackoff(retry int) time.Duration {
	return min(10*time.Millisecond<<min(retry, 7), time.Second)
}

// ShouldAudit says whether a token boundary gets a spot check at rate
// (a share of boundaries), given a uniform draw in [0, 1) and whether
// any checker can be asked.
func ShouldAudit(rate float64, canCheck bool, draw float64) bool {
	return rate > 0 && canCheck && (rate >= 1 || draw < rate)
}

// Event is what reaches a generation: see the types below.
type Event interface{ event() }

// Start: an attempt begins on a path with these hops; Pos is the
// position of the next token (the prompt and every token so far).
type Start struct {
	Hops []string
	Pos  int
}

// TokenArrived: the last hop sent a token for position Pos.
type TokenArrived struct {
	From  string
	Pos   int
	Token int32
}

// Rejected: the entry's own check of a token (its log-probabilities, its
// grammar) or of the path failed; From is blamed ("" for nobody).
type Rejected struct {
	From   string
	Reason string
}

// HopFailed: a hop answered an error; At is the peer it names (the one
// it could not forward to, or itself), Kind what the error means.
type HopFailed struct {
	At     string
	Kind   EndKind
	Reason string
}

// SendFailed: the step could not be handed to the first hop.
// Unreachable: no connection to it could be made at all (the dial
// failed), so it saw nothing of the step.
type SendFailed struct {
	Reason      string
	Unreachable bool
}

// PeerDown: a peer of the path died or its connection closed.
type PeerDown struct {
	Peer   string
	Reason string
}

// TimedOut: no token came within the step timeout.
type TimedOut struct{}

// Delivered: the token of the last Deliver reached the caller. Finished:
// the generation is over (a stop, the length). Audit: this boundary is
// spot-checked. Draining: the path's hops that announced draining.
type Delivered struct {
	Finished bool
	Audit    bool
	Draining []string
}

// Checked: the spot check of the last Audit answered; Fail is nil when
// it passed, else how the attempt ends. Draining as for Delivered.
type Checked struct {
	Fail     *End
	Draining []string
}

func (Start) event()        {}
func (TokenArrived) event() {}
func (Rejected) event()     {}
func (HopFailed) event()    {}
func (SendFailed) event()   {}
func (PeerDown) event()     {}
func (TimedOut) event()     {}
func (Delivered) event()    {}
func (Checked) event()      {}

// Effect is what the entry must do: see the types below.
type Effect interface{ effect() }

// Send the next step to the first hop (and start the step timeout):
// with Prefill, open the session with every position known; else the
// last token. Replay: the attempt is a replay (count it).
type Send struct {
	Prefill bool
	Replay  bool
}

// Deliver the token to the caller. Recovered: the first token since a
// failure, which took Latency to recover.
type Deliver struct {
	Token     int32
	Recovered bool
	Latency   time.Duration
}

// Audit: spot-check a hop of the path at this boundary, then answer
// with Checked.
type Audit struct{}

// Done: the generation is over; the hops hold its prefix.
type Done struct{}

// Close the attempt's session on its hops: it ended so.
type Close struct{ End End }

// Rewind the tokens that depend on Peer's unverified output.
type Rewind struct{ Peer string }

// Backoff: wait Delay before routing again (the Retry-th busy answer,
// End).
type Backoff struct {
	Delay time.Duration
	Retry int
	End   End
}

// Reroute: find a path that avoids Avoid (or, when none, only Hard),
// waiting for a repair, and Start the next attempt; Cold: without the
// prefix cache. Failure: the attempt's end counts as a hop failure.
type Reroute struct {
	Avoid, Hard []string
	Cold        bool
	Failure     bool
	End         End
}

// Fail: the generation is given up. Failure: the end counted as a hop
// failure too.
type Fail struct {
	Why     FailKind
	Replays int
	Failure bool
	End     End
}

func (Send) effect()    {}
func (Deliver) effect() {}
func (Audit) effect()   {}
func (Done) effect()    {}
func (Close) effect()   {}
func (Rewind) effect()  {}
func (Backoff) effect() {}
func (Reroute) effect() {}
func (Fail) effect()    {}

// phase is where a generation stands.
type phase uint8

const (
	idle     phase = iota // no attempt: waiting for Start
	stepping              // a step sent: waiting for its token
	boundary              // a token delivered: waiting for Delivered
	auditing              // a spot check issued: waiting for Checked
	over                  // done or given up
)

// Gen is one generation's decisions: Step folds an event into its state
// and returns the effects, in order. It is not safe for concurrent use;
// one goroutine drives it.
type Gen struct {
	cfg Config
	// Replay state, as Replay keeps it.
	Replay
	FailedAt time.Time // when the last failure was noticed, until the next token

	phase   phase
	hops    []string
	pos     int  // the next token's position
	got     int  // tokens this attempt delivered
	pending bool // the next Start is a counted replay
	counted bool // this attempt's Start counted a replay
}

// NewGen returns a generation's state machine.
func NewGen(cfg Config) *Gen { return &Gen{cfg: cfg} }

// Step folds ev, at now, into the generation and returns what to do.
// An event that does not apply now (a token while no step waits, any
// event after the end) returns nothing.
func (g *Gen) Step(now time.Time, ev Event) []Effect {
	switch ev := ev.(type) {
	case Start:
		if g.phase != idle {
			return nil
		}
		g.phase, g.hops, g.pos, g.got = stepping, slices.Clone(ev.Hops), ev.Pos, 0
		replay := g.pending
		if replay {
			g.Replays++
			g.pending = false
		}
		g.counted = replay
		return []Effect{Send{Prefill: true, Replay: replay}}
	case TokenArrived:
		if g.phase != stepping {
			return nil
		}
		switch {
		case ev.Pos != g.pos:
			return g.end(now, End{Blame: []string{ev.From}, Reason: fmt.Sprintf("token for position %d, want %d", ev.Pos, g.pos)})
		case ev.Token < 0 || int(ev.Token) >= g.cfg.Vocab:
			return g.end(now, End{Blame: []string{ev.From}, Reason: fmt.Sprintf("token %d outside the vocabulary", ev.Token)})
		}
		g.phase = boundary
		g.pos++
		g.got++
		d := Deliver{Token: ev.Token}
		if !g.FailedAt.IsZero() {
			d.Recovered, d.Latency = true, now.Sub(g.FailedAt)
			g.FailedAt = time.Time{}
		}
		return []Effect{d}
	case Rejected:
		if g.phase != stepping && g.phase != boundary {
			return nil
		}
		var blame []string
		if ev.From != "" {
			blame = []string{ev.From}
		}
		return g.end(now, End{Blame: blame, Reason: ev.Reason})
	case HopFailed:
		if g.phase != stepping && g.phase != auditing {
			return nil
		}
		end := End{Kind: ev.Kind, Blame: []string{ev.At}, Reason: ev.Reason}
		if ev.Kind == EndPrefixMiss {
			end.Blame = nil // no hop is at fault: the caches raced
		}
		return g.end(now, end)
	case SendFailed:
		if g.phase != stepping {
			return nil
		}
		end := End{Blame: []string{g.hops[0]}, Reason: "send to the first hop: " + ev.Reason}
		if ev.Unreachable {
			end.Kind = EndUnreachable
		}
		return g.end(now, end)
	case PeerDown:
		if g.phase != stepping && g.phase != auditing || !slices.Contains(g.hops, ev.Peer) {
			return nil
		}
		return g.end(now, End{Blame: []string{ev.Peer}, Reason: ev.Reason})
	case TimedOut:
		if g.phase != stepping {
			return nil
		}
		return g.end(now, End{Blame: slices.Clone(g.hops), Reason: fmt.Sprintf("no token within %v", g.cfg.StepTimeout)})
	case Delivered:
		if g.phase != boundary {
			return nil
		}
		switch {
		case ev.Finished:
			g.phase = over
			return []Effect{Done{}}
		case ev.Audit:
			g.phase = auditing
			return []Effect{Audit{}}
		}
		return g.next(now, ev.Draining)
	case Checked:
		if g.phase != auditing {
			return nil
		}
		if ev.Fail != nil {
			return g.end(now, *ev.Fail)
		}
		return g.next(now, ev.Draining)
	}
	return nil
}

// next is a token boundary that passed: leave hops that announced
// draining, so that they can go without a single step failing, or send
// the next step.
func (g *Gen) next(now time.Time, draining []string) []Effect {
	if len(draining) > 0 {
		return g.end(now, End{Kind: EndMove, Blame: slices.Clone(draining), Reason: "draining"})
	}
	g.phase = stepping
	return []Effect{Send{}}
}

// end closes the attempt and decides what follows it.
func (g *Gen) end(now time.Time, e End) []Effect {
	out := []Effect{Close{End: e}}
	d := g.Replay.Ended(g.cfg, now, e, g.got > 0)
	if e.Kind == EndFault && len(e.Blame) > 0 {
		out = append(out, Rewind{Peer: e.Blame[0]})
	}
	if d.Failure || e.Kind == EndUnreachable && g.FailedAt.IsZero() {
		g.FailedAt = now
	}
	counted := d.Counted
	if e.Kind == EndUnreachable && d.Fail == 0 {
		// A replay that never reached its first hop was no replay: take
		// it back, and count the attempt that does reach one. After
		// tokens, the next attempt replays them all.
		if g.counted {
			g.Replays--
		}
		counted = g.counted || g.got > 0
	}
	switch {
	case d.Fail != 0:
		g.phase = over
		return append(out, Fail{Why: d.Fail, Replays: g.Replays, Failure: d.Failure, End: e})
	case d.Backoff > 0:
		retry := g.Busy
		if e.Kind == EndUnreachable {
			retry = g.Unreach
		}
		out = append(out, Backoff{Delay: d.Backoff, Retry: retry, End: e})
	}
	g.phase, g.pending, g.counted = idle, counted, false
	return append(out, Reroute{Avoid: slices.Clone(g.Avoid), Hard: slices.Clone(g.Hard), Cold: g.Cold, Failure: d.Failure, End: e})
}

// Replay is the state that carries from one attempt to the next: the
// replays so far, the run of busy answers, the peers given up on and
// whether the cache is off. The simulator keeps it per query.
type Replay struct {
	Replays   int
	Busy      int       // busy answers in the current run
	BusySince time.Time // when the run began
	Avoid     []string  // peers given up on
	Hard      []string  // peers that can never hold it (no KV memory), avoided for good
	// Disputed are the peers of a failed spot check (the hop and its
	// checkers), avoided for good: when the check could not tell which
	// of them lied, a path through any of them may give wrong tokens.
	Disputed []string
	Cold     bool // the prefix cache is off for it (after a prefix miss)
	// Unreach counts the attempts in a row whose first hop could not be
	// dialled, since UnreachSince.
	Unreach      int
	UnreachSince time.Time
}

// Decision is what follows an attempt's end.
type Decision struct {
	Fail    FailKind      // nonzero: give the generation up
	Backoff time.Duration // wait before routing again
	Counted bool          // the next attempt counts as a replay
	Failure bool          // the end counts as a hop failure
}

// Ended folds an attempt's end, at now, into r and decides what
// follows: progress says whether the attempt delivered a token.
//
// A busy hop (its queue full, or not serving yet) is admission, not
// failure: the entry backs off and routes again, within the repair wait
// from the first busy answer of a run; a run ends with progress or any
// other end. A prefix miss replays at once, cold. Neither counts as a
// replay. A draining hop is left at once, counted as a replay but not
// against the cap. Anything else is a hop failure and a replay, up to
// the cap. A first hop that could not be dialled backs off like a busy
// one and counts no replay, within the repair wait from the first of a
// run of them; one that held the session (the attempt delivered a
// token) is a hop failure too. Every blamed peer but the entry itself is
// avoided later.
func (r *Replay) Ended(cfg Config, now time.Time, e End, progress bool) Decision {
	// A run of busy answers or of failed dials ends with progress or
	// another end; the two do not end each other's run, so that
	// alternating between them cannot go on past the repair wait.
	waiting := e.Kind == EndBusy || e.Kind == EndUnreachable
	if progress || !waiting {
		r.Busy, r.Unreach = 0, 0
	}
	for _, p := range e.Blame {
		if p == cfg.Self {
			continue
		}
		if e.Kind == EndNoKV && !slices.Contains(r.Hard, p) {
			r.Hard = append(r.Hard, p)
		}
		if e.Kind == EndFault && !slices.Contains(r.Disputed, p) {
			r.Disputed = append(r.Disputed, p)
		}
		if !slices.Contains(r.Avoid, p) {
			r.Avoid = append(r.Avoid, p)
		}
	}
	switch e.Kind {
	case EndBusy:
		if r.Busy == 0 {
			r.BusySince = now
		}
		r.Busy++
		if now.Sub(r.BusySince) > cfg.RepairWait {
			return Decision{Fail: FailBusy}
		}
		return Decision{Backoff: BusyBackoff(r.Busy)}
	case EndPrefixMiss:
		r.Cold = true
		return Decision{}
	case EndUnreachable:
		// Dial failures say nothing of the hops' work, and go-libp2p's
		// dial backoff fails every dial to a peer at once for seconds
		// after one failed: replaying at once would spend every replay
		// in a burst. Back off as for busy hops, within the repair wait.
		if r.Unreach == 0 {
			r.UnreachSince = now
		}
		r.Unreach++
		if now.Sub(r.UnreachSince) > cfg.RepairWait {
			return Decision{Fail: FailUnreachable, Failure: true}
		}
		// After the attempt's first token the hop holds the session, and
		// the entry cannot reach it: that session is lost, a hop failure
		// (the next attempt is a counted replay), however brief the
		// cause.
		return Decision{Backoff: BusyBackoff(r.Unreach), Failure: progress}
	case EndMove:
		return Decision{Counted: true}
	}
	if r.Replays >= cfg.MaxReplays {
		return Decision{Fail: FailReplays, Failure: true}
	}
	return Decision{Counted: true, Failure: true}
}

// A generation that a thief took (steal hand-over) runs on the thief's
// attempts, not this entry's: its tokens and the break of its stream
// reach the generation through these, between attempts.

// ThiefToken: the thief delivered tok. It ends a recovery like a token
// of an attempt of this entry's.
func (g *Gen) ThiefToken(now time.Time, tok int32) Deliver {
	d := Deliver{Token: tok}
	if !g.FailedAt.IsZero() {
		d.Recovered, d.Latency = true, now.Sub(g.FailedAt)
		g.FailedAt = time.Time{}
	}
	return d
}

// ThiefBroke: the thief's stream broke and the request comes back to
// this entry's queue. After tokens were delivered (progress) the next
// run is a replay of a failure noticed now, and ThiefBroke says so.
func (g *Gen) ThiefBroke(now time.Time, progress bool) bool {
	if !progress {
		return false
	}
	g.FailedAt = now
	g.Replays++
	return true
}

// Route routes a replay: with every peer given up on left out, or, when
// that finds no path, only those that can never hold it or were in a
// failed spot check (peers given up on may serve again; the router still
// leaves out the ones it holds suspect or dead).
func Route[P any](r Replay, route func(avoid []string) (P, error)) (P, error) {
	p, err := route(r.Avoid)
	if keep := r.AvoidedForGood(); err != nil && len(r.Avoid) > len(keep) {
		p, err = route(keep)
	}
	return p, err
}

// AvoidedForGood are the peers no later attempt of the generation may
// use: those that can never hold it and those of a failed spot check.
func (r Replay) AvoidedForGood() []string {
	out := slices.Clone(r.Hard)
	for _, p := range r.Disputed {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}
