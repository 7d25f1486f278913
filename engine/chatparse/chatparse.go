// Package chatparse reads tool calls and reasoning back out of a chat
// model's output text, in the syntax the model's chat template renders
// for an assistant turn (engine.ChatSyntax): the parser follows from the
// template's family, never from guessing at the output.
//
// The parser is incremental: Feed takes the output as it streams, in
// pieces of any size, and returns what is certain so far. Plain text is
// held back only while its tail may be the start of a marker (at most the
// longest marker's length), and whitespace where the output may start a
// call or a thought; a tool call is returned whole once its text is
// complete and parses, so a malformed call comes back as content rather
// than as a call that breaks its client. With WithArgumentDeltas a
// Hermes call instead opens once its name is read and streams its
// arguments (argstream.go). Parse runs the same parser over a whole
// output, so a streamed answer and a whole one agree.
package chatparse

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/stratanet/strata/engine"
)

// Kind is what an event carries.
type Kind int

// Event kinds.
const (
	Content   Kind = iota // answer text
	Reasoning             // thinking text (reasoning_content)
	ToolCall              // one whole tool call
	// CallStart opens a call whose arguments stream (WithArgumentDeltas):
	// Call has its Index and Name, no Arguments yet.
	CallStart
	// CallArgs is a fragment of the open call's arguments, in Text.
	CallArgs
)

// Call is one tool call.
type Call struct {
	// Index is the call's position among the output's calls (0, 1, ...).
	Index int
	// ID is the call's ID when the syntax carries one (Mistral's), else
	// "": the server names it.
	ID   string
	Name string
	// Arguments is the JSON text of the arguments, as the model wrote it.
	Arguments string
}

// Event is a piece of parsed output.
type Event struct {
	Kind Kind
	Text string // Content and Reasoning
	Call Call   // ToolCall, CallStart (Index and Name), CallArgs (Index)
	// Sent is how many bytes of a ToolCall's Arguments its CallArgs
	// fragments carried already; 0 when it had no CallStart.
	Sent int
}

// Result is a whole output, parsed.
type Result struct {
	Content   string
	Reasoning string
	Calls     []Call
}

// Markers.
const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"

	hermesOpen  = "<tool_call>"
	hermesClose = "</tool_call>"

	mistralCalls  = "[TOOL_CALLS]"
	mistralArgs   = "[ARGS]"
	mistralCallID = "[CALL_ID]"

	pythonTag = "<|python_tag|>"

	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// maxName bounds a function name read before its arguments (Mistral's
// [TOOL_CALLS]name[ARGS]): past it, or at whitespace, the text is not a
// call.
const maxName = 256

type state int

const (
	stBegin     state = iota // the start of the output: a thought may open
	stThink                  // inside <think>
	stContent                // answer text
	stHermes                 // after <tool_call>
	stMistral                // after [TOOL_CALLS]
	stDeepSeek               // inside DeepSeek's calls
	stLlamaTag               // after <|python_tag|>
	stLlamaJSON              // a Llama JSON call

	stHarmonyHead // a harmony message's header (harmony.go)
	stHarmonyBody // a harmony message's body
	stHarmonyText // text outside harmony's messages
)

// Parser parses one output.
type Parser struct {
	syn     engine.ChatSyntax
	tools   engine.ToolSyntax // ToolsNone: calls are not parsed
	think   bool
	harmony bool       // the output is harmony's messages (gpt-oss)
	hm      harmonyMsg // the header of the message being read
	hmSkip  bool       // the text begins with a header that did not parse
	markers []string   // the markers that leave content
	st      state
	// lead: at a place where leading whitespace is dropped (the start of
	// the output, of a thought, of the answer after a thought or a call).
	lead bool
	// semi: the lead follows a Llama JSON call, and semicolons between
	// calls are dropped too.
	semi  bool
	buf   string
	calls int
	out   []Event
	// deltas: stream arguments (WithArgumentDeltas); arg is the call
	// whose arguments are streaming.
	deltas bool
	arg    *argCall
}

// argCall is a call whose arguments stream.
type argCall struct {
	name string
	text string // the arguments scanned so far, from their "{"
	sent int    // bytes of text sent as CallArgs
	scan *argScanner
}

