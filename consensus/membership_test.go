package consensus

import (
	"slices"
	"testing"
	"time"
)

func TestChooseVoters(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cands := func(n int) []voterCand {
		var out []voterCand
		for i := range n {
			out = append(out, voterCand{ID: string(rune('a' + i)), Eligible: true, JoinedAt: at(i)})
		}
		return out
	}
	cases := []struct {
		name  string
		cands []voterCand
		self  string
		max   int
		want  []string
	}{
		{"alone", cands(1), "a", 5, []string{"a"}},
		{"two: one voter", cands(2), "b", 5, []string{"b"}},
		{"three", cands(3), "a", 5, []string{"a", "b", "c"}},
		{"four: three longest-joined", cands(4), "d", 5, []string{"a", "b", "d"}},
		{"five", cands(5), "a", 5, []string{"a", "b", "c", "d", "e"}},
		{"five, at most three", cands(5), "a", 3, []string{"a", "b", "c"}},
		{"seven: five", cands(7), "g", 5, []string{"a", "b", "c", "d", "g"}},
	}
	// Current voters stay ahead of longer-joined members.
	sticky := cands(4)
	sticky[3].Voter, sticky[2].Voter = true, true
	cases = append(cases, struct {
		name  string
		cands []voterCand
		self  string
		max   int
		want  []string
	}{"current voters stay", sticky, "a", 5, []string{"a", "c", "d"}})
	// Relayed, draining, unstable or dead members never vote; a lost
	// voter is replaced.
	lost := cands(5)
	lost[1].Voter, lost[1].Eligible = true, false // dead voter
	lost[0].Voter = true
	lost[2].Voter = true
	lost[4].Eligible = false // relayed
	cases = append(cases, struct {
		name  string
		cands []voterCand
		self  string
		max   int
		want  []string
	}{"lost voter replaced", lost, "a", 5, []string{"a", "c", "d"}})
	for _, tc := range cases {
		got := chooseVoters(tc.cands, tc.self, false, tc.max)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	// A draining leader hands its vote on first.
	if got := chooseVoters(cands(2), "a", true, 5); !slices.Equal(got, []string{"b"}) {
		t.Errorf("draining leader: got %v, want [b]", got)
	}
}
