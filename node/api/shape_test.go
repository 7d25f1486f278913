package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// A fixture answers with a fixed model output through an endpoint's
// shape, as the server writes it: the request decoded and checked by the
// endpoint's own decoder, the output parsed in the syntax of a model
// family, then written whole or streamed in pieces. It lets the
// official clients read tool calls and thoughts that a random model
// never writes.

// fixture is a handler answering every request with output, parsed in
// syntax syn, with result res (its Text is output), streamed in pieces
// of n bytes (whole characters).
func fixture(syn engine.ChatSyntax, output string, res node.Result, n int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		decode, endpoint := decodeResponses, endpointResponses
		if strings.HasSuffix(r.URL.Path, "/messages") {
			decode, endpoint = decodeMessages, endpointMessages
		}
		g, e := decode(b)
		var parser *chatparse.Parser
		if e == nil {
			parser, e = chatParser(node.ModelInfo{Name: "fixture", ChatTemplate: true, ChatSyntax: syn}, &g)
		}
		if e != nil {
			errorWriter(endpoint)(w, e)
			return
		}
		c := &call{g: g, id: newID(g.shape.idPrefix()), created: 1700000000, model: node.ModelInfo{Name: "fixture"}, parsers: []*chatparse.Parser{parser},
			prompt: res.Usage.PromptTokens}
		res.Text = output
		if !g.stream {
			g.shape.whole(w, c, res, append(c.feed(output), c.flush()...))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		out := &sse{w: w, rc: http.NewResponseController(w)}
		g.shape.open(out, c)
		for _, p := range pieces(output, n) {
			g.shape.events(out, c, c.feed(p))
		}
		g.shape.events(out, c, c.flush())
		g.shape.close(out, c, res)
	})
}

// pieces splits s into pieces of about n bytes, at character boundaries
// (as the node's deltas are).
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		k := min(n, len(s))
		for k < len(s) && !utf8.RuneStart(s[k]) {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// namedEvent is one server-sent event: its event: name and its data.
type namedEvent struct {
	name string
	data map[string]any
	raw  string
}

// readEvents reads a whole event stream, checking that each event has a
// name and JSON data.
func readEvents(t *testing.T, body string) []namedEvent {
	t.Helper()
	var evs []namedEvent
	for _, chunk := range strings.Split(body, "\n\n") {
		if strings.TrimSpace(chunk) == "" {
			continue
		}
		var ev namedEvent
		for _, line := range strings.Split(chunk, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.raw = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("stray line %q", line)
			}
		}
		if ev.raw == "" {
			continue // a comment
		}
		if err := json.Unmarshal([]byte(ev.raw), &ev.data); err != nil {
			t.Fatalf("event %q: %v", ev.raw, err)
		}
		if ev.name == "" || ev.data["type"] != ev.name {
			t.Fatalf("event named %q has type %v", ev.name, ev.data["type"])
		}
		evs = append(evs, ev)
	}
	return evs
}

// runFixture posts body to a fixture at path and returns the status
// and the body.
func runFixture(t *testing.T, h http.Handler, path, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec.Code, rec.Body.String()
}

// TestBlocks: parsed events become blocks in order, a run of one kind
// one block, each call its own; a sink hears them open, grow and close
// in that order; an answer with nothing gets one empty text block.
func TestBlocks(t *testing.T) {
	ev := func(k chatparse.Kind, s string) chatparse.Event { return chatparse.Event{Kind: k, Text: s} }
	callEv := func(i int, name string) chatparse.Event {
		return chatparse.Event{Kind: chatparse.ToolCall, Call: chatparse.Call{Index: i, Name: name, Arguments: "{}"}}
	}
	for _, c := range []struct {
		name string
		evs  [][]chatparse.Event
		want string // kinds: r reasoning, t text, c call
		log  string
	}{
		{"nothing", nil, "t", "open0 close0"},
		{"empty text", [][]chatparse.Event{{ev(chatparse.Content, "")}}, "t", "open0 close0"},
		{"text in pieces", [][]chatparse.Event{{ev(chatparse.Content, "a")}, {ev(chatparse.Content, "b"), ev(chatparse.Content, "c")}}, "t",
			"open0 grow0:a grow0:b grow0:c close0"},
		{"thought then text", [][]chatparse.Event{{ev(chatparse.Reasoning, "x"), ev(chatparse.Content, "y")}}, "rt",
			"open0 grow0:x close0 open1 grow1:y close1"},
		{"thought then calls", [][]chatparse.Event{{ev(chatparse.Reasoning, "x")}, {callEv(0, "f")}, {callEv(1, "g")}}, "rcc",
			"open0 grow0:x close0 open1 close1 open2 close2"},
		{"text, call, text", [][]chatparse.Event{{ev(chatparse.Content, "a"), callEv(0, "f"), ev(chatparse.Content, "b")}}, "tct",
			"open0 grow0:a close0 open1 close1 open2 grow2:b close2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log []string
			s := &logSink{log: &log}
			bs := blocks{sink: s, callPrefix: "call_"}
			for _, evs := range c.evs {
				bs.add(evs)
			}
			bs.end()
			var kinds strings.Builder
			for _, b := range bs.list {
				kinds.WriteByte("trc"[b.kind])
				if b.kind == chatparse.ToolCall && !strings.HasPrefix(b.callID, "call_") {
					t.Errorf("call ID %q", b.callID)
				}
			}
			if kinds.String() != c.want || strings.Join(log, " ") != c.log {
				t.Errorf("blocks %q, sink %q; want %q, %q", kinds.String(), strings.Join(log, " "), c.want, c.log)
			}
			// Whole: the same blocks without a sink.
			whole := blocks{}
			for _, evs := range c.evs {
				whole.add(evs)
			}
			whole.end()
			if len(whole.list) != len(bs.list) {
				t.Errorf("whole: %d blocks, streamed %d", len(whole.list), len(bs.list))
			}
		})
	}
}

type logSink struct{ log *[]string }

func (s *logSink) opened(i int, _ *block) { *s.log = append(*s.log, "open"+string(rune('0'+i))) }
func (s *logSink) grew(i int, _ *block, text string) {
	*s.log = append(*s.log, "grow"+string(rune('0'+i))+":"+text)
}
func (s *logSink) closed(i int, _ *block) { *s.log = append(*s.log, "close"+string(rune('0'+i))) }
