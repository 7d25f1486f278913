package grammar

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rewriteGolden rewrites testdata/golden from what the code encodes now:
// only for a deliberate change of format, never to make a test pass.
var rewriteGolden = flag.Bool("rewrite-golden", false, "rewrite testdata/golden from the current code")

// The spec's wire form (node's Open.Grammar), one line per spec: a
// schema, and tool calls with kept control tokens (a spec has one or the
// other). Decoding the golden bytes gives each spec back, and it compiles.
func TestGoldenSpec(t *testing.T) {
	specs := []*Spec{
		{Schema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`)},
		{
			Calls: []Call{
				{Prefix: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ", Schema: json.RawMessage(`{"type":"object"}`), Suffix: "}\n</tool_call>"},
				{Prefix: "[TOOL_CALLS]lookup[ARGS]", Schema: json.RawMessage(`{"type":"string","enum":["x","y"]}`), Suffix: ""},
			},
			Keep: []string{"<tool_call>", "</tool_call>"},
		},
	}
	var got []byte
	for _, s := range specs {
		got = append(append(got, s.Encode()...), '\n')
	}
	path := filepath.Join("testdata", "golden", "spec.jsonl")
	if *rewriteGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("specs encode to\n%s\nwant (%s)\n%s", got, path, want)
	}
	lines := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	if len(lines) != len(specs) {
		t.Fatalf("%d golden lines for %d specs", len(lines), len(specs))
	}
	for i, line := range lines {
		back, err := DecodeSpec([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, specs[i]) {
			t.Fatalf("golden spec %d decodes to %+v, want %+v", i, back, specs[i])
		}
		if _, err := Compile(back); err != nil {
			t.Fatalf("golden spec %d does not compile: %v", i, err)
		}
	}
}
