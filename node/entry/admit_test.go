package entry

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/routing"
)

// TestAdmitScripts runs testdata/admit: the admission queue, its KV
// ledger, fair holds and steal choices. Commands:
//
//	paths P1 P2 ...                the router's paths, best first (a,b)
//	report NODE free= sessions=    a node's report (a new mark)
//	unknown NODE                   a node that reports nothing
//	admit REQ need=                TryAdmit at once
//	enqueue REQ need= [deadline=] [nohold]
//	arrive REQ need= [bound=] [jump] [head] [nowait]
//	pump                           admit from the head (fair when on)
//	opened REQ                     its first token: re-base its reservations
//	release REQ                    it ended
//	held                           tokens reserved per node
//	tick DURATION
//	fair slack= step= stall=       fair admission on
//	peer ID n= enq= until=         a peer head (instants relative to now)
//	hold since= deadline= queue= [nohold]
//	oldest before= slack=
//	victim ID queue= wait= [asked]
//	pick after=
//	stealable since= min= [logprobs] [grammar]
//	min-wait [ours=] slack=
func TestAdmitScripts(t *testing.T) {
	runScripts(t, "admit", func(t *testing.T) func(string, []string) string {
		d := &admitDriver{t: t, now: scriptT0, led: NewLedger[int](), reps: map[string]Report[int]{},
			resv: map[string][]*Reservation[int]{}, stall: map[string]*StallRec{}}
		return d.do
	})
}

type admitReq struct {
	name      string
	need      int
	since     time.Time
	deadline  time.Time
	noHold    bool
	heldOnce  bool
	lastError error
}

type admitDriver struct {
	t       *testing.T
	now     time.Time
	led     *Ledger[int]
	paths   [][]string
	reps    map[string]Report[int]
	mark    int
	resv    map[string][]*Reservation[int]
	q       []*admitReq
	fair    FairConfig
	heads   []PeerHead
	stall   map[string]*StallRec
	victims []Victim
}

func (d *admitDriver) route(avoid []string) ([]string, []string, error) {
	for _, p := range d.paths {
		if !slices.ContainsFunc(p, func(n string) bool { return slices.Contains(avoid, n) }) {
			return p, p, nil
		}
	}
	return nil, nil, routing.ErrNoPath
}

func (d *admitDriver) report(n string) Report[int] {
	if r, ok := d.reps[n]; ok {
		return r
	}
	return Unknown[int]()
}

func (d *admitDriver) admit(r *admitReq) ([]string, error) {
	path, rs, err := TryAdmit(d.led, r.need, d.route, d.report)
	if err != nil {
		return nil, err
	}
	if d.fair.On {
		hold, wake := FairHold(d.fair, "self", d.heads, d.stall, Head{Since: r.since, Deadline: r.deadline, NoHold: r.noHold, Queue: len(d.q)}, d.now)
		if hold {
			d.led.Release(rs)
			r.heldOnce = true
			return nil, fmt.Errorf("%w until %s", ErrHeld, rel(wake))
		}
	}
	d.resv[r.name] = rs
	return path, nil
}

func (d *admitDriver) admitted(r *admitReq, path []string) string {
	var parts []string
	for _, x := range d.resv[r.name] {
		parts = append(parts, fmt.Sprintf("%s:%d", x.Node, x.Need))
	}
	return fmt.Sprintf("%s admitted on %s (reserved %s)", r.name, strings.Join(path, ","), fmtList(parts))
}

func (d *admitDriver) at(a args, k string) time.Time { return d.now.Add(a.dur(k, 0)) }

