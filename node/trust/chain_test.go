package trust

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stratanet/strata/internal/scripttest"
)

// TestCheckersScripts runs testdata/checkers: each command is
//
//	checkers FROM-TO holders=ID:A-B,... [not-first=ID] [max=N] [limit=N]
//
// and prints the chains, one a line, in order.
func TestCheckersScripts(t *testing.T) {
	scripttest.Run(t, "testdata/checkers/*.txt", func(t *testing.T) scripttest.Do {
		return func(line string) (string, error) {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "checkers" {
				return "", fmt.Errorf("unknown command %q", line)
			}
			from, to, err := span(f[1])
			if err != nil {
				return "", err
			}
			var hs []Holder
			notFirst, maxLinks, limit := "", 4, 16
			for _, a := range f[2:] {
				k, v, _ := strings.Cut(a, "=")
				switch k {
				case "holders":
					for _, h := range strings.Split(v, ",") {
						id, r, ok := strings.Cut(h, ":")
						if !ok {
							return "", fmt.Errorf("holder %q", h)
						}
						a, b, err := span(r)
						if err != nil {
							return "", err
						}
						hs = append(hs, Holder{ID: id, From: a, To: b})
					}
				case "not-first":
					notFirst = v
				case "max":
					maxLinks, err = strconv.Atoi(v)
				case "limit":
					limit, err = strconv.Atoi(v)
				default:
					return "", fmt.Errorf("unknown argument %q", a)
				}
				if err != nil {
					return "", err
				}
			}
			cs := Checkers(from, to, hs, notFirst, maxLinks, limit)
			if len(cs) == 0 {
				return "none", nil
			}
			var out []string
			for _, c := range cs {
				out = append(out, format(c))
			}
			return strings.Join(out, "\n"), nil
		}
	})
}

func span(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("range %q is not A-B", s)
	}
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("range %q", s)
	}
	return x, y, nil
}

func format(c []Link) string {
	var parts []string
	for _, l := range c {
		parts = append(parts, fmt.Sprintf("%s[%d,%d)", l.ID, l.From, l.To))
	}
	return strings.Join(parts, " ")
}

// TestCheckersExhaustive compares Checkers with a brute force over every
// map of up to three holders on five layers, and of four on four (every
// range of each), every
// span [from, to) and every not-first: the brute force tries every
// sequence of distinct holders with every set of split points, which
// Checkers never does (it splits greedily). They must agree on which
// holder sequences can check with the fewest links, and every chain
// Checkers returns must be a valid one, in the documented order.
func TestCheckersExhaustive(t *testing.T) {
	for _, c := range []struct{ layers, holders int }{{5, 3}, {4, 4}} {
		t.Run(fmt.Sprintf("%d-layers-%d-holders", c.layers, c.holders), func(t *testing.T) {
			exhaust(t, c.layers, c.holders)
		})
	}
}

func exhaust(t *testing.T, layers, holders int) {
	var ranges [][2]int
	for a := 0; a < layers; a++ {
		for b := a + 1; b <= layers; b++ {
			ranges = append(ranges, [2]int{a, b})
		}
	}
	ids := []string{"a", "b", "c", "d"}[:holders]
	maps, chains := 0, 0
	var hs []Holder
	var rec func(n int)
	rec = func(n int) {
		if n > 0 {
			for from := 0; from < layers; from++ {
				for to := from + 1; to <= layers; to++ {
					for _, nf := range []string{"", "a"} { // none, or the first holder
						for _, maxLinks := range []int{1, 2, 4} {
							chains += checkOne(t, hs, from, to, nf, maxLinks)
						}
					}
				}
			}
			maps++
		}
		if n == len(ids) || t.Failed() {
			return
		}
		for _, r := range ranges {
			hs = append(hs, Holder{ID: ids[n], From: r[0], To: r[1]})
			rec(n + 1)
			hs = hs[:len(hs)-1]
		}
	}
	rec(0)
	t.Logf("%d maps, %d chains checked", maps, chains)
}

