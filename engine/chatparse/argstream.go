package chatparse

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Streamed arguments (WithArgumentDeltas): a call whose text opens with
// its name and then its arguments object ({"name": NAME, "arguments": {)
// is a call from that point on, and its arguments go out as the model
// writes them, each fragment ending where the text so far can still be
// closed into valid JSON. When the object closes, the arguments are its
// text; when it breaks off (invalid JSON, or the output ends), they are
// the last closable prefix, closed. Either way the fragments and the
// call's final remainder add up to its Arguments, which are valid JSON.

// Option configures a Parser.
type Option func(*Parser)

// WithArgumentDeltas makes the parser stream a call's arguments: a
// CallStart event once its name is read, then CallArgs fragments, then
// the whole ToolCall, whose Sent says how much of Arguments the
// fragments carried. It applies to the syntaxes whose calls name the
// function before the arguments in one JSON object (Hermes); other
// calls still come whole. A call opened this way never falls back to
// content, so a whole answer must be parsed with the option too for the
// two to agree.
func WithArgumentDeltas() Option { return func(p *Parser) { p.deltas = true } }

// argsHeader matches the head of a call object up to its arguments
// object: {"name": NAME, "arguments": { (or "parameters"), JSON
// whitespace allowed between. It returns the name and the offset of the
// arguments' "{"; partial: s ends inside the head.
func argsHeader(s string) (name string, at int, m match) {
	i := 0
	ws := func() {
		for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
			i++
		}
	}
	// lit consumes one of lits; startPartial where s ends inside one.
	lit := func(lits ...string) match {
		ws()
		rest := s[i:]
		for _, l := range lits {
			if strings.HasPrefix(rest, l) {
				i += len(l)
				return startMatch
			}
			if strings.HasPrefix(l, rest) {
				return startPartial
			}
		}
		return startNo
	}
	for _, step := range []func() match{
		func() match { return lit("{") },
		func() match { return lit(`"name"`) },
		func() match { return lit(":") },
		func() match {
			ws()
			if i == len(s) {
				return startPartial
			}
			if s[i] != '"' {
				return startNo
			}
			for j := i + 1; j < len(s) && j-i <= maxName+2; j++ {
				switch s[j] {
				case '\\':
					j++
				case '"':
					if json.Unmarshal([]byte(s[i:j+1]), &name) != nil || name == "" || strings.ContainsAny(name, " \t\r\n") {
						return startNo
					}
					i = j + 1
					return startMatch
				}
			}
			if len(s)-i > maxName+2 {
				return startNo
			}
			return startPartial
		},
		func() match { return lit(",") },
		func() match { return lit(`"arguments"`, `"parameters"`) },
		func() match { return lit(":") },
		func() match { return lit("{") },
	} {
		if m := step(); m != startMatch {
			return "", 0, m
		}
	}
	return name, i - 1, startMatch
}

// JSON scanner modes.
const (
	jKeyOrEnd   = iota // after "{": a key or "}"
	jKey               // after "," in an object
	jColon             // after a key
	jValueOrEnd        // after "[": a value or "]"
	jValue             // after ":" or "," in an array
	jAfter             // after a value: "," or a closer
	jString            // inside a string
	jNumber            // inside a number
	jLiteral           // inside true, false or null
	jDone              // the top object closed
	jBad               // not JSON
)

// argScanner checks a JSON object as it streams, byte by byte, and keeps
// the last offset at which the text so far can be closed into valid JSON
// (safe) and the text that closes it there (heal).
type argScanner struct {
	stack []byte // open containers: '{' or '['
	mode  int
	key   bool   // the string is a key
	esc   int    // inside an escape: 1 after "\", 2..5 in \uXXXX
	num   int    // number state (numInt, ...)
	lit   string // the rest of a literal
	n     int    // bytes scanned
	safe  int
	heal  string
}

func newArgScanner() *argScanner {
	// The header has consumed the "{".
	return &argScanner{stack: []byte{'{'}, mode: jKeyOrEnd, n: 1, safe: 1, heal: "}"}
}

// Number states.
const (
	numSign  = iota // after "-"
	numZero         // a leading 0
	numInt          // integer digits
	numDot          // after "."
	numFrac         // fraction digits
	numE            // after "e"
	numESign        // after the exponent's sign
	numExp          // exponent digits
)

// feed scans text (the arguments so far, from their "{") past the n
// bytes already scanned; it stops at the end of the object or at the
// first byte that is not JSON.
func (a *argScanner) feed(text string) {
	for a.n < len(text) && a.mode != jDone && a.mode != jBad {
		if !a.step(text[a.n]) {
			a.mode = jBad
			return
		}
		a.n++
		a.mark(text[:a.n])
	}
}

