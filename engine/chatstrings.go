package engine

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonja (v2.9.1) gets Python's whitespace-trimming string methods wrong
// where chat templates use them: s.lstrip(), s.rstrip() and s.split()
// without an argument fail ("32 is not a string": the default is the rune
// ' '), s.strip() and the trim filter strip ASCII whitespace only, and a
// cutset of multi-byte characters cuts inside them. pyStrMethods replaces
// those methods with Python's: no argument or None means Unicode
// whitespace (str.isspace), otherwise the characters given.

// strMethodNames are gonja v2.9.1's string methods (its MethodSet cannot
// be listed).
var strMethodNames = []string{"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs",
	"find", "format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
	"isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix",
	"removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith",
	"strip", "swapcase", "title", "upper", "zfill"}

// pySpace is str.isspace for one character: Unicode White_Space and the
// information separators U+001C to U+001F.
func pySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// pyStrip strips the characters of chars (nil: whitespace) from the left
// and/or right of s.
func pyStrip(s string, chars *string, left, right bool) string {
	in := pySpace
	if chars != nil {
		set := *chars
		in = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// charsArgument takes an optional chars argument that may be None.
func charsArgument(args *exec.VarArgs, name string) (*string, error) {
	var v *exec.Value
	if err := args.Take(exec.PositionalArgument(name, exec.AsValue(nil), func(x *exec.Value) error { v = x; return nil })); err != nil {
		return nil, exec.ErrInvalidCall(err)
	}
	return optionalString(v, name)
}

// optionalString is a string argument that may be None (nil).
func optionalString(v *exec.Value, name string) (*string, error) {
	if v == nil || v.IsNil() {
		return nil, nil
	}
	if !v.IsString() {
		return nil, exec.ErrInvalidCall(fmt.Errorf("%s must be a string or None", name))
	}
	s := v.String()
	return &s, nil
}

func pyStrMethods(def *exec.MethodSet[string]) *exec.MethodSet[string] {
	m := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if f, ok := def.Get(name); ok {
			m[name] = f
		}
	}
	strip := func(left, right bool) exec.Method[string] {
		return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
			chars, err := charsArgument(args, "chars")
			if err != nil {
				return nil, err
			}
			return pyStrip(self, chars, left, right), nil
		}
	}
	m["strip"], m["lstrip"], m["rstrip"] = strip(true, true), strip(true, false), strip(false, true)
	m["split"] = func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		var sepv *exec.Value
		maxsplit := -1
		if err := args.Take(
			exec.PositionalArgument("sep", exec.AsValue(nil), func(x *exec.Value) error { sepv = x; return nil }),
			exec.PositionalArgument("maxsplit", exec.AsValue(-1), exec.IntArgument(&maxsplit)),
		); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		sep, err := optionalString(sepv, "sep")
		if err != nil {
			return nil, err
		}
		if sep != nil {
			if *sep == "" {
				return nil, exec.ErrInvalidCall(fmt.Errorf("empty separator"))
			}
			n := -1
			if maxsplit >= 0 {
				n = maxsplit + 1
			}
			out := []any{}
			for _, p := range strings.SplitN(self, *sep, n) {
				out = append(out, p)
			}
			return out, nil
		}
		// Runs of whitespace separate the words; none are empty.
		out := []any{}
		for s := strings.TrimLeftFunc(self, pySpace); s != ""; s = strings.TrimLeftFunc(s, pySpace) {
			if maxsplit >= 0 && len(out) == maxsplit {
				out = append(out, s)
				break
			}
			end := strings.IndexFunc(s, pySpace)
			if end < 0 {
				end = len(s)
			}
			out = append(out, s[:end])
			s = s[end:]
		}
		return out, nil
	}
	return exec.NewMethodSet(m)
}

// filterTrim is Jinja's trim: value.strip(chars).
func filterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var chars *exec.Value
	if err := params.Take(exec.KeywordArgument("chars", exec.AsValue(nil), func(x *exec.Value) error { chars = x; return nil })); err != nil {
		return exec.AsValue(exec.ErrInvalidCall(err))
	}
	var set *string
	if chars != nil && !chars.IsNil() {
		s := chars.String()
		set = &s
	}
	return exec.AsValue(pyStrip(in.String(), set, true, true))
}
