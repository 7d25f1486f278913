package engine

import (
	"fmt"
	"regexp"
	"strings"
)

// gonja (v2.9.1, the newest) parses a conditional expression, `a if c else
// b`, only as the whole of a {{ }} output or of a {% set %} value. Inside
// brackets, as Gemma 3's `'...' + (first_user_prefix if loop.first else
// "")`, it stops with "Unbalanced parenthesis". hoistConditionals rewrites
// such a template into one gonja parses and that renders the same: each
// conditional that is a bracketed element (a parenthesized group, a call
// argument, a list item, a subscript) moves into a {% set %} written just
// before its tag, under a fresh name that takes its place:
//
//	{{ 'x' + (p if loop.first else '') }}
//	{%+ set __strata_cond0 = p if loop.first else '' %}{{ 'x' + (__strata_cond0) }}
//
// The set tag carries the tag's own left whitespace control, or `+` before
// {{ (which lstrip_blocks must leave alone), so the rendered whitespace is
// unchanged; nothing follows it on its line, so trim_blocks removes nothing.
// The hoisted expression is evaluated a little earlier than in place, which
// changes nothing for templates, whose expressions have no side effects.
// It reports false when it cannot rewrite (unbalanced brackets, a
// conditional in an {% elif %}, before which nothing can be written).

var rawEnd = regexp.MustCompile(`\{%[-+]?\s*endraw\s*[-+]?%\}`)

func hoistConditionals(src string) (string, bool) {
	var out strings.Builder
	h := &hoister{}
	for i := 0; i < len(src); {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		j += i
		out.WriteString(src[i:j])
		switch src[j+1] {
		case '#':
			k := strings.Index(src[j+2:], "#}")
			if k < 0 {
				return "", false
			}
			out.WriteString(src[j : j+2+k+2])
			i = j + 2 + k + 2
			continue
		case '{', '%':
		default:
			out.WriteByte('{')
			i = j + 1
			continue
		}
		block := src[j+1] == '%'
		closer := "}}"
		if block {
			closer = "%}"
		}
		end := tagEnd(src, j+2, closer)
		if end < 0 {
			return "", false
		}
		tag := src[j:end]
		body := tag[2 : len(tag)-2]
		mark := ""
		if strings.HasPrefix(body, "-") || strings.HasPrefix(body, "+") {
			mark, body = body[:1], body[1:]
		}
		word := ""
		if f := strings.Fields(body); block && len(f) > 0 {
			word = strings.TrimRight(f[0], "-+")
		}
		if word == "raw" {
			loc := rawEnd.FindStringIndex(src[end:])
			if loc == nil {
				return "", false
			}
			out.WriteString(src[j : end+loc[1]])
			i = end + loc[1]
			continue
		}
		h.sets = h.sets[:0]
		rewritten, _, ok := h.group(body, 0, 0)
		if !ok {
			return "", false
		}
		if len(h.sets) > 0 {
			if word == "elif" {
				return "", false
			}
			setMark := mark
			if setMark == "" && !block {
				setMark = "+"
			}
			for _, s := range h.sets {
				fmt.Fprintf(&out, "{%%%s set %s %%}", setMark, s)
			}
		}
		out.WriteString(tag[:2] + mark + rewritten + closer)
		i = end
	}
	return out.String(), true
}

// tagEnd is the index just past the closer of the tag whose body starts at
// i, skipping string literals; -1 when there is none.
func tagEnd(s string, i int, closer string) int {
	for i < len(s) {
		switch {
		case s[i] == '\'' || s[i] == '"':
			i = skipString(s, i)
		case strings.HasPrefix(s[i:], closer):
			return i + len(closer)
		default:
			i++
		}
	}
	return -1
}

// skipString is the index just past the string literal opening at s[i].
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return i + 1
		}
	}
	return len(s)
}

type hoister struct {
	n    int      // names given so far in this template
	sets []string // "name = expression" of the tag being rewritten, in order
}

var closing = map[byte]byte{'(': ')', '[': ']', '{': '}'}

