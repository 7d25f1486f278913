package consensus

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/internal/scripttest"
	"github.com/stratanet/strata/layers"
)

// The leader's decisions are checked by scripts in testdata/leader, in
// the style of etcd's raft interaction tests: each script sets up a
// swarm (members, Raft servers, liveness, the clock), steps the leader's
// pure decision, and compares what it did with the expected output under
// "----" (internal/scripttest; -rewrite rewrites them). The world a
// script runs in is plain data: an Append is folded into the state, a
// configuration change edits the server list.

func TestLeaderScripts(t *testing.T) {
	scripttest.Run(t, "testdata/leader/*.txt", func(t *testing.T) scripttest.Do {
		w := newWorld(t)
		return func(line string) (string, error) { return w.do(line), nil }
	})
}

var scriptT0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

// world is the swarm a script drives: the replicated state, Raft's
// servers, liveness, the clock and the leader's memory.
type world struct {
	t     *testing.T
	in    LeaderInput
	st    LeaderState
	fresh bool // st is the zero value: a term starts at the next decision
}

func newWorld(t *testing.T) *world {
	return &world{t: t, fresh: true, in: LeaderInput{
		Now:       scriptT0,
		DeadSince: map[string]time.Time{},
		Speeds:    map[string]float64{},
		Config: LeaderConfig{
			Model: testModel(t), Planner: layers.NewPlanner(), CostParams: layers.DefaultCostParams(),
			DeadGrace: 10 * time.Second, StableAfter: 0, MaxVoters: 3,
			Warmup: time.Minute, LaggardPenalty: 10 * time.Minute, RebalanceEvery: 0,
		},
	}}
}

func (w *world) fail(format string, args ...any) string {
	return "error: " + fmt.Sprintf(format, args...)
}

// do runs one command and returns its output.
func (w *world) do(line string) string {
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	switch cmd {
	case "config":
		return w.config(args)
	case "self":
		w.in.Self = args[0]
		w.in.Join = w.joinEvent(args[0], nil)
		return ""
	case "at":
		sec, err := strconv.Atoi(args[0])
		if err != nil {
			return w.fail("%v", err)
		}
		w.in.Now = scriptT0.Add(time.Duration(sec) * time.Second)
		return ""
	case "servers":
		w.in.Servers = nil
		for _, a := range args {
			id, kind, _ := strings.Cut(a, ":")
			w.in.Servers = append(w.in.Servers, RaftServer{ID: id, Voter: kind != "nonvoter"})
		}
		return ""
	case "lagging", "acked":
		// lagging IDS: the servers have not acknowledged the latest
		// configuration; acked IDS: now they have.
		for _, id := range args {
			i := slices.IndexFunc(w.in.Servers, func(s RaftServer) bool { return s.ID == id })
			if i < 0 {
				return w.fail("no server %s", id)
			}
			w.in.Servers[i].Lagging = cmd == "lagging"
		}
		return ""
	case "dead":
		sec, err := strconv.Atoi(args[1])
		if err != nil {
			return w.fail("%v", err)
		}
		w.in.DeadSince[args[0]] = scriptT0.Add(time.Duration(sec) * time.Second)
		return ""
	case "alive":
		delete(w.in.DeadSince, args[0])
		return ""
	case "leaving":
		w.in.Leaving = true
		return ""
	case "manifest":
		// manifest TEXT [fp=X]: the leader holds the file, whose
		// manifest encodes as TEXT (fingerprint: the joins', or X).
		fp := testFingerprint
		if len(args) > 1 {
			fp = strings.TrimPrefix(args[1], "fp=")
		}
		w.in.Manifest = ManifestPublished{Fingerprint: fp, Manifest: []byte(args[0])}
		return ""
	case "term":
		// A new term: this node leads from now with empty memory.
		w.fresh = true
		return ""
	case "join":
		return w.joins(args)
	case "stewards":
		// stewards IDS: the state's steward set is IDS. Set directly:
		// script IDs are no peer IDs, and the signature is the fold's
		// business (stewards_test.go), not the leader's policy.
		ids := slices.Sorted(slices.Values(args))
		w.in.State.stewards.ids, w.in.State.stewards.seq = ids, w.in.State.stewards.seq+1
		return ""
	case "vouch":
		// vouch CHECKER SUBJECT N: CHECKER's heartbeats say it saw N spot
		// checks of SUBJECT's work agree (replacing what it said before).
		n, err := strconv.Atoi(args[2])
		if err != nil {
			return w.fail("%v", err)
		}
		w.in.Vouches = slices.DeleteFunc(w.in.Vouches, func(v Vouch) bool { return v.Checker == args[0] && v.Subject == args[1] })
		w.in.Vouches = append(w.in.Vouches, Vouch{Checker: args[0], Subject: args[1], Checks: n})
		return ""
	case "trust":
		// trust: each member's verified checks and placement weight.
		return w.describeTrust()
	case "drain":
		return w.appendEvent(NodeDraining{Node: args[0]})
	case "leave":
		return w.appendEvent(NodeLeft{Node: args[0], Reason: LeftGracefully})
	case "ready":
		return w.ready(args)
	case "decide":
		a, _, err := w.decide()
		return describe(a, err)
	case "step":
		out, _ := w.step()
		return out
	case "run":
		return w.run()
	case "state":
		return w.describeState()
	}
	return w.fail("unknown command %q", cmd)
}