// checkOne checks Checkers against the brute force on one case and
// returns how many chains it returned.
func checkOne(t *testing.T, hs []Holder, from, to int, notFirst string, maxLinks int) int {
	t.Helper()
	got := Checkers(from, to, hs, notFirst, maxLinks, 1000)
	want, fewest := brute(hs, from, to, notFirst, maxLinks)
	where := fmt.Sprintf("holders %v, [%d,%d), not-first %q, max %d", hs, from, to, notFirst, maxLinks)
	if fewest == 0 {
		if len(got) != 0 {
			t.Fatalf("%s: no chain exists, got %v", where, got)
		}
		return 0
	}
	if len(got) == 0 || len(got[0]) != fewest {
		t.Fatalf("%s: got %v, want a first chain of %d links", where, got, fewest)
	}
	index := map[string]int{}
	for k, h := range hs {
		index[h.ID] = k
	}
	var shortest []string
	for k, c := range got {
		if len(c) > maxLinks || (k > 0 && len(c) < len(got[k-1])) {
			t.Fatalf("%s: chain %d of %d links out of order: %v", where, k, len(c), got)
		}
		if k > 0 && len(c) == len(got[k-1]) && !less(got[k-1], c, index) {
			t.Fatalf("%s: chains %d and %d not in holder order: %v", where, k-1, k, got)
		}
		r := from
		for j, l := range c {
			h := hs[index[l.ID]]
			if l.From != r || l.To <= l.From || l.From < h.From || l.To > h.To || dup(c[:j], l.ID) || (j == 0 && l.ID == notFirst) {
				t.Fatalf("%s: invalid chain %v", where, c)
			}
			r = l.To
		}
		if r != to {
			t.Fatalf("%s: chain %v ends at %d", where, c, r)
		}
		if len(c) == fewest {
			shortest = append(shortest, seq(c))
		}
	}
	if !slices.Equal(shortest, want) {
		t.Fatalf("%s: the shortest chains' holders are %v, want %v", where, shortest, want)
	}
	return len(got)
}

// brute returns, in holder order, the holder sequences that cover [from,
// to) with the fewest links under any split points, and that number (0:
// none within maxLinks).
func brute(hs []Holder, from, to int, notFirst string, maxLinks int) ([]string, int) {
	for n := 1; n <= maxLinks; n++ {
		var found []string
		var seqs func(prefix []int)
		seqs = func(prefix []int) {
			if len(prefix) == n {
				if splits(hs, prefix, from, to) && hs[prefix[0]].ID != notFirst {
					var ids []string
					for _, k := range prefix {
						ids = append(ids, hs[k].ID)
					}
					found = append(found, strings.Join(ids, " "))
				}
				return
			}
			for k := range hs {
				if !slices.Contains(prefix, k) {
					seqs(append(slices.Clone(prefix), k))
				}
			}
		}
		seqs(nil)
		if len(found) > 0 {
			return found, n
		}
	}
	return nil, 0
}

// splits reports whether some split points give each holder of seq a
// nonempty part of [from, to), in order, within its range.
func splits(hs []Holder, seq []int, from, to int) bool {
	if len(seq) == 0 {
		return from == to
	}
	h := hs[seq[0]]
	for end := from + 1; end <= to; end++ {
		if h.From <= from && end <= h.To && splits(hs, seq[1:], end, to) {
			return true
		}
	}
	return false
}

func seq(c []Link) string {
	var ids []string
	for _, l := range c {
		ids = append(ids, l.ID)
	}
	return strings.Join(ids, " ")
}

func less(a, b []Link, index map[string]int) bool {
	for k := range a {
		if x, y := index[a[k].ID], index[b[k].ID]; x != y {
			return x < y
		}
	}
	return false
}

// TestCheckersBounded: limit and maxLinks cap the answer, and a wide
// swarm with no chain returns at once (the visit bound).
func TestCheckersBounded(t *testing.T) {
	var hs []Holder
	for k := range 12 {
		hs = append(hs, Holder{ID: fmt.Sprint("n", k), From: 0, To: 8})
	}
	if got := Checkers(0, 8, hs, "", 4, 3); len(got) != 3 {
		t.Fatalf("limit 3: %d chains", len(got))
	}
	var gap []Holder
	for k := range 200 {
		gap = append(gap, Holder{ID: fmt.Sprint("g", k), From: 0, To: 3}, Holder{ID: fmt.Sprint("h", k), From: 4, To: 8})
	}
	if got := Checkers(0, 8, gap, "", 4, 8); got != nil {
		t.Fatalf("a map with layer 3 uncovered: %v", got)
	}
	if got := Checkers(0, 8, nil, "", 4, 8); got != nil {
		t.Fatalf("no holders: %v", got)
	}
	if got := Checkers(4, 4, hs, "", 4, 8); got != nil {
		t.Fatalf("an empty span: %v", got)
	}
}
