package entry

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/internal/scripttest"
)

// The entry's decisions are checked by scripts in testdata, in the style
// of etcd raft's interaction tests and consensus/testdata/leader: each
// script feeds events to the pure functions of this package and
// compares what they did with the expected output under "----"
// (internal/scripttest; -rewrite rewrites them).

// runScripts runs every script under testdata/dir with a fresh driver
// each, which gets a command's first word and the rest.
func runScripts(t *testing.T, dir string, newDriver func(t *testing.T) func(cmd string, args []string) string) {
	scripttest.Run(t, filepath.Join("testdata", dir, "*.txt"), func(t *testing.T) scripttest.Do {
		do := newDriver(t)
		return func(line string) (string, error) {
			f := strings.Fields(line)
			return do(f[0], f[1:]), nil
		}
	})
}

// args is a command's key=value arguments and bare words.
type args struct {
	t     *testing.T
	kv    map[string]string
	words []string
}

func parseArgs(t *testing.T, in []string) args {
	a := args{t: t, kv: map[string]string{}}
	for _, s := range in {
		if k, v, ok := strings.Cut(s, "="); ok {
			a.kv[k] = v
		} else {
			a.words = append(a.words, s)
		}
	}
	return a
}

func (a args) has(k string) bool { _, ok := a.kv[k]; return ok }

func (a args) str(k string) string { return a.kv[k] }

func (a args) list(k string) []string {
	if a.kv[k] == "" {
		return nil
	}
	return strings.Split(a.kv[k], ",")
}

func (a args) int(k string, def int) int {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		a.t.Fatalf("%s=%q: %v", k, v, err)
	}
	return n
}

func (a args) dur(k string, def time.Duration) time.Duration {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.t.Fatalf("%s=%q: %v", k, v, err)
	}
	return d
}

func (a args) flag(w string) bool {
	for _, x := range a.words {
		if x == w {
			return true
		}
	}
	return false
}

var scriptT0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

// rel prints an instant relative to the script's start.
func rel(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + t.Sub(scriptT0).String()
}

func fmtList(xs []string) string {
	if len(xs) == 0 {
		return "-"
	}
	return strings.Join(xs, ",")
}

func fmtEffect(e Effect) string {
	switch e := e.(type) {
	case Send:
		s := "send step"
		if e.Prefill {
			s = "send prefill"
		}
		if e.Replay {
			s += " (replay)"
		}
		return s
	case Deliver:
		s := fmt.Sprintf("deliver %d", e.Token)
		if e.Recovered {
			s += fmt.Sprintf(" (recovered after %v)", e.Latency)
		}
		return s
	case Audit:
		return "audit"
	case Done:
		return "done"
	case Close:
		return fmt.Sprintf("close: %s blame=%s: %s", e.End.Kind, fmtList(e.End.Blame), e.End.Reason)
	case Rewind:
		return "rewind " + e.Peer
	case Backoff:
		return fmt.Sprintf("backoff %v (retry %d)", e.Delay, e.Retry)
	case Reroute:
		s := fmt.Sprintf("reroute avoid=%s hard=%s", fmtList(e.Avoid), fmtList(e.Hard))
		if e.Cold {
			s += " cold"
		}
		if e.Failure {
			s += " (hop failure)"
		}
		return s
	case Fail:
		why := map[FailKind]string{FailBusy: "busy too long", FailReplays: "replays exhausted", FailUnreachable: "unreachable too long"}[e.Why]
		return fmt.Sprintf("fail: %s after %d replays (last: %s)", why, e.Replays, e.End.Reason)
	}
	return fmt.Sprintf("unknown effect %T", e)
}
