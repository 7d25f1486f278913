package grammar

import (
	"encoding/json"

	"math/big"
	"strconv"
	"strings"
)

// Integer ranges (minimum, maximum and their exclusive forms on an
// integer): the decimal strings of [lo, hi] as a grammar, by digit count
// and then digit by digit, as a regular expression for a numeric range is
// built. Values are bounded by the integer grammar's digits (maxIntDigits
// in all), which a uint64 magnitude holds.

// maxMag is the largest magnitude the integer grammar writes.
var maxMag = func() uint64 {
	m := uint64(1)
	for range maxIntDigits {
		m *= 10
	}
	return m - 1
}()

// intBounds reads an integer schema's bounds as [lo, hi] (signed, with
// the magnitude bound), and whether any was given.
func intBounds(s *obj, path string) (lo, hi *big.Int, set bool, err error) {
	lo, hi = new(big.Int).Neg(new(big.Int).SetUint64(maxMag)), new(big.Int).SetUint64(maxMag)
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v, ok := s.m[k]
		if !ok {
			continue
		}
		num, ok := v.(json.Number)
		if !ok {
			return nil, nil, false, schemaError(path+"."+k, "must be a number")
		}
		r, ok := new(big.Rat).SetString(string(num))
		if !ok {
			return nil, nil, false, schemaError(path+"."+k, "%s is not a number", num)
		}
		set = true
		// The closest integer bound: ceil for a minimum, floor for a
		// maximum; an exclusive one moves by one when it is an integer.
		q := new(big.Int).Quo(r.Num(), r.Denom()) // toward zero
		exact := r.IsInt()
		switch k {
		case "minimum", "exclusiveMinimum":
			if !exact && r.Sign() > 0 {
				q.Add(q, big.NewInt(1))
			}
			if exact && k == "exclusiveMinimum" {
				q.Add(q, big.NewInt(1))
			}
			if q.Cmp(lo) > 0 {
				lo = q
			}
		default:
			if !exact && r.Sign() < 0 {
				q.Sub(q, big.NewInt(1))
			}
			if exact && k == "exclusiveMaximum" {
				q.Sub(q, big.NewInt(1))
			}
			if q.Cmp(hi) < 0 {
				hi = q
			}
		}
	}
	if lo.Cmp(hi) > 0 {
		return nil, nil, false, schemaError(path, "no integer lies between its minimum and maximum")
	}
	return lo, hi, set, nil
}

// intRange is the rule of the integers in [lo, hi] (within ±maxMag).
func (c *schemaCompiler) intRange(lo, hi *big.Int) int32 {
	b := c.b
	var alts [][]item
	zero := new(big.Int)
	if lo.Sign() < 0 {
		// -v for v in [max(1, -hi), -lo]
		nlo := new(big.Int).Neg(hi)
		if nlo.Sign() < 1 {
			nlo.SetInt64(1)
		}
		nhi := new(big.Int).Neg(lo)
		alts = append(alts, seq(set("-"), ref(c.magRange(nlo.Uint64(), nhi.Uint64()))))
	}
	if hi.Sign() >= 0 {
		plo := lo
		if plo.Cmp(zero) < 0 {
			plo = zero
		}
		alts = append(alts, seq(ref(c.magRange(plo.Uint64(), hi.Uint64()))))
	}
	return b.rule(alts...)
}

// magRange is the rule of the decimal strings (no leading zeros) of the
// magnitudes [lo, hi].
func (c *schemaCompiler) magRange(lo, hi uint64) int32 {
	var alts [][]item
	los, his := strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10)
	for n := len(los); n <= len(his); n++ {
		a, z := los, his
		if n > len(los) {
			a = "1" + strings.Repeat("0", n-1)
		}
		if n < len(his) {
			z = strings.Repeat("9", n)
		}
		alts = append(alts, c.sameLen(a, z))
	}
	return c.b.rule(alts...)
}

// sameLen matches the strings of digits d, len(a) of them, a ≤ d ≤ z.
func (c *schemaCompiler) sameLen(a, z string) []item {
	if a == "" {
		return seq()
	}
	if a[0] == z[0] {
		return append(seq(set(a[:1])), c.sameLen(a[1:], z[1:])...)
	}
	b := c.b
	alts := [][]item{
		append(seq(set(a[:1])), ref(b.rule(c.atLeast(a[1:])...))),
		append(seq(set(z[:1])), ref(b.rule(c.atMost(z[1:])...))),
	}
	if a[0]+1 < z[0] {
		alts = append(alts, seq(cls(a[0]+1, z[0]-1), c.digits(len(a)-1, len(a)-1)))
	}
	return seq(ref(b.rule(alts...)))
}

// atLeast: the strings of len(s) digits ≥ s, as alternatives.
func (c *schemaCompiler) atLeast(s string) [][]item {
	if s == "" {
		return [][]item{seq()}
	}
	alts := [][]item{seq(set(s[:1]), ref(c.b.rule(c.atLeast(s[1:])...)))}
	if s[0] < '9' {
		alts = append(alts, seq(cls(s[0]+1, '9'), c.digits(len(s)-1, len(s)-1)))
	}
	return alts
}

// atMost: the strings of len(s) digits ≤ s, as alternatives.
func (c *schemaCompiler) atMost(s string) [][]item {
	if s == "" {
		return [][]item{seq()}
	}
	alts := [][]item{seq(set(s[:1]), ref(c.b.rule(c.atMost(s[1:])...)))}
	if s[0] > '0' {
		alts = append(alts, seq(cls('0', s[0]-1), c.digits(len(s)-1, len(s)-1)))
	}
	return alts
}
