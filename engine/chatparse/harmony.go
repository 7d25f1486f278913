package chatparse

import (
	"encoding/json"
	"strings"

	"github.com/stratanet/strata/engine"
)

// Harmony (gpt-oss): the output is a sequence of messages, each a header
// up to <|message|>, a body, and an end marker. The first message's
// <|start|>assistant is the generation prompt's; the later ones write
// it. The header names the channel (<|channel|>analysis, commentary,
// final), and for a call its recipient (to=functions.NAME, before or
// after the channel) and the arguments' type (json, after <|constrain|>
// or a space):
//
//	<|channel|>analysis<|message|>THINKING<|end|>
//	<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>
//	<|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
const (
	hmStart     = "<|start|>"
	hmChannel   = "<|channel|>"
	hmMessage   = "<|message|>"
	hmConstrain = "<|constrain|>"
	hmEnd       = "<|end|>"
	hmCall      = "<|call|>"
	hmReturn    = "<|return|>"
)

// maxHeader bounds a header read before its <|message|>: past it the
// text is not a header.
const maxHeader = 512

// hmEnds end a message's body; <|start|> ends it too where a model left
// out the end marker (it is not consumed: the next header begins there).
var hmEnds = []string{hmEnd, hmCall, hmReturn, hmStart}

// hmHeaderStarts are how a header may begin, after the <|start|> (which
// harmonyHead drops): the role, a recipient, the channel, or nothing.
var hmHeaderStarts = []string{hmChannel, "assistant", "to=", hmConstrain, hmMessage}

// harmonyMsg is the header of the message whose body is being read.
type harmonyMsg struct {
	channel string
	to      string // the recipient: "functions.NAME" for a call
}

// harmonyHead reads a message's header, up to <|message|>. Text that is
// not a header is answer text.
func (p *Parser) harmonyHead(final bool) bool {
	if strings.HasPrefix(p.buf, hmStart) {
		return p.to(stHarmonyHead, len(hmStart), true)
	}
	if !final && strings.HasPrefix(hmStart, p.buf) {
		return false
	}
	i := strings.Index(p.buf, hmMessage)
	if i >= maxHeader {
		i = -1
	}
	if i < 0 {
		if !final && len(p.buf) < maxHeader && headerPrefix(p.buf) {
			return false
		}
		p.hmSkip = true
		return p.to(stHarmonyText, 0, false)
	}
	m, ok := parseHeader(p.buf[:i])
	if !ok {
		p.hmSkip = true
		return p.to(stHarmonyText, 0, false)
	}
	p.hm = m
	return p.to(stHarmonyBody, i+len(hmMessage), false)
}

// headerPrefix reports whether s may be the start of a header.
func headerPrefix(s string) bool {
	for _, h := range hmHeaderStarts {
		if strings.HasPrefix(s, h) || strings.HasPrefix(h, s) {
			return true
		}
	}
	return false
}

// parseHeader reads [ROLE][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE].
func parseHeader(h string) (harmonyMsg, bool) {
	h = strings.ReplaceAll(h, hmConstrain, " ")
	role, rest, hasChannel := strings.Cut(h, hmChannel)
	if strings.Contains(role, "<|") || strings.Contains(rest, "<|") {
		return harmonyMsg{}, false
	}
	var m harmonyMsg
	read := func(fields []string, channel bool) bool {
		for i, f := range fields {
			switch to, isTo := strings.CutPrefix(f, "to="); {
			case isTo:
				m.to = to
			case channel && i == 0:
				m.channel = f
			case !channel && i == 0 && f == "assistant":
			case channel:
				// the content type (json)
			default:
				return false
			}
		}
		return true
	}
	if !read(strings.Fields(role), false) {
		return harmonyMsg{}, false
	}
	if hasChannel && !read(strings.Fields(rest), true) {
		return harmonyMsg{}, false
	}
	return m, true
}

// harmonyBody reads a message's body: the analysis channel's is
// reasoning, a call's (to=functions.NAME, when calls are parsed) is its
// arguments, the rest's (final, commentary's preambles) is answer text.
func (p *Parser) harmonyBody(final bool) bool {
	at, which := -1, ""
	for _, m := range hmEnds {
		if i := strings.Index(p.buf, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, m
		}
	}
	n := len(p.buf)
	if at >= 0 {
		n = at
	} else if !final {
		hold := 0
		for _, m := range hmEnds {
			hold = max(hold, partialSuffix(p.buf, m))
		}
		n -= hold
	}
	skip := n
	if at >= 0 && which != hmStart {
		skip += len(which)
	}
	name, isCall := strings.CutPrefix(p.hm.to, "functions.")
	switch {
	case isCall && p.tools != engine.ToolsNone:
		if at < 0 && !final {
			return false // a call comes whole
		}
		args := strings.TrimSpace(p.buf[:n])
		var obj map[string]json.RawMessage
		if name == "" || json.Unmarshal([]byte(args), &obj) != nil {
			p.emit(Content, p.buf[:n])
		} else {
			p.call("", name, args)
		}
	case p.hm.channel == "analysis":
		p.emit(Reasoning, p.buf[:n])
	default:
		p.emit(Content, p.buf[:n])
	}
	if at < 0 {
		p.buf = p.buf[n:]
		return false
	}
	return p.to(stHarmonyHead, skip, true)
}

// harmonyText: answer text outside a message (a header that did not
// parse, or text with no header at all), up to the next <|start|> or
// <|channel|>; the end markers are dropped.
func (p *Parser) harmonyText(final bool) bool {
	at, which := -1, ""
	skip := p.hmSkip
	p.hmSkip = false
	for _, m := range []string{hmStart, hmChannel, hmEnd, hmCall, hmReturn} {
		// A header that did not parse starts the text: look past it.
		from := 0
		if skip && (m == hmStart || m == hmChannel) && strings.HasPrefix(p.buf, m) {
			from = len(m)
		}
		if i := strings.Index(p.buf[from:], m); i >= 0 && (at < 0 || from+i < at) {
			at, which = from+i, m
		}
	}
	if at >= 0 {
		p.emit(Content, p.buf[:at])
		switch which {
		case hmStart, hmChannel:
			return p.to(stHarmonyHead, at, false)
		}
		return p.to(stHarmonyHead, at+len(which), true)
	}
	n := len(p.buf)
	if !final {
		hold := 0
		for _, m := range []string{hmStart, hmChannel, hmEnd, hmCall, hmReturn} {
			hold = max(hold, partialSuffix(p.buf, m))
		}
		n -= hold
	}
	p.emit(Content, p.buf[:n])
	p.buf = p.buf[n:]
	return false
}
