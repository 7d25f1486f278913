// Package scripttest runs the data-driven scripts that check the pure
// decisions (consensus's leader, node/entry, node/stage/sched), in the
// style of etcd raft's interaction tests: a script is commands, each
// followed by a line "----" and its expected output up to a blank line;
// lines starting with # are comments. With -rewrite the expected outputs
// are written from what the code does now; review the diff before
// committing it.
//
// It owns the script format and nothing else: what a command means is
// the driver's. Only tests import it.
package scripttest

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of the scripts under testdata")

// Do runs one command line of a script and returns its output; an error
// fails the test at once (a script the driver cannot read).
type Do func(line string) (string, error)

// Run runs every script that glob matches as a subtest, each with a
// fresh driver from newDriver. It fails when glob matches none.
func Run(t *testing.T, glob string, newDriver func(t *testing.T) Do) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scripts match %s", glob)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScript(t, f, newDriver(t)) })
	}
}

// command is one command of a script and its expected output.
type command struct {
	line, want string
	at         int // line number; -1 for a comment between commands
}

func parse(t *testing.T, data string) (cmds []command) {
	t.Helper()
	lines := strings.Split(data, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			// Comments before the first command stay on rewrite
			// (leadingComments); later ones are kept in place.
			if len(cmds) > 0 && strings.HasPrefix(l, "#") {
				cmds = append(cmds, command{line: l, at: -1})
			}
			continue
		}
		c := command{line: l, at: i + 1}
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

func runScript(t *testing.T, path string, do Do) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cmds := parse(t, string(data))
	var out strings.Builder
	for i, c := range cmds {
		if i > 0 && cmds[i-1].at >= 0 {
			out.WriteString("\n")
		}
		if c.at < 0 {
			out.WriteString(c.line + "\n")
			continue
		}
		got, err := do(c.line)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, c.at, c.line, err)
		}
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