// New returns a parser for output in syntax s. tools: parse tool calls
// (the request offered tools and lets the model call them); reasoning is
// parsed whenever the syntax has it.
func New(s engine.ChatSyntax, tools bool, opts ...Option) *Parser {
	p := &Parser{syn: s, think: s.Reasoning == engine.ReasoningThink, lead: true}
	for _, o := range opts {
		o(p)
	}
	if tools {
		p.tools = s.Tools
	}
	switch p.tools {
	case engine.ToolsHermes:
		p.markers = []string{hermesOpen}
	case engine.ToolsMistral:
		p.markers = []string{mistralCalls}
	case engine.ToolsDeepSeek:
		p.markers = []string{dsCallsBegin, dsCallBegin}
	case engine.ToolsLlama3:
		p.markers = []string{pythonTag}
	}
	switch {
	case s.Reasoning == engine.ReasoningHarmony || p.tools == engine.ToolsHarmony:
		p.harmony, p.st = true, stHarmonyHead
	case p.think:
		p.st = stBegin
	default:
		p.st = stContent
	}
	p.lead = p.Active() // an inactive parser passes the text as it is
	return p
}

// Active reports whether the parser changes anything: whether the syntax
// has reasoning, or tool calls that are parsed.
func (p *Parser) Active() bool { return p.think || p.harmony || p.tools != engine.ToolsNone }

// Keep are the control-token markers the output must keep for this
// parser (engine.ChatSyntax.Keep, when tool calls are parsed).
func (p *Parser) Keep() []string {
	if p.tools == engine.ToolsNone && !p.harmony {
		var keep []string
		for _, k := range p.syn.Keep {
			if k == thinkOpen || k == thinkClose {
				keep = append(keep, k)
			}
		}
		return keep
	}
	return p.syn.Keep
}

// Feed takes the next piece of output and returns what is certain.
func (p *Parser) Feed(text string) []Event {
	p.buf += text
	p.run(false)
	return p.take()
}

// End takes the end of the output and returns the rest.
func (p *Parser) End() []Event {
	p.run(true)
	if p.arg != nil {
		p.endArgs(len(p.buf))
	}
	return p.take()
}