// group rewrites s[i:] up to the bracket close that ends the group (the end
// of s when close is 0), hoisting the conditional elements of ( and [
// groups, inner ones first; it returns the text and the index past close.
func (h *hoister) group(s string, i int, close byte) (string, int, bool) {
	var out, elem strings.Builder
	flush := func() {
		e := elem.String()
		elem.Reset()
		if close == 0 || close == '}' {
			out.WriteString(e)
			return
		}
		// A keyword argument keeps its name; only its value moves.
		prefix := ""
		if m := kwargName.FindString(e); m != "" && !strings.HasPrefix(e[len(m):], "=") {
			prefix, e = m, e[len(m):]
		}
		if !topLevelCond(e) {
			out.WriteString(prefix + e)
			return
		}
		name := fmt.Sprintf("__strata_cond%d", h.n)
		h.n++
		h.sets = append(h.sets, name+" = "+strings.TrimSpace(e))
		out.WriteString(prefix + name)
	}
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := skipString(s, i)
			elem.WriteString(s[i:j])
			i = j
		case closing[c] != 0:
			inner, j, ok := h.group(s, i+1, closing[c])
			if !ok {
				return "", 0, false
			}
			elem.WriteByte(c)
			elem.WriteString(inner)
			elem.WriteByte(closing[c])
			i = j
		case close != 0 && c == close:
			flush()
			return out.String(), i + 1, true
		case c == ')' || c == ']' || c == '}':
			return "", 0, false
		case c == ',' && close != 0:
			flush()
			out.WriteByte(',')
			i++
		default:
			elem.WriteByte(c)
			i++
		}
	}
	if close != 0 {
		return "", 0, false
	}
	flush()
	return out.String(), i, true
}

// kwargName matches the `name=` of a keyword argument (not `==`).
var kwargName = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

// topLevelCond reports whether e, outside strings and brackets, is a
// conditional expression: it has the word `if` and no `:` (a dict entry or
// a slice, left alone).
func topLevelCond(e string) bool {
	depth, cond := 0, false
	for i := 0; i < len(e); {
		c := e[i]
		switch {
		case c == '\'' || c == '"':
			i = skipString(e, i)
			continue
		case closing[c] != 0:
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth == 0 && c == ':':
			return false
		case depth == 0 && isIdentStart(c):
			j := i
			for j < len(e) && (isIdentStart(e[j]) || e[j] >= '0' && e[j] <= '9') {
				j++
			}
			if e[i:j] == "if" {
				cond = true
			}
			i = j
			continue
		}
		i++
	}
	return cond
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// keepMidLineSpace marks with `+` each {% or {# tag that has only spaces
// and tabs between it and the tag before it on the same line, so that
// lstrip_blocks keeps them. Jinja strips the whitespace before a block
// only from the start of a line; gonja (v2.9.1) strips a whitespace-only
// run between two tags too, so `{{ a }} {% if b %}` lost its space. It
// reports false when it cannot follow the template's tags; then the
// template is used as it is.
func keepMidLineSpace(src string) (string, bool) {
	var out strings.Builder
	afterTag := false // the text at i follows a tag's closer
	for i := 0; i < len(src); {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			out.WriteString(src[i:])
			break
		}
		j += i
		kind := src[j+1]
		if kind != '{' && kind != '%' && kind != '#' {
			out.WriteString(src[i : j+1])
			i, afterTag = j+1, false
			continue
		}
		data := src[i:j]
		out.WriteString(data)
		closer := map[byte]string{'{': "}}", '%': "%}", '#': "#}"}[kind]
		var end int
		if kind == '#' {
			if end = strings.Index(src[j+2:], "#}"); end >= 0 {
				end += j + 4
			}
		} else {
			end = tagEnd(src, j+2, closer)
		}
		if end < 0 {
			return "", false
		}
		control := j+2 < len(src) && (src[j+2] == '-' || src[j+2] == '+')
		if kind != '{' && afterTag && data != "" && strings.Trim(data, " \t") == "" && !control {
			out.WriteString(src[j:j+2] + "+" + src[j+2:end])
		} else {
			out.WriteString(src[j:end])
		}
		i, afterTag = end, true
		if f := strings.Fields(strings.Trim(src[j+2:end-2], "-+")); kind == '%' && len(f) > 0 && f[0] == "raw" {
			loc := rawEnd.FindStringIndex(src[end:])
			if loc == nil {
				return "", false
			}
			out.WriteString(src[end : end+loc[1]])
			i = end + loc[1]
		}
	}
	return out.String(), true
}
