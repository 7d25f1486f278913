package entry

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/routing"
)

// TestGenScripts runs testdata/gen: a generation's attempts, driven by
// events. Commands:
//
//	config self= max-replays= repair-wait= step-timeout= vocab=
//	tick DURATION                      the clock moves on
//	start HOPS pos=N                   an attempt on the path HOPS (a,b,c)
//	token from= pos= tok=              the last hop's token
//	reject [from=] REASON...           the entry's own check refused it
//	hop-failed at= kind= REASON...     a hop's error answer
//	send-failed [unreachable] REASON... the first hop could not be reached (dialled)
//	down PEER                          a peer of the path died
//	timeout                            the step timeout fired
//	delivered [finished] [audit] [draining=HOPS]
//	checked pass|fault=PEER|fail=PEER [draining=HOPS]
//	state                              the replay state
//	thief-token TOK                    a thief delivered a token
//	thief-broke [progress]             the thief's stream broke
//	route PATHS...                     route a replay on the router's paths
//	should-audit rate= draw= [no-checkers]
func TestGenScripts(t *testing.T) {
	runScripts(t, "gen", func(t *testing.T) func(string, []string) string {
		d := &genDriver{t: t, now: scriptT0,
			cfg: Config{Self: "entry", MaxReplays: 3, RepairWait: time.Second, StepTimeout: 5 * time.Second, Vocab: 100}}
		d.g = NewGen(d.cfg)
		return d.do
	})
}

type genDriver struct {
	t   *testing.T
	cfg Config
	g   *Gen
	now time.Time
}

var kinds = map[string]EndKind{"failure": EndFailure, "busy": EndBusy, "no-kv": EndNoKV, "move": EndMove, "fault": EndFault, "prefix-miss": EndPrefixMiss, "unreachable": EndUnreachable}

func (d *genDriver) do(cmd string, in []string) string {
	a := parseArgs(d.t, in)
	var ev Event
	switch cmd {
	case "config":
		d.cfg = Config{Self: a.str("self"), MaxReplays: a.int("max-replays", d.cfg.MaxReplays),
			RepairWait: a.dur("repair-wait", d.cfg.RepairWait), StepTimeout: a.dur("step-timeout", d.cfg.StepTimeout), Vocab: a.int("vocab", d.cfg.Vocab)}
		if d.cfg.Self == "" {
			d.cfg.Self = "entry"
		}
		d.g = NewGen(d.cfg)
		return ""
	case "tick":
		dt, err := time.ParseDuration(a.words[0])
		if err != nil {
			d.t.Fatal(err)
		}
		d.now = d.now.Add(dt)
		return "now " + rel(d.now)
	case "state":
		r := d.g.Replay
		s := fmt.Sprintf("replays=%d busy=%d busy-since=%s avoid=%s hard=%s cold=%v failed-at=%s",
			r.Replays, r.Busy, rel(r.BusySince), fmtList(r.Avoid), fmtList(r.Hard), r.Cold, rel(d.g.FailedAt))
		if r.Unreach > 0 {
			s += fmt.Sprintf(" unreach=%d unreach-since=%s", r.Unreach, rel(r.UnreachSince))
		}
		return s
	case "thief-token":
		tok, err := strconv.Atoi(a.words[0])
		if err != nil {
			d.t.Fatal(err)
		}
		return fmtEffect(d.g.ThiefToken(d.now, int32(tok)))
	case "thief-broke":
		if d.g.ThiefBroke(d.now, a.flag("progress")) {
			return "replay"
		}
		return "handed back"
	case "should-audit":
		var rate, draw float64
		if _, err := fmt.Sscanf(a.str("rate")+" "+a.str("draw"), "%g %g", &rate, &draw); err != nil {
			d.t.Fatal(err)
		}
		return fmt.Sprint(ShouldAudit(rate, !a.flag("no-checkers"), draw))
	case "route":
		// The paths the router has, best first; it leaves out avoided peers.
		p, err := Route(d.g.Replay, func(avoid []string) (string, error) {
			for _, w := range a.words {
				if !slices.ContainsFunc(strings.Split(w, ","), func(n string) bool { return slices.Contains(avoid, n) }) {
					return w, nil
				}
			}
			return "", routing.ErrNoPath
		})
		if err != nil {
			return "no path: " + err.Error()
		}
		return "path " + p
	case "start":
		ev = Start{Hops: strings.Split(a.words[0], ","), Pos: a.int("pos", 0)}
	case "token":
		ev = TokenArrived{From: a.str("from"), Pos: a.int("pos", 0), Token: int32(a.int("tok", 0))}
	case "reject":
		ev = Rejected{From: a.str("from"), Reason: strings.Join(a.words, " ")}
	case "hop-failed":
		k, ok := kinds[a.str("kind")]
		if !ok {
			d.t.Fatalf("unknown kind %q", a.str("kind"))
		}
		ev = HopFailed{At: a.str("at"), Kind: k, Reason: strings.Join(a.words, " ")}
	case "send-failed":
		words, unreach := a.words, false
		if len(words) > 0 && words[0] == "unreachable" {
			words, unreach = words[1:], true
		}
		ev = SendFailed{Reason: strings.Join(words, " "), Unreachable: unreach}
	case "down":
		ev = PeerDown{Peer: a.words[0], Reason: "peer " + a.words[0] + " down"}
	case "timeout":
		ev = TimedOut{}
	case "delivered":
		ev = Delivered{Finished: a.flag("finished"), Audit: a.flag("audit"), Draining: a.list("draining")}
	case "checked":
		c := Checked{Draining: a.list("draining")}
		switch {
		case a.has("fault"):
			c.Fail = &End{Kind: EndFault, Blame: []string{a.str("fault")}, Reason: "spot check: outputs differ"}
		case a.has("fail"):
			c.Fail = &End{Kind: EndFailure, Blame: []string{a.str("fail")}, Reason: "spot check: no receipt"}
		case !a.flag("pass"):
			d.t.Fatalf("checked: pass, fault= or fail=")
		}
		ev = c
	default:
		d.t.Fatalf("unknown command %q", cmd)
	}
	effs := d.g.Step(d.now, ev)
	if len(effs) == 0 {
		return "nothing"
	}
	var out []string
	for _, e := range effs {
		out = append(out, fmtEffect(e))
	}
	return strings.Join(out, "\n")
}
