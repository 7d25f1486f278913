package testnet

import (
	"strings"
	"testing"
	"time"
)

// TestCheckJoins: a join by name past expect.max_join and one that never
// happened are violations; the founder's start is reported, not held to
// the bound; without public or max_join nothing is checked.
func TestCheckJoins(t *testing.T) {
	sc := &Scenario{Public: &PublicSpec{Swarm: "p", DHTServers: 3}, Expect: Expect{MaxJoin: 30 * time.Second}}
	joins := []JoinReport{
		{Node: "n0", Start: 1, JoinS: 45, Founder: true},
		{Node: "v1", Start: 1, JoinS: 1.2},
		{Node: "v2", Start: 2, JoinS: 31},
		{Node: "v3", Start: 1, JoinS: -1},
	}
	got := checkJoins(sc, joins)
	if len(got) != 2 || !strings.Contains(got[0], "v2 (start 2) joined by name in 31.0 s") || !strings.Contains(got[1], "v3 (start 1) never joined") {
		t.Fatalf("violations %q", got)
	}
	sc.Expect.MaxJoin = 0
	if got := checkJoins(sc, joins); len(got) != 0 {
		t.Fatalf("no bound, violations %q", got)
	}
	var b strings.Builder
	joinsMarkdown(&b, joins)
	if !strings.Contains(b.String(), "| n0 (founded it) | 1 | 45.0 |") || !strings.Contains(b.String(), "| v3 | 1 | never |") {
		t.Fatalf("markdown:\n%s", b.String())
	}
}
