package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// Answers in other APIs' shapes. /v1/responses (OpenAI's Responses API,
// responses.go) and /v1/messages (Anthropic's Messages API, messages.go)
// decode into the same genRequest as a chat completion (messages for the
// chat template, tools, sampling) and run through the same call: the
// same generation, the same output parser, the same keep-alives, metrics
// and dashboard record. Only the answer's wire shape differs, and a shape
// writes it.

// shape writes one API's answers.
type shape interface {
	// idPrefix prefixes the answer's ID.
	idPrefix() string
	// param is the request field a prompt over the context is blamed on.
	param() string
	// whole writes the answer of a finished generation; evs are its
	// output, parsed.
	whole(w http.ResponseWriter, c *call, res node.Result, evs []chatparse.Event)
	// open writes a stream's first events, once the generation is
	// admitted (c.prompt is known).
	open(out *sse, c *call)
	// events streams parsed output.
	events(out *sse, c *call, evs []chatparse.Event)
	// close writes a stream's last events, after all of its output.
	close(out *sse, c *call, res node.Result)
	// fail ends a started stream with an error event.
	fail(out *sse, c *call, e *apiError)
}

// noThinking asks the template for an answer without a thought: the
// enable_thinking switch Qwen3's template reads (other templates ignore
// it), unless the request's chat_template_kwargs set it.
func noThinking(req *node.Request) {
	if _, set := req.ChatVars["enable_thinking"]; set {
		return
	}
	if req.ChatVars == nil {
		req.ChatVars = map[string]any{}
	}
	req.ChatVars["enable_thinking"] = false
}

// block is one piece of an answer in the APIs that answer in pieces: a
// run of reasoning, a run of text, or one tool call (a Responses output
// item, an Anthropic content block).
type block struct {
	kind chatparse.Kind
	// id is the block's own ID (a Responses item's "msg_...", "rs_...",
	// "fc_...").
	id   string
	text strings.Builder // Reasoning and Content
	call chatparse.Call  // ToolCall
	// callID names the call: the model's own ID when its syntax carries
	// one (Mistral's), else one made here.
	callID string
	// streaming: the call opened before its arguments were whole
	// (chatparse.CallStart); sent is how many bytes of them went out.
	streaming bool
	sent      int
}

// blockSink hears of blocks as they open, grow and close: a stream's
// events. A whole answer has none.
type blockSink interface {
	opened(i int, b *block)
	grew(i int, b *block, text string)
	closed(i int, b *block)
}

// blocks turns parsed output into blocks, in order: consecutive text of
// one kind is one block; each call is a block of its own, opened and
// closed at once. A stream and a whole answer go through the same
// blocks, so that they agree.
type blocks struct {
	list []*block
	open bool // the last block is reasoning or text and may grow
	sink blockSink
	// ids prefix each kind's block ID (by chatparse.Kind); callPrefix
	// the ID of a call the model did not name.
	ids        [3]string
	callPrefix string
}

// add takes parsed events.
func (bs *blocks) add(evs []chatparse.Event) {
	for _, e := range evs {
		switch e.Kind {
		case chatparse.Content, chatparse.Reasoning:
			if e.Text == "" {
				continue
			}
			if !bs.open || bs.last().kind != e.Kind {
				bs.start(e.Kind)
			}
			b := bs.last()
			b.text.WriteString(e.Text)
			if bs.sink != nil {
				bs.sink.grew(len(bs.list)-1, b, e.Text)
			}
		case chatparse.CallStart:
			b := bs.start(chatparse.ToolCall)
			b.call, b.callID, b.streaming = e.Call, e.Call.ID, true
			if b.callID == "" {
				b.callID = newID(bs.callPrefix)
			}
			if bs.sink != nil {
				bs.sink.opened(len(bs.list)-1, b)
			}
		case chatparse.CallArgs:
			b := bs.last()
			b.sent += len(e.Text)
			if bs.sink != nil {
				bs.sink.grew(len(bs.list)-1, b, e.Text)
			}
		case chatparse.ToolCall:
			if bs.open && bs.last().streaming {
				bs.last().call = e.Call
				bs.closeOpen()
				continue
			}
			b := bs.start(chatparse.ToolCall)
			b.call, b.callID = e.Call, e.Call.ID
			if b.callID == "" {
				b.callID = newID(bs.callPrefix)
			}
			bs.closeOpen()
		}
	}
}

// end closes the last block. An answer with no block at all gets an
// empty text block, so that every answer has its text, if empty.
func (bs *blocks) end() {
	bs.closeOpen()
	if len(bs.list) == 0 {
		bs.start(chatparse.Content)
		bs.closeOpen()
	}
}

// calls is the number of tool calls.
func (bs *blocks) calls() int {
	n := 0
	for _, b := range bs.list {
		if b.kind == chatparse.ToolCall {
			n++
		}
	}
	return n
}

func (bs *blocks) last() *block { return bs.list[len(bs.list)-1] }

// start closes the open block and opens one of kind k.
func (bs *blocks) start(k chatparse.Kind) *block {
	bs.closeOpen()
	b := &block{kind: k}
	if int(k) < len(bs.ids) && bs.ids[k] != "" {
		b.id = newID(bs.ids[k])
	}
	bs.list = append(bs.list, b)
	bs.open = true
	// A call is whole when it comes: its caller sets it and closes the
	// block, which opens it for the sink then.
	if k != chatparse.ToolCall && bs.sink != nil {
		bs.sink.opened(len(bs.list)-1, b)
	}
	return b
}

// closeOpen closes the last block if it is open.
func (bs *blocks) closeOpen() {
	if !bs.open {
		return
	}
	bs.open = false
	if bs.sink == nil {
		return
	}
	i := len(bs.list) - 1
	b := bs.list[i]
	if b.kind == chatparse.ToolCall && !b.streaming {
		bs.sink.opened(i, b)
	}
	bs.sink.closed(i, b)
}

// toolsToChat turns another API's tools array into chat's: the array
// and its bound here, each tool (tools[i]) through one; item names the
// API's tool shape for the error.
func toolsToChat(raw json.RawMessage, item string, one func(t json.RawMessage, param string) (chatToolFn, *apiError)) (json.RawMessage, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, invalid("tools", "tools must be an array of %s", item)
	}
	if len(tools) > maxTools {
		return nil, invalid("tools", "%d tools: at most %d", len(tools), maxTools)
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		fn, e := one(t, fmt.Sprintf("tools[%d]", i))
		if e != nil {
			return nil, e
		}
		out[i] = chatTool{Type: "function", Function: fn}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, invalid("tools", "tools: %v", err)
	}
	return b, nil
}