func (d *admitDriver) do(cmd string, in []string) string {
	a := parseArgs(d.t, in)
	switch cmd {
	case "paths":
		d.paths = nil
		for _, w := range a.words {
			d.paths = append(d.paths, strings.Split(w, ","))
		}
		return ""
	case "report":
		d.mark++
		d.reps[a.words[0]] = Report[int]{Free: a.int("free", 0), Sessions: a.int("sessions", 0), Mark: d.mark}
		return fmt.Sprintf("mark %d", d.mark)
	case "unknown":
		delete(d.reps, a.words[0])
		return ""
	case "admit":
		r := &admitReq{name: a.words[0], need: a.int("need", 0), since: d.now, noHold: true}
		path, err := d.admit(r)
		if err != nil {
			return fmt.Sprintf("%s refused: %v (waitable: %v)", r.name, err, Waitable(err))
		}
		return d.admitted(r, path)
	case "enqueue":
		r := &admitReq{name: a.words[0], need: a.int("need", 0), since: d.now, deadline: d.now.Add(a.dur("deadline", 30*time.Second)),
			noHold: a.flag("nohold")}
		d.q = append(d.q, r)
		return fmt.Sprintf("queue: %d", len(d.q))
	case "arrive":
		r := &admitReq{name: a.words[0], need: a.int("need", 0), since: d.now, deadline: d.now.Add(a.dur("deadline", 30*time.Second)),
			noHold: a.flag("nohold") || a.flag("jump") || a.flag("head") || a.flag("nowait")}
		var path []string
		v, err := Arrive(Arrival{Queued: len(d.q), Bound: a.int("bound", 1024), Jump: a.flag("jump"), Head: a.flag("head"), Wait: !a.flag("nowait")},
			func() error {
				var err error
				path, err = d.admit(r)
				return err
			})
		switch v {
		case Admitted:
			return d.admitted(r, path)
		case Queued:
			if a.flag("head") {
				d.q = slices.Insert(d.q, 0, r)
			} else {
				d.q = append(d.q, r)
			}
			r.lastError = err
			return fmt.Sprintf("%s queued (tried: %v); queue: %d", r.name, err, len(d.q))
		}
		return fmt.Sprintf("%s %s (tried: %v)", r.name, map[Verdict]string{Refused: "refused", NoWait: "not queued", Full: "refused: queue full"}[v], err)
	case "pump":
		var out []string
		n := Pump(d.q, func(r *admitReq) error {
			path, err := d.admit(r)
			r.lastError = err
			if err == nil {
				out = append(out, d.admitted(r, path))
			}
			return err
		}, func(r *admitReq, err error) {
			if err != nil {
				out = append(out, fmt.Sprintf("%s refused: %v", r.name, err))
			}
		})
		d.q = d.q[n:]
		if len(d.q) > 0 {
			out = append(out, fmt.Sprintf("head %s waits: %v", d.q[0].name, d.q[0].lastError))
		}
		out = append(out, fmt.Sprintf("queue: %d", len(d.q)))
		return strings.Join(out, "\n")
	case "opened":
		d.led.Opened(d.resv[a.words[0]], func(n string) int { return d.report(n).Mark })
		return ""
	case "release":
		d.led.Release(d.resv[a.words[0]])
		delete(d.resv, a.words[0])
		return ""
	case "held":
		var nodes []string
		for _, p := range d.paths {
			for _, n := range p {
				if !slices.Contains(nodes, n) {
					nodes = append(nodes, n)
				}
			}
		}
		sort.Strings(nodes)
		var out []string
		for _, n := range nodes {
			out = append(out, fmt.Sprintf("%s:%d", n, d.led.Held(n)))
		}
		return strings.Join(out, " ")
	case "tick":
		dt, err := time.ParseDuration(a.words[0])
		if err != nil {
			d.t.Fatal(err)
		}
		d.now = d.now.Add(dt)
		return "now " + rel(d.now)
	case "fair":
		d.fair = FairConfig{On: true, Slack: a.dur("slack", 0), Step: a.dur("step", 0), Stall: a.dur("stall", 0)}
		return ""
	case "peer":
		id := a.words[0]
		d.heads = slices.DeleteFunc(d.heads, func(h PeerHead) bool { return h.ID == id })
		d.heads = append(d.heads, PeerHead{ID: id, N: a.int("n", 0), Enq: d.at(a, "enq"), Until: d.at(a, "until")})
		return ""
	case "hold":
		hold, wake := FairHold(d.fair, "self", d.heads, d.stall,
			Head{Since: d.at(a, "since"), Deadline: d.at(a, "deadline"), NoHold: a.flag("nohold"), Queue: a.int("queue", 0)}, d.now)
		if !hold {
			return "admit"
		}
		return "hold until " + rel(wake)
	case "oldest":
		p := OldestPeerHead(d.heads, "self", d.now, d.at(a, "before"), a.dur("slack", 0), func(string) bool { return false })
		if p == "" {
			return "none"
		}
		return p
	case "victim":
		d.victims = append(d.victims, Victim{ID: a.words[0], Queue: a.int("queue", 0), Wait: a.dur("wait", 0), Asked: a.flag("asked")})
		return ""
	case "pick":
		p := PickVictim("self", d.victims, a.dur("after", 0))
		if p == "" {
			return "none"
		}
		return p
	case "stealable":
		return fmt.Sprint(Stealable(d.at(a, "since"), a.flag("logprobs"), a.flag("grammar"), d.now, a.dur("min", 0)))
	case "min-wait":
		var ours time.Time
		if a.has("ours") {
			ours = d.at(a, "ours")
		}
		return StealMinWait(ours, d.now, a.dur("slack", 0)).String()
	}
	d.t.Fatalf("unknown command %q", cmd)
	return ""
}
