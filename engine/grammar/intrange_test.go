package grammar

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestIntRanges: an integer with bounds matches exactly the integers in
// them, checked value by value around the bounds, over random and
// adversarial ranges (zero, sign changes, digit-count changes, the
// safe-integer bounds zod writes, fractional and exclusive bounds).
func TestIntRanges(t *testing.T) {
	type rng struct {
		bounds string
		lo, hi int64
	}
	cases := []rng{
		{`"minimum": 0`, 0, math.MaxInt64},
		{`"minimum": 1, "maximum": 1`, 1, 1},
		{`"minimum": -5, "maximum": 5`, -5, 5},
		{`"minimum": -120, "maximum": -7`, -120, -7},
		{`"minimum": 9, "maximum": 101`, 9, 101},
		{`"minimum": 99, "maximum": 1000`, 99, 1000},
		{`"exclusiveMinimum": 0, "exclusiveMaximum": 10`, 1, 9},
		{`"minimum": 2.5, "maximum": 7.5`, 3, 7},
		{`"minimum": -2.5, "maximum": -0.5`, -2, -1},
		{`"maximum": 0`, math.MinInt64, 0},
		{`"minimum": -9007199254740991, "maximum": 9007199254740991`, -9007199254740991, 9007199254740991},
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 30 {
		a, b := r.Int64N(4000)-2000, r.Int64N(4000)-2000
		cases = append(cases, rng{fmt.Sprintf(`"minimum": %d, "maximum": %d`, min(a, b), max(a, b)), min(a, b), max(a, b)})
	}
	for _, c := range cases {
		g := mustCompile(t, `{"type": "integer", `+c.bounds+`}`)
		var probes []int64
		for _, x := range []int64{c.lo, c.hi, 0, 1, -1, 10, -10, 99, 100, 1000, 9007199254740991, -9007199254740991} {
			for d := int64(-12); d <= 12; d++ {
				probes = append(probes, x+d)
			}
		}
		for _, v := range probes {
			want := v >= c.lo && v <= c.hi
			if got := matches(t, g, strconv.FormatInt(v, 10)); got != want {
				t.Fatalf("%s: %d matched %v, want %v", c.bounds, v, got, want)
			}
		}
		for _, bad := range []string{"-0", "01", "00", "+1", "1.0", "1e2"} {
			if matches(t, g, bad) {
				t.Fatalf("%s: %q matched", c.bounds, bad)
			}
		}
	}
	for _, bad := range []string{`"minimum": 5, "maximum": 4`, `"minimum": "a"`, `"exclusiveMinimum": 1, "exclusiveMaximum": 2`} {
		if _, err := Compile(&Spec{Schema: []byte(`{"type": "integer", ` + bad + `}`)}); err == nil {
			t.Fatalf("%s compiled", bad)
		}
	}
	if _, err := Compile(&Spec{Schema: []byte(`{"type": "number", "minimum": 0}`)}); err == nil {
		t.Fatal("a number's minimum compiled")
	}
}
