// Package goldentest keeps the golden bytes of the wire and record
// formats for their packages' tests: one "name hex" line per message in
// testdata/golden/FILE, rewritten only under -rewrite-golden (a deliberate
// change of format, never to make a test pass). It is imported by tests
// only.
package goldentest

import (
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite-golden", false, "rewrite testdata/golden from the current code")

// Line is one message's name and encoding.
type Line struct {
	Name  string
	Bytes []byte
}

// Lines compares lines with testdata/golden/file (or writes it under
// -rewrite-golden) and returns the file's lines, decoded, in order, so
// that decoders are checked against the file rather than the encoder.
func Lines(t testing.TB, file string, lines []Line) []Line {
	t.Helper()
	var out strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&out, "%s %s\n", l.Name, hex.EncodeToString(l.Bytes))
	}
	path := filepath.Join("testdata", "golden", file)
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("encodings differ from %s:\n%s\nwant:\n%s", path, out.String(), want)
	}
	var got []Line
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		name, h, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("%s: bad line %q", path, line)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, name, err)
		}
		got = append(got, Line{name, b})
	}
	return got
}

// Read returns testdata/golden/file's lines by name, for a test that
// checks a decoder or a real sender against a file another test writes.
func Read(t testing.TB, file string) map[string][]byte {
	t.Helper()
	path := filepath.Join("testdata", "golden", file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]byte{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, h, ok := strings.Cut(line, " ")
		v, err := hex.DecodeString(h)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", path, line)
		}
		lines[name] = v
	}
	return lines
}