// Parse parses a whole output.
func Parse(s engine.ChatSyntax, tools bool, text string, opts ...Option) Result {
	p := New(s, tools, opts...)
	var r Result
	var content, reasoning strings.Builder
	for _, e := range append(p.Feed(text), p.End()...) {
		switch e.Kind {
		case Content:
			content.WriteString(e.Text)
		case Reasoning:
			reasoning.WriteString(e.Text)
		case ToolCall:
			r.Calls = append(r.Calls, e.Call)
		}
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

func (p *Parser) take() []Event {
	out := p.out
	p.out = nil
	return out
}

func (p *Parser) emit(k Kind, text string) {
	if text == "" {
		return
	}
	if n := len(p.out); n > 0 && p.out[n-1].Kind == k {
		p.out[n-1].Text += text
		return
	}
	p.out = append(p.out, Event{Kind: k, Text: text})
}

func (p *Parser) call(id, name, args string) {
	p.out = append(p.out, Event{Kind: ToolCall, Call: Call{Index: p.calls, ID: id, Name: name, Arguments: args}})
	p.calls++
}

// run steps the state machine until it needs more text.
func (p *Parser) run(final bool) {
	for {
		if p.lead {
			cut := " \t\r\n"
			if p.semi {
				cut += ";"
			}
			p.buf = strings.TrimLeft(p.buf, cut)
			if p.buf == "" {
				return
			}
			p.lead, p.semi = false, false
			if p.st == stContent && p.tools == engine.ToolsLlama3 {
				switch llamaStart(p.buf) {
				case startPartial:
					if !final {
						p.lead = true
						return
					}
				case startMatch:
					p.st = stLlamaJSON
				}
			}
		}
		var more bool
		switch p.st {
		case stBegin:
			more = p.begin(final)
		case stThink:
			more = p.thought(final)
		case stContent:
			more = p.content(final)
		case stHermes:
			more = p.hermes(final)
		case stMistral:
			more = p.mistral(final)
		case stDeepSeek:
			more = p.deepseek(final)
		case stLlamaTag:
			more = p.llamaTag(final)
		case stLlamaJSON:
			more = p.llamaJSON(final)
		case stHarmonyHead:
			more = p.harmonyHead(final)
		case stHarmonyBody:
			more = p.harmonyBody(final)
		case stHarmonyText:
			more = p.harmonyText(final)
		}
		if !more || (final && p.buf == "") {
			return
		}
	}
}

// to moves to state st, consuming n bytes; lead drops the whitespace that
// follows.
func (p *Parser) to(st state, n int, lead bool) bool {
	p.buf = p.buf[n:]
	p.st, p.lead = st, lead
	return true
}

// begin: the output may open with <think>; after a prompt that opened it
// (ThinkingOpen), the output is in the thought from the start, and a
// <think> it writes all the same is dropped.
func (p *Parser) begin(final bool) bool {
	switch {
	case strings.HasPrefix(p.buf, thinkOpen):
		return p.to(stThink, len(thinkOpen), true)
	case strings.HasPrefix(thinkOpen, p.buf) && !final:
		return false
	case p.syn.ThinkingOpen:
		return p.to(stThink, 0, false)
	}
	return p.to(stContent, 0, false)
}

// thought: reasoning up to </think>.
func (p *Parser) thought(final bool) bool {
	if i := strings.Index(p.buf, thinkClose); i >= 0 {
		p.emit(Reasoning, p.buf[:i])
		return p.to(stContent, i+len(thinkClose), true)
	}
	n := len(p.buf)
	if !final {
		n -= partialSuffix(p.buf, thinkClose)
	}
	p.emit(Reasoning, p.buf[:n])
	p.buf = p.buf[n:]
	return false
}

// content: answer text up to the first marker that starts a call.
func (p *Parser) content(final bool) bool {
	at, which := -1, ""
	for _, m := range p.markers {
		if i := strings.Index(p.buf, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, m
		}
	}
	if at >= 0 {
		p.emit(Content, p.buf[:at])
		switch which {
		case hermesOpen:
			return p.to(stHermes, at+len(which), false)
		case mistralCalls:
			return p.to(stMistral, at+len(which), true)
		case dsCallsBegin:
			return p.to(stDeepSeek, at+len(which), true)
		case dsCallBegin:
			return p.to(stDeepSeek, at, false)
		case pythonTag:
			return p.to(stLlamaTag, at+len(which), true)
		}
	}
	n := len(p.buf)
	if !final {
		hold := 0
		for _, m := range p.markers {
			hold = max(hold, partialSuffix(p.buf, m))
		}
		n -= hold
	}
	p.emit(Content, p.buf[:n])
	p.buf = p.buf[n:]
	return false
}

// fail gives the text of a call that does not parse back as content,
// marker and all.
func (p *Parser) fail(text string, n int) bool {
	p.emit(Content, text)
	return p.to(stContent, n, false)
}

// hermes: a <tool_call> block's JSON, up to </tool_call> (or the end of
// the output, where a model may stop without closing it).
func (p *Parser) hermes(final bool) bool {
	if p.deltas {
		if p.arg != nil {
			return p.streamArgs(final)
		}
		close := strings.Contains(p.buf, hermesClose)
		switch name, at, m := argsHeader(p.buf); {
		case m == startMatch:
			p.arg = &argCall{name: name, text: "{", scan: newArgScanner()}
			p.out = append(p.out, Event{Kind: CallStart, Call: Call{Index: p.calls, Name: name}})
			p.buf = p.buf[at+1:]
			return true
		case m == startPartial && !close && !final:
			return false
		}
	}
	i := strings.Index(p.buf, hermesClose)
	switch {
	case i >= 0:
	case !final:
		return false
	default:
		i = len(p.buf)
	}
	end := min(i+len(hermesClose), len(p.buf))
	name, args, ok := jsonCall(p.buf[:i], "arguments", "parameters")
	if !ok {
		return p.fail(hermesOpen+p.buf[:end], end)
	}
	p.call("", name, args)
	return p.to(stContent, end, true)
}

// streamArgs scans the open call's arguments and sends what can be
// closed into JSON; once they end, the call ends at </tool_call> (or the
// end of the output), whatever stands between dropped.
func (p *Parser) streamArgs(final bool) bool {
	a := p.arg
	if a.scan.mode != jDone && a.scan.mode != jBad {
		text := a.text + p.buf
		a.scan.feed(text)
		p.buf = text[a.scan.n:]
		a.text = text[:a.scan.n]
		if a.scan.safe > a.sent {
			p.out = append(p.out, Event{Kind: CallArgs, Call: Call{Index: p.calls}, Text: a.text[a.sent:a.scan.safe]})
			a.sent = a.scan.safe
		}
		if a.scan.mode != jDone && a.scan.mode != jBad {
			return false
		}
	}
	i := strings.Index(p.buf, hermesClose)
	switch {
	case i >= 0:
		p.endArgs(i + len(hermesClose))
		return true
	case final:
		p.endArgs(len(p.buf))
		return true
	}
	return false
}

// endArgs ends the open call, dropping n bytes of the output: its
// arguments are the object when it closed, else the last closable
// prefix, closed.
func (p *Parser) endArgs(n int) {
	a := p.arg
	args := a.text
	if a.scan.mode != jDone {
		args = a.text[:a.scan.safe] + a.scan.heal
	}
	p.arg = nil
	p.out = append(p.out, Event{Kind: ToolCall, Call: Call{Index: p.calls, Name: a.name, Arguments: args}, Sent: a.sent})
	p.calls++
	p.to(stContent, n, true)
}

// mistral: after [TOOL_CALLS], a JSON array of calls, or name[ARGS]{...}
// (with [CALL_ID]id before [ARGS] in some tokenizers).
func (p *Parser) mistral(final bool) bool {
	if strings.HasPrefix(p.buf, "[") {
		n, done := jsonEnd(p.buf)
		if !done {
			if final {
				return p.fail(mistralCalls+p.buf, len(p.buf))
			}
			return false
		}
		var list []json.RawMessage
		if err := json.Unmarshal([]byte(p.buf[:n]), &list); err != nil || len(list) == 0 {
			return p.fail(mistralCalls+p.buf[:n], n)
		}
		type parsed struct{ id, name, args string }
		var calls []parsed
		for _, raw := range list {
			name, args, ok := jsonCall(string(raw), "arguments", "parameters")
			if !ok {
				return p.fail(mistralCalls+p.buf[:n], n)
			}
			var obj struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(raw, &obj)
			calls = append(calls, parsed{obj.ID, name, args})
		}
		for _, c := range calls {
			p.call(c.id, c.name, c.args)
		}
		return p.to(stContent, n, true)
	}
	// name[ARGS]{...}
	argsAt := strings.Index(p.buf, mistralArgs)
	head := p.buf
	if argsAt >= 0 {
		head = p.buf[:argsAt]
	} else if !final {
		head = head[:len(head)-max(partialSuffix(head, mistralArgs), partialSuffix(head, mistralCallID))]
	}
	name, id, _ := strings.Cut(head, mistralCallID)
	if strings.ContainsAny(name, " \t\r\n{}[]\"") || len(name) > maxName || (argsAt >= 0 && name == "") {
		return p.fail(mistralCalls, 0)
	}
	if argsAt < 0 {
		if final {
			return p.fail(mistralCalls+p.buf, len(p.buf))
		}
		return false
	}
	rest := p.buf[argsAt+len(mistralArgs):]
	trimmed := strings.TrimLeft(rest, " \t\r\n")
	skip := argsAt + len(mistralArgs) + len(rest) - len(trimmed)
	if trimmed == "" && !final {
		return false
	}
	n, done := jsonEnd(trimmed)
	if !done {
		if final || n < 0 {
			return p.fail(mistralCalls+p.buf, len(p.buf))
		}
		return false
	}
	args := trimmed[:n]
	if !json.Valid([]byte(args)) {
		return p.fail(mistralCalls+p.buf[:skip+n], skip+n)
	}
	p.call(strings.TrimSpace(id), name, args)
	return p.to(stContent, skip+n, true)
}

// deepseek: calls <｜tool▁call▁begin｜>...<｜tool▁call▁end｜>, until
// <｜tool▁calls▁end｜> or text that is not a call.
func (p *Parser) deepseek(final bool) bool {
	switch {
	case strings.HasPrefix(p.buf, dsCallsEnd):
		return p.to(stContent, len(dsCallsEnd), true)
	case strings.HasPrefix(p.buf, dsCallBegin):
		body := p.buf[len(dsCallBegin):]
		i := strings.Index(body, dsCallEnd)
		switch {
		case i >= 0:
		case !final:
			return false
		default:
			i = len(body)
		}
		end := min(len(dsCallBegin)+i+len(dsCallEnd), len(p.buf))
		name, args, ok := deepseekCall(body[:i])
		if !ok {
			return p.fail(p.buf[:end], end)
		}
		p.call("", name, args)
		return p.to(stDeepSeek, end, true)
	case !final && (strings.HasPrefix(dsCallsEnd, p.buf) || strings.HasPrefix(dsCallBegin, p.buf)):
		return false
	}
	return p.to(stContent, 0, false)
}

// deepseekCall reads one call's body: TYPE<｜tool▁sep｜>NAME\n```json\n{...}\n```
// (V3, R1) or NAME<｜tool▁sep｜>{...} (V3.1).
func deepseekCall(body string) (name, args string, ok bool) {
	left, right, found := strings.Cut(body, dsSep)
	if !found {
		return "", "", false
	}
	if strings.TrimSpace(left) == "function" {
		name, right, _ = strings.Cut(right, "\n")
	} else {
		name = left
	}
	name = strings.TrimSpace(name)
	args = strings.TrimSpace(right)
	if rest, fenced := strings.CutPrefix(args, "```"); fenced {
		rest = strings.TrimPrefix(rest, "json")
		rest = strings.TrimSuffix(strings.TrimSpace(rest), "```")
		args = strings.TrimSpace(rest)
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n") || !json.Valid([]byte(args)) {
		return "", "", false
	}
	return name, args, true
}

// llamaTag: after <|python_tag|>, a JSON call; anything else (a built-in
// tool's name.call(...), code) is answer text, the tag dropped.
func (p *Parser) llamaTag(final bool) bool {
	switch llamaStart(p.buf) {
	case startMatch:
		return p.to(stLlamaJSON, 0, false)
	case startPartial:
		if !final {
			return false
		}
	}
	return p.to(stContent, 0, false)
}

// llamaJSON: a {"name": ..., "parameters": {...}} object; then, after
// whitespace or a semicolon, maybe another.
func (p *Parser) llamaJSON(final bool) bool {
	n, done := jsonEnd(p.buf)
	if !done {
		if final || n < 0 {
			return p.fail(p.buf, len(p.buf))
		}
		return false
	}
	// No marker sets this call apart from an answer that is a JSON
	// object with a "name": it must have its arguments too.
	name, args, ok := jsonCall(p.buf[:n], "parameters", "arguments")
	if !ok || !hasKey(p.buf[:n], "parameters", "arguments") {
		return p.fail(p.buf[:n], n)
	}
	p.call("", name, args)
	p.semi = true
	return p.to(stContent, n, true)
}

type match int

const (
	startNo match = iota
	startPartial
	startMatch
)

// llamaStart tells whether s begins a Llama JSON call: {"name": or
// {"type": "function", "name":, JSON whitespace allowed between.
func llamaStart(s string) match {
	best := startNo
	for _, seq := range [][]string{{"{", `"name"`, ":"}, {"{", `"type"`, ":", `"function"`, ",", `"name"`, ":"}} {
		rest := s
		m := startMatch
		for _, tok := range seq {
			rest = strings.TrimLeft(rest, " \t\r\n")
			if rest == "" {
				m = startPartial
				break
			}
			if !strings.HasPrefix(rest, tok) {
				if strings.HasPrefix(tok, rest) {
					m = startPartial
				} else {
					m = startNo
				}
				break
			}
			rest = rest[len(tok):]
		}
		best = max(best, m)
	}
	return best
}

// jsonCall reads {"name": NAME, ARGS_KEY: {...}} with the first of keys
// present as the arguments (an object, or a string holding one); absent
// arguments are {}.
func jsonCall(text string, keys ...string) (name, args string, ok bool) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &obj); err != nil {
		return "", "", false
	}
	if fn, nested := obj["function"]; nested && obj["name"] == nil {
		// {"type": "function", "function": {"name": ..., "arguments": ...}}
		return jsonCall(string(fn), keys...)
	}
	if err := json.Unmarshal(obj["name"], &name); err != nil || name == "" {
		return "", "", false
	}
	args = "{}"
	for _, k := range keys {
		raw, present := obj[k]
		if !present {
			continue
		}
		raw = bytes.TrimSpace(raw)
		var s string
		if json.Unmarshal(raw, &s) == nil && json.Valid([]byte(s)) {
			args = s // stringified arguments, as OpenAI sends them
		} else if len(raw) > 0 && raw[0] == '{' {
			args = string(raw)
		} else {
			return "", "", false
		}
		break
	}
	return name, args, true
}

// hasKey reports whether the JSON object text has one of keys (at its
// top level, or in its "function" object).
func hasKey(text string, keys ...string) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(text), &obj) != nil {
		return false
	}
	for _, k := range keys {
		if _, ok := obj[k]; ok {
			return true
		}
	}
	if fn, ok := obj["function"]; ok {
		return hasKey(string(fn), keys...)
	}
	return false
}

// jsonEnd is the length of the JSON object or array s begins with: done
// when it closes in s; -1 when s does not begin with one.
func jsonEnd(s string) (int, bool) {
	if s == "" || (s[0] != '{' && s[0] != '[') {
		return -1, false
	}
	depth, inStr, esc := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr && c == '"':
			inStr = false
		case inStr:
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(s), false
}

// partialSuffix is the length of the longest proper prefix of m that s
// ends with.
func partialSuffix(s, m string) int {
	for k := min(len(m)-1, len(s)); k > 0; k-- {
		if strings.HasSuffix(s, m[:k]) {
			return k
		}
	}
	return 0
}
