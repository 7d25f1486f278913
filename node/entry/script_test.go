package entry

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The entry's decisions are checked by scripts in testdata, in the style
// of etcd raft's interaction tests and consensus/testdata/leader: each
// script feeds events to the pure functions of this package and
// compares what they did with the expected output under "----". With
// -rewrite the expected outputs are written from what the code does
// now; review the diff before committing it.

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata")

// scriptCmd is one command of a script and its expected output.
type scriptCmd struct {
	line, want string
	at         int // line number; -1 for a comment between commands
}

func parseScript(t *testing.T, data string) (cmds []scriptCmd) {
	t.Helper()
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			if len(cmds) > 0 && strings.HasPrefix(l, "#") {
				cmds = append(cmds, scriptCmd{line: l, at: -1})
			}
			continue
		}
		c := scriptCmd{line: l, at: i + 1}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("line %d: %q is not followed by ----", i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		c.want = strings.Join(out, "\n")
		cmds = append(cmds, c)
	}
	return cmds
}

// runScripts runs every script under dir with a fresh driver each.
func runScripts(t *testing.T, dir string, newDriver func(t *testing.T) func(cmd string, args []string) string) {
	files, err := filepath.Glob(filepath.Join("testdata", dir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripts in testdata/%s", dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f, newDriver(t)) })
	}
}

func runScript(t *testing.T, path string, do func(cmd string, args []string) string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds := parseScript(t, string(data))
	var out strings.Builder
	for i, c := range cmds {
		if i > 0 && (c.at < 0 || cmds[i-1].at >= 0) {
			out.WriteString("\n")
		}
		if c.at < 0 {
			out.WriteString(c.line + "\n")
			continue
		}
		f := strings.Fields(c.line)
		got := do(f[0], f[1:])
		out.WriteString(c.line + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		if !*rewrite && got != c.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, c.at, c.line, got, c.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(leadingComments(string(data))+out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// leadingComments is a script's opening comment block, kept on rewrite.
func leadingComments(data string) string {
	var b strings.Builder
	for _, l := range strings.Split(data, "\n") {
		if !strings.HasPrefix(l, "#") && l != "" {
			break
		}
		b.WriteString(l + "\n")
	}
	return b.String()
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
		why := map[FailKind]string{FailBusy: "busy too long", FailReplays: "replays exhausted"}[e.Why]
		return fmt.Sprintf("fail: %s after %d replays (last: %s)", why, e.Replays, e.End.Reason)
	}
	return fmt.Sprintf("unknown effect %T", e)
}