func (w *world) config(args []string) string {
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		if k == "voters" || k == "trust" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return w.fail("%v", err)
			}
			if k == "voters" {
				w.in.Config.MaxVoters = n
			} else {
				w.in.Config.TrustChecks = n
			}
			continue
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return w.fail("%v", err)
		}
		switch k {
		case "grace":
			w.in.Config.DeadGrace = d
		case "stable":
			w.in.Config.StableAfter = d
		case "warmup":
			w.in.Config.Warmup = d
		case "rebalance":
			w.in.Config.RebalanceEvery = d
		default:
			return w.fail("unknown setting %q", k)
		}
	}
	return ""
}

// joinEvent is a node's join: an l40s in eu unless opts say otherwise
// (hw=NAME, relayed).
func (w *world) joinEvent(id string, opts []string) NodeJoined {
	caps := testCaps(w.t)
	for _, o := range opts {
		switch k, v, _ := strings.Cut(o, "="); k {
		case "hw":
			h, err := layers.Device(v)
			if err != nil {
				w.t.Fatal(err)
			}
			caps.Hardware = h
		case "relayed":
			caps.Relayed = true
		}
	}
	return NodeJoined{Node: id, Caps: caps, Fingerprint: testFingerprint}
}

// joins appends NodeJoined for each named node; options after the names
// (hw=..., relayed) apply to all of them.
func (w *world) joins(args []string) string {
	var ids, opts []string
	for _, a := range args {
		if strings.Contains(a, "=") || a == "relayed" {
			opts = append(opts, a)
		} else {
			ids = append(ids, a)
		}
	}
	var out []string
	for _, id := range ids {
		if s := w.appendEvent(w.joinEvent(id, opts)); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

// ready reports StageReady for the named nodes of the pending map, or
// for every node it waits for ("ready all").
func (w *world) ready(args []string) string {
	p, ok := w.in.State.Pending()
	if !ok {
		return w.fail("no pending map")
	}
	if len(args) == 1 && args[0] == "all" {
		args = p.Waiting()
	}
	var out []string
	for _, id := range args {
		r, _ := p.Map.Range(id)
		if s := w.appendEvent(StageReady{Node: id, Epoch: p.Map.Epoch, Range: r}); s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, "\n")
}

// appendEvent folds an event into the state as the log would.
func (w *world) appendEvent(ev Event) string {
	s, err := w.in.State.Apply(Record{At: w.in.Now, Event: ev})
	if err != nil {
		return w.fail("%v", err)
	}
	w.in.State = s
	return ""
}

func (w *world) decide() (Action, LeaderState, error) {
	if w.fresh {
		w.st, w.fresh = NewLeaderState(w.in.Now), false
	}
	before := w.in
	a, next, err := Decide(w.in, w.st)
	if !sameInput(before, w.in) {
		w.t.Fatal("Decide changed its input")
	}
	return a, next, err
}

// sameInput compares what Decide could have modified in place.
func sameInput(a, b LeaderInput) bool {
	return slices.Equal(a.Servers, b.Servers) && len(a.DeadSince) == len(b.DeadSince) && a.State.Applied() == b.State.Applied()
}

// step decides and carries the action out in the world. It reports
// whether the leader should decide again.
func (w *world) step() (string, bool) {
	a, next, err := w.decide()
	w.st = next
	out := describe(a, err)
	if err != nil || a == nil {
		return out, false
	}
	switch a := a.(type) {
	case Append:
		if s := w.appendEvent(a.Event); s != "" {
			return out + "\n  " + s, false
		}
	case AddNonvoter:
		w.in.Servers = append(w.in.Servers, RaftServer{ID: a.ID})
	case AddVoter:
		w.setVoter(a.ID, true)
	case Demote:
		w.setVoter(a.ID, false)
	case RemoveServer:
		w.in.Servers = slices.DeleteFunc(w.in.Servers, func(s RaftServer) bool { return s.ID == a.ID })
	case TransferLeadership:
		return out, false
	}
	return out, true
}

func (w *world) setVoter(id string, voter bool) {
	for i := range w.in.Servers {
		if w.in.Servers[i].ID == id {
			w.in.Servers[i].Voter = voter
			return
		}
	}
	w.in.Servers = append(w.in.Servers, RaftServer{ID: id, Voter: voter})
}

// run steps until the leader has nothing to do, as the loop does.
func (w *world) run() string {
	var out []string
	for range 32 {
		s, again := w.step()
		out = append(out, s)
		if !again {
			return strings.Join(out, "\n")
		}
	}
	return strings.Join(append(out, "error: still acting after 32 steps"), "\n")
}

func describe(a Action, err error) string {
	switch {
	case err != nil:
		return "error: " + err.Error()
	case a == nil:
		return "nothing"
	}
	ap, ok := a.(Append)
	if !ok {
		return a.String()
	}
	return "append " + describeEvent(ap.Event)
}

func describeEvent(ev Event) string {
	switch e := ev.(type) {
	case NodeJoined:
		return "NodeJoined " + e.Node
	case NodeLeft:
		return fmt.Sprintf("NodeLeft %s (%s)", e.Node, e.Reason)
	case MapProposed:
		return fmt.Sprintf("MapProposed %s deadline %s (%s)", describeMap(e.Map), e.Deadline.Sub(scriptT0), e.Reason)
	case MapCommitted:
		return fmt.Sprintf("MapCommitted epoch %d", e.Epoch)
	case WarmupAbandoned:
		return fmt.Sprintf("WarmupAbandoned epoch %d laggards %v (%s)", e.Epoch, e.Laggards, e.Reason)
	case ManifestPublished:
		return fmt.Sprintf("ManifestPublished %q", e.Manifest)
	}
	return ev.Kind().String()
}

func describeMap(m layers.LayerMap) string {
	if m.Layers == 0 {
		return "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d:", m.Epoch)
	for _, st := range m.Stages {
		fmt.Fprintf(&b, " %s[%d,%d)", st.Node, st.Range.Start, st.Range.End)
	}
	return b.String()
}

func (w *world) describeState() string {
	s := w.in.State
	var out []string
	var ms []string
	for _, m := range s.Members() {
		d := m.ID
		if m.Draining {
			d += "(draining)"
		}
		if w.in.Now.Before(m.LaggardUntil) {
			d += "(laggard)"
		}
		ms = append(ms, d)
	}
	out = append(out, "members: "+strings.Join(ms, " "))
	var sv []string
	for _, x := range w.in.Servers {
		d := x.ID
		if !x.Voter {
			d += ":nonvoter"
		}
		if x.Lagging {
			d += "(lagging)"
		}
		sv = append(sv, d)
	}
	out = append(out, "servers: "+strings.Join(sv, " "))
	if !s.Stewards().Empty() {
		out = append(out, "stewards: "+strings.Join(s.Stewards().List(), " "))
	}
	out = append(out, "committed: "+describeMap(s.Committed()))
	if p, ok := s.Pending(); ok {
		out = append(out, fmt.Sprintf("pending: %s waiting %v", describeMap(p.Map), p.Waiting()))
	}
	if m := s.Manifest(); m != nil {
		out = append(out, fmt.Sprintf("manifest: %q", m))
	}
	return strings.Join(out, "\n")
}

func (w *world) describeTrust() string {
	tr := w.in.State.Trust(w.in.Vouches, w.in.Config.TrustChecks)
	var out []string
	for _, m := range w.in.State.Members() {
		out = append(out, fmt.Sprintf("%s: checks %d weight %.3f", m.ID, tr.Checks[m.ID], tr.Weight(m.ID)))
	}
	if p, ok := w.in.State.Pending(); ok {
		out = append(out, fmt.Sprintf("pending unvouched: %v", tr.Unvouched(p.Map)))
	}
	if c := w.in.State.Committed(); c.Layers > 0 {
		out = append(out, fmt.Sprintf("committed unvouched: %v", tr.Unvouched(c)))
	}
	return strings.Join(out, "\n")
}

// TestDecideDoesNotMutate: a decision leaves the memory it was given as
// it was, so a caller may keep the old one (a simulator branching).
func TestDecideDoesNotMutate(t *testing.T) {
	w := newWorld(t)
	w.do("self a")
	w.do("join a b")
	w.do("servers a b")
	w.do("dead b 0")
	w.do("at 20")
	st := NewLeaderState(scriptT0)
	a, next, err := Decide(w.in, st)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(a, nil); got != "append NodeLeft b (dead)" {
		t.Fatalf("action %s", got)
	}
	if len(st.departed) != 0 || len(next.departed) != 1 {
		t.Fatalf("departed: given %v, returned %v", st.departed, next.departed)
	}
}