// mark records a safe point after the byte just scanned.
func (a *argScanner) mark(upTo string) {
	closers := func() string {
		var b strings.Builder
		for k := len(a.stack) - 1; k >= 0; k-- {
			b.WriteByte(map[byte]byte{'{': '}', '[': ']'}[a.stack[k]])
		}
		return b.String()
	}
	switch {
	case a.mode == jDone:
		a.safe, a.heal = a.n, ""
	case a.mode == jAfter || a.mode == jKeyOrEnd || a.mode == jValueOrEnd ||
		a.mode == jNumber && (a.num == numZero || a.num == numInt || a.num == numFrac || a.num == numExp):
		a.safe, a.heal = a.n, closers()
	case a.mode == jString && !a.key && a.esc == 0 && utf8.ValidString(tailRune(upTo)):
		a.safe, a.heal = a.n, `"`+closers()
	}
}

// tailRune is s's last bytes from the start of its last rune, so that a
// fragment never ends inside a UTF-8 sequence.
func tailRune(s string) string {
	for k := len(s) - 1; k >= 0 && k >= len(s)-4; k-- {
		if utf8.RuneStart(s[k]) {
			return s[k:]
		}
	}
	return ""
}

// step takes one byte; false: it is not JSON here.
func (a *argScanner) step(c byte) bool {
	switch a.mode {
	case jString:
		switch {
		case a.esc == 1:
			switch c {
			case 'u':
				a.esc = 2
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				a.esc = 0
			default:
				return false
			}
		case a.esc >= 2:
			if !isHex(c) {
				return false
			}
			if a.esc++; a.esc == 6 {
				a.esc = 0
			}
		case c == '\\':
			a.esc = 1
		case c == '"':
			if a.key {
				a.mode = jColon
			} else {
				a.mode = jAfter
			}
		case c < 0x20:
			return false
		}
		return true
	case jNumber:
		if a.number(c) {
			return true
		}
		if a.num != numZero && a.num != numInt && a.num != numFrac && a.num != numExp {
			return false
		}
		a.mode = jAfter
		return a.step(c)
	case jLiteral:
		if a.lit[0] != c {
			return false
		}
		if a.lit = a.lit[1:]; a.lit == "" {
			a.mode = jAfter
		}
		return true
	}
	if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
		return true
	}
	top := a.stack[len(a.stack)-1]
	switch a.mode {
	case jKeyOrEnd, jKey:
		if c == '}' && a.mode == jKeyOrEnd {
			return a.close()
		}
		if c != '"' {
			return false
		}
		a.mode, a.key = jString, true
	case jColon:
		if c != ':' {
			return false
		}
		a.mode = jValue
	case jValueOrEnd, jValue:
		if c == ']' && a.mode == jValueOrEnd {
			return a.close()
		}
		return a.value(c)
	case jAfter:
		switch {
		case c == ',' && top == '{':
			a.mode = jKey
		case c == ',':
			a.mode = jValue
		case c == '}' && top == '{', c == ']' && top == '[':
			return a.close()
		default:
			return false
		}
	}
	return true
}

// value starts a value at c.
func (a *argScanner) value(c byte) bool {
	switch {
	case c == '"':
		a.mode, a.key = jString, false
	case c == '{':
		a.stack, a.mode = append(a.stack, '{'), jKeyOrEnd
	case c == '[':
		a.stack, a.mode = append(a.stack, '['), jValueOrEnd
	case c == '-':
		a.mode, a.num = jNumber, numSign
	case c == '0':
		a.mode, a.num = jNumber, numZero
	case c >= '1' && c <= '9':
		a.mode, a.num = jNumber, numInt
	case c == 't':
		a.mode, a.lit = jLiteral, "rue"
	case c == 'f':
		a.mode, a.lit = jLiteral, "alse"
	case c == 'n':
		a.mode, a.lit = jLiteral, "ull"
	default:
		return false
	}
	return true
}

func (a *argScanner) close() bool {
	a.stack = a.stack[:len(a.stack)-1]
	a.mode = jAfter
	if len(a.stack) == 0 {
		a.mode = jDone
	}
	return true
}

// number takes c into the number; false: c does not continue it.
func (a *argScanner) number(c byte) bool {
	digit := c >= '0' && c <= '9'
	switch a.num {
	case numSign:
		if c == '0' {
			a.num = numZero
			return true
		}
		if digit {
			a.num = numInt
			return true
		}
	case numZero, numInt:
		switch {
		case digit && a.num == numInt:
			return true
		case c == '.':
			a.num = numDot
			return true
		case c == 'e' || c == 'E':
			a.num = numE
			return true
		}
	case numDot, numFrac:
		if digit {
			a.num = numFrac
			return true
		}
		if a.num == numFrac && (c == 'e' || c == 'E') {
			a.num = numE
			return true
		}
	case numE:
		if c == '+' || c == '-' {
			a.num = numESign
			return true
		}
		if digit {
			a.num = numExp
			return true
		}
	case numESign, numExp:
		if digit {
			a.num = numExp
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
