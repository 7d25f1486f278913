package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node"
)

// The official clients of /v1/responses (openai, pinned in
// testdata/openai-client) and /v1/messages (@anthropic-ai/sdk, pinned in
// testdata/anthropic-client), which `make npm-deps` installs, against
// real nodes: the shared swarm for text answers, checked against the
// chat completion of the same conversation; a swarm whose model carries
// a template with tool syntax for a tool round trip in the request,
// checked against the template's own rendering of the conversation; and
// a fixture of a Qwen3 output (a thought, two calls) for the parsed
// output as each client reads it.

// toolsSwarm is a 2-node swarm serving a generated qwen2 model whose
// file carries Qwen2.5 7B Instruct's chat template (tools, calls in
// <tool_call>); started by the first test that needs it, closed by
// TestMain.
var toolsSwarm struct {
	once sync.Once
	c    *cluster
	tok  *engine.Tokenizer
	err  error
}

func getToolsSwarm(t *testing.T) (*cluster, *engine.Tokenizer) {
	t.Helper()
	toolsSwarm.once.Do(func() {
		tpl, err := os.ReadFile("../../engine/testdata/chat/templates/Qwen-Qwen2.5-7B-Instruct.jinja")
		if err != nil {
			toolsSwarm.err = err
			return
		}
		path, err := templatedModel(modelDir, "qwen25-tools", string(tpl))
		if err != nil {
			toolsSwarm.err = err
			return
		}
		if toolsSwarm.tok, err = engine.LoadTokenizer(path); err != nil {
			toolsSwarm.err = err
			return
		}
		toolsSwarm.c, toolsSwarm.err = newClusterEach(2, func(int) []node.Option { return []node.Option{node.WithModelFile(path)} })
	})
	if toolsSwarm.err != nil {
		t.Fatal(toolsSwarm.err)
	}
	if syn := toolsSwarm.tok.ChatSyntax(); syn.Tools != engine.ToolsHermes {
		t.Fatalf("the template's syntax is %+v", syn)
	}
	return toolsSwarm.c, toolsSwarm.tok
}

// templatedModel writes a generated 8-layer qwen2 model carrying chat
// template tpl into dir.
func templatedModel(dir, name, tpl string) (string, error) {
	base := filepath.Join(dir, name+"-base.gguf")
	gc := engine.DefaultGenConfig()
	gc.Arch, gc.Layers, gc.Seed = "qwen2", 8, 13
	if err := engine.GenerateFile(base, gc); err != nil {
		return "", err
	}
	f, fh, err := engine.OpenFile(base)
	if err != nil {
		return "", err
	}
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") && kv.Key != "tokenizer.chat_template" {
			gc.Tokenizer = append(gc.Tokenizer, kv)
		}
	}
	fh.Close()
	gc.Tokenizer = append(gc.Tokenizer, engine.KV{Key: "tokenizer.chat_template", Value: tpl})
	path := filepath.Join(dir, name+".gguf")
	return path, engine.GenerateFile(path, gc)
}

// needClient skips the test where node or the client package of
// testdata/DIR is missing; it returns node's path.
func needClient(t *testing.T, dir, pkg string) string {
	t.Helper()
	abs, _ := filepath.Abs(filepath.Join("testdata", dir))
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("no node.js on this machine: the %s client check needs it", pkg)
	}
	if _, err := os.Stat(filepath.Join(abs, "node_modules", pkg, "package.json")); err != nil {
		t.Skipf("the %s npm package is not installed: run make npm-deps (it runs npm ci in %s)", pkg, abs)
	}
	return nodeBin
}

// nodeScript runs a check script of testdata/DIR with node and returns
// its output; it skips where node or the client package is missing.
func nodeScript(t *testing.T, dir, pkg, script string, args ...string) []byte {
	t.Helper()
	nodeBin := needClient(t, dir, pkg)
	abs, _ := filepath.Abs(filepath.Join("testdata", dir))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{script}, args...)...)
	cmd.Dir = abs
	outb, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", dir, script, err, stderr)
	}
	return outb
}

// qwen3Fixture serves qwen3Output (a thought, then two calls) through
// the endpoints' writers.
func qwen3Fixture(t *testing.T) *httptest.Server {
	syn := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	res := node.Result{FinishReason: node.FinishStop, Usage: node.Usage{PromptTokens: 40, CompletionTokens: 60, TotalTokens: 100}}
	hs := httptest.NewServer(http.StripPrefix("/v1", fixture(syn, qwen3Output, res, 5)))
	t.Cleanup(hs.Close)
	return hs
}

const qwen3Reasoning = "The user wants the weather and the time.\nI will call both tools.\n"

// chatOf is the chat completion of a conversation at temperature 0.
func chatOf(t *testing.T, url string, msgs []engine.Message, maxTokens int) (string, usageJSON, string) {
	t.Helper()
	r := completion(t, url+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": maxTokens, "temperature": 0})
	return *r.Choices[0].Message.Content, *r.Usage.(*usageJSON), *r.Choices[0].FinishReason
}

// weatherPrompt is the prompt length of the tool round trip the client
// scripts send, as the model's template renders it.
func weatherPrompt(t *testing.T, tok *engine.Tokenizer, callID string) int {
	t.Helper()
	tools, e := responsesTools(json.RawMessage(`[{"type": "function", "name": "get_weather", "description": "The weather in a city",
		"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]`))
	if e != nil {
		t.Fatal(e)
	}
	msgs := []engine.Message{{Role: "user", Content: "What is the weather in Paris?"},
		{Role: "assistant", ToolCalls: []engine.ToolCall{toolCall(callID, "get_weather", `{"city":"Paris"}`)}},
		{Role: "tool", Content: "22 C and sunny", ToolCallID: callID, Name: "get_weather"}}
	ids, err := tok.EncodeChatVars(msgs, tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	return len(ids)
}

// TestOfficialOpenAIClientResponses: the official openai client's
// responses.create, whole and streamed (its stream helper and
// finalResponse), reads the same answer the chat completion of the same
// conversation gives; a function-call round trip renders as the template
// renders it; the refusals are 400s naming their field; and the client
// reads a thought and two calls the server parsed.
func TestOfficialOpenAIClientResponses(t *testing.T) {
	needClient(t, "openai-client", "openai")
	c := shared.get(t)
	tc, tok := getToolsSwarm(t)
	fx := qwen3Fixture(t)
	outb := nodeScript(t, "openai-client", "openai", "responses.mjs", c.urls[0]+"/v1", tc.urls[0]+"/v1", fx.URL+"/v1")
	t.Logf("openai client saw: %s", outb)
	type usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
	type item struct {
		Type      string `json:"type"`
		ID        string `json:"id"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
		Status    string `json:"status"`
		Content   []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	type refusal struct {
		Status     int    `json:"status"`
		Param      string `json:"param"`
		BadRequest bool   `json:"badRequest"`
	}
	var got struct {
		Whole struct {
			ID, Object, Status, OutputText string
			Output                         []item
			Usage                          usage
		}
		Streamed struct {
			Types              []string
			Seqs               []int
			Deltas, Snapshot   string
			OutputText, Status string
			Usage              usage
		}
		Raw struct {
			Text, Completed string
		}
		PreviousResponse, WebSearch refusal
		Tools                       struct {
			Whole struct {
				Status, OutputText string
				Usage              usage
				Types              []string
			}
			Streamed struct {
				Status, OutputText string
				Usage              usage
			}
		}
		Fixture struct {
			Whole, Streamed []item
			Args, Reasoning string
			Status          string
			ArgDeltas       int
		}
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}

	// Text: the chat completion's answer, through either API.
	chat, cu, finish := chatOf(t, c.urls[1], []engine.Message{{Role: "system", Content: "You tell stories."}, {Role: "user", Content: "Tell me a story."}}, 16)
	w := got.Whole
	wantStatus := map[string]string{node.FinishStop: "completed", node.FinishLength: "incomplete"}[finish]
	if w.Object != "response" || !strings.HasPrefix(w.ID, "resp_") || w.Status != wantStatus || w.OutputText != chat ||
		w.Usage.InputTokens != cu.PromptTokens || w.Usage.OutputTokens != cu.CompletionTokens || w.Usage.TotalTokens != cu.TotalTokens {
		t.Errorf("whole %+v; the chat completion says %q (%s) %+v", w, chat, finish, cu)
	}
	if len(w.Output) != 1 || w.Output[0].Type != "message" || !strings.HasPrefix(w.Output[0].ID, "msg_") || len(w.Output[0].Content) != 1 ||
		w.Output[0].Content[0].Type != "output_text" {
		t.Errorf("output %+v", w.Output)
	}
	s := got.Streamed
	if s.Deltas != chat || s.Snapshot != chat || s.OutputText != chat || s.Status != wantStatus || s.Usage != w.Usage {
		t.Errorf("streamed %+v; whole %q %s %+v", s, chat, wantStatus, w.Usage)
	}
	if n := len(s.Types); n < 8 || s.Types[0] != "response.created" || s.Types[1] != "response.in_progress" || s.Types[n-1] != "response.completed" {
		t.Errorf("stream events %v", s.Types)
	}
	for i, q := range s.Seqs {
		if q != i {
			t.Fatalf("sequence numbers %v", s.Seqs)
		}
	}
	if got.Raw.Text != chat || got.Raw.Completed != wantStatus {
		t.Errorf("raw stream %+v", got.Raw)
	}
	for name, r := range map[string]refusal{"previous_response_id": got.PreviousResponse, "tools[0].type": got.WebSearch} {
		if r.Status != http.StatusBadRequest || !r.BadRequest || r.Param != name {
			t.Errorf("refusal of %s: %+v", name, r)
		}
	}

	// The round trip renders as the template renders the conversation.
	want := weatherPrompt(t, tok, "call_1")
	tw, ts := got.Tools.Whole, got.Tools.Streamed
	if tw.Usage.InputTokens != want || ts.Usage.InputTokens != want || tw.OutputText != ts.OutputText || tw.Status != ts.Status || tw.Usage.OutputTokens == 0 {
		t.Errorf("tool round trip: whole %+v, streamed %+v; the template renders %d tokens", tw, ts, want)
	}

	// The fixture's thought and calls.
	for name, out := range map[string][]item{"whole": got.Fixture.Whole, "streamed": got.Fixture.Streamed} {
		if len(out) != 3 || out[0].Type != "reasoning" || len(out[0].Content) != 1 || out[0].Content[0].Text != qwen3Reasoning ||
			out[1].Type != "function_call" || out[1].Name != "get_weather" || out[1].Arguments != `{"city": "Paris", "unit": "celsius"}` ||
			out[2].Type != "function_call" || out[2].Name != "get_time" || out[2].Arguments != `{"city": "Tōkyō \"東京\""}` ||
			!strings.HasPrefix(out[1].CallID, "call_") || out[1].CallID == out[2].CallID || out[1].Status != "completed" {
			t.Errorf("fixture %s output %+v", name, out)
		}
	}
	// The arguments stream as written (5 bytes a piece here): several
	// deltas a call.
	if got.Fixture.Reasoning != qwen3Reasoning || got.Fixture.Args != `{"city": "Paris", "unit": "celsius"}{"city": "Tōkyō \"東京\""}` || got.Fixture.Status != "completed" ||
		got.Fixture.ArgDeltas < 8 {
		t.Errorf("fixture stream: reasoning %q, arguments %q in %d deltas, status %s", got.Fixture.Reasoning, got.Fixture.Args, got.Fixture.ArgDeltas, got.Fixture.Status)
	}
}

// TestOfficialAnthropicClient: Anthropic's official client's
// messages.create, whole and streamed (its MessageStream and
// finalMessage), reads the same answer the chat completion of the same
// conversation gives; a tool_use/tool_result round trip renders as the
// template renders it; errors are Anthropic's, raised as the client's
// error classes; the key goes as x-api-key; and the client reads a
// thought and two tool_use blocks the server parsed.
func TestOfficialAnthropicClient(t *testing.T) {
	needClient(t, "anthropic-client", "@anthropic-ai/sdk")
	c := shared.get(t)
	tc, tok := getToolsSwarm(t)
	fx := qwen3Fixture(t)
	const key = "s3cret-key"
	keyed, err := New(NodeBackend(c.nodes[2]), WithLogger(testLog()), WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	addr, err := keyed.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	outb := nodeScript(t, "anthropic-client", "@anthropic-ai/sdk", "check.mjs", c.urls[0], "http://"+addr.String(), key, tc.urls[0], fx.URL,
		c.nodes[0].Model().Name, tc.nodes[0].Model().Name)
	t.Logf("anthropic client saw: %s", outb)
	type failure struct {
		Status                       int
		Body                         anthropicError
		IsAPIError, BadRequest, Auth bool
	}
	var got struct {
		Whole    messageOut
		Streamed struct {
			Events []string
			Text   string
			Final  messageOut
		}
		Raw struct {
			Text, Stop string
		}
		Image, AnyTool, WrongKey failure
		RightKey                 struct{ Type, Stop string }
		Tools                    struct{ Whole, Streamed messageOut }
		Forced                   []struct {
			Choice, Stop string
			Content      []struct {
				Type, Name string
				Input      json.RawMessage
			}
		}
		Fixture struct {
			Whole, Streamed messageOut
			Thinking        string
			Inputs          []json.RawMessage
		}
		Count struct {
			Plain, Tools struct {
				InputTokens int `json:"input_tokens"`
			}
		}
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}

	chat, cu, finish := chatOf(t, c.urls[1], []engine.Message{{Role: "system", Content: "You tell stories."}, {Role: "user", Content: "Tell me a story."}}, 16)
	wantStop := map[string]string{node.FinishStop: "end_turn", node.FinishLength: "max_tokens"}[finish]
	w := got.Whole
	if w.Type != "message" || w.Role != "assistant" || !strings.HasPrefix(w.ID, "msg_") || w.summary() != "text:"+chat || str(w.StopReason) != wantStop ||
		w.StopSequence != nil || w.Usage.InputTokens != cu.PromptTokens || w.Usage.OutputTokens != cu.CompletionTokens {
		t.Errorf("whole %+v; the chat completion says %q (%s) %+v", w, chat, finish, cu)
	}
	s := got.Streamed
	if n := len(s.Events); n < 5 || s.Events[0] != "message_start" || s.Events[1] != "content_block_start" || s.Events[n-1] != "message_stop" || s.Events[n-2] != "message_delta" {
		t.Errorf("stream events %v", s.Events)
	}
	if s.Text != chat || s.Final.summary() != w.summary() || str(s.Final.StopReason) != wantStop || s.Final.Usage != w.Usage || s.Final.ID == w.ID {
		t.Errorf("streamed %+v; whole %+v", s, w)
	}
	if got.Raw.Text != chat || got.Raw.Stop != wantStop {
		t.Errorf("raw stream %+v", got.Raw)
	}
	if f := got.Image; f.Status != http.StatusBadRequest || !f.BadRequest || !f.IsAPIError || f.Body.Type != "error" ||
		f.Body.Error.Type != "invalid_request_error" || !strings.Contains(f.Body.Error.Message, `"image" is not supported`) {
		t.Errorf("image: %+v", f)
	}
	if f := got.AnyTool; f.Status != http.StatusBadRequest || !f.BadRequest || !strings.Contains(f.Body.Error.Message, "tools are not supported") {
		t.Errorf("tool_choice any: %+v", f)
	}
	if f := got.WrongKey; f.Status != http.StatusUnauthorized || !f.Auth || f.Body.Error.Type != "authentication_error" {
		t.Errorf("wrong key: %+v", f)
	}
	if got.RightKey.Type != "message" {
		t.Errorf("right key: %+v", got.RightKey)
	}

	want := weatherPrompt(t, tok, "toolu_1")
	tw, ts := got.Tools.Whole, got.Tools.Streamed
	if tw.Usage.InputTokens != want || ts.Usage.InputTokens != want || tw.summary() != ts.summary() || str(tw.StopReason) != str(ts.StopReason) || tw.Usage.OutputTokens == 0 {
		t.Errorf("tool round trip: whole %+v, streamed %+v; the template renders %d tokens", tw, ts, want)
	}

	if got.Count.Plain.InputTokens != w.Usage.InputTokens || got.Count.Tools.InputTokens != want {
		t.Errorf("count_tokens %+v; the messages took %d and %d input tokens", got.Count, w.Usage.InputTokens, want)
	}

	// Forced calls: one tool_use (the named one), its input of the
	// tool's schema: unit c or f and days an integer 1..7, or zone utc
	// or cet; nothing else.
	if len(got.Forced) != 2 {
		t.Fatalf("forced calls: %+v", got.Forced)
	}
	for _, f := range got.Forced {
		var in map[string]any
		ok := f.Stop == "tool_use" && len(f.Content) == 1 && f.Content[0].Type == "tool_use" && json.Unmarshal(f.Content[0].Input, &in) == nil
		if ok && f.Content[0].Name == "get_forecast" {
			days, isNum := in["days"].(float64)
			ok = (in["unit"] == "c" || in["unit"] == "f") && isNum && days == float64(int(days)) && days >= 1 && days <= 7 && len(in) == 2
		} else if ok {
			ok = f.Choice == "any" && f.Content[0].Name == "get_time" && (in["zone"] == "utc" || in["zone"] == "cet") && len(in) == 1
		}
		t.Logf("tool_choice %s: %s %+v", f.Choice, f.Stop, f.Content)
		if !ok {
			t.Errorf("tool_choice %s: %+v", f.Choice, f)
		}
	}

	wantFixture := "thinking:" + qwen3Reasoning + ` | tool_use:get_weather:{"city":"Paris","unit":"celsius"} | tool_use:get_time:{"city":"Tōkyō \"東京\""}`
	for name, m := range map[string]messageOut{"whole": got.Fixture.Whole, "streamed": got.Fixture.Streamed} {
		if m.summary() != wantFixture || str(m.StopReason) != "tool_use" || !strings.HasPrefix(m.Content[1].ID, "toolu_") || m.Content[1].ID == m.Content[2].ID {
			t.Errorf("fixture %s: %s (%s)", name, m.summary(), str(m.StopReason))
		}
	}
	// One input snapshot per input_json_delta: the arguments streamed.
	if got.Fixture.Thinking != qwen3Reasoning || len(got.Fixture.Inputs) < 8 {
		t.Errorf("fixture stream: thinking %q, input snapshots %s", got.Fixture.Thinking, got.Fixture.Inputs)
	}
}

// TestResponsesAndMessagesSwarm: on a real swarm, /v1/responses and
// /v1/messages answer what the chat completion of the same conversation
// answers, whole and streamed (the streams' events adding up to the
// whole answers), and a stop sequence ends a message with stop_reason
// "stop_sequence" naming it. (No node.js needed.)
func TestResponsesAndMessagesSwarm(t *testing.T) {
	c := shared.get(t)
	msgs := []engine.Message{{Role: "system", Content: "You tell stories."}, {Role: "user", Content: "Tell me a story."}}
	chat, cu, finish := chatOf(t, c.urls[0], msgs, 16)

	rreq := map[string]any{"instructions": "You tell stories.", "input": "Tell me a story.", "max_output_tokens": 16, "temperature": 0}
	status, _, body := post(t, c.urls[1]+"/v1/responses", "", rreq)
	var whole responseOut
	if err := json.Unmarshal(body, &whole); err != nil || status != http.StatusOK {
		t.Fatalf("responses: %d %s", status, body)
	}
	wantStatus := map[string]string{node.FinishStop: "completed", node.FinishLength: "incomplete"}[finish]
	if whole.text() != chat || whole.Status != wantStatus || whole.Usage.InputTokens != cu.PromptTokens || whole.Usage.OutputTokens != cu.CompletionTokens {
		t.Fatalf("responses %s; the chat completion says %q (%s) %+v", body, chat, finish, cu)
	}
	rreq["stream"] = true
	status, hdr, body := post(t, c.urls[2]+"/v1/responses", "", rreq)
	if status != http.StatusOK || hdr.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("responses stream: %d %s", status, body)
	}
	_, final := accumulate(t, readEvents(t, string(body)))
	if final.summary() != whole.summary() || final.Status != whole.Status || *final.Usage != *whole.Usage {
		t.Fatalf("responses streamed %s (%s)\nwhole %s (%s)", final.summary(), final.Status, whole.summary(), whole.Status)
	}

	mreq := map[string]any{"system": "You tell stories.", "messages": []map[string]any{{"role": "user", "content": "Tell me a story."}},
		"max_tokens": 16, "temperature": 0}
	status, _, body = post(t, c.urls[1]+"/v1/messages", "", mreq)
	var m messageOut
	if err := json.Unmarshal(body, &m); err != nil || status != http.StatusOK {
		t.Fatalf("messages: %d %s", status, body)
	}
	wantStop := map[string]string{node.FinishStop: "end_turn", node.FinishLength: "max_tokens"}[finish]
	if m.summary() != "text:"+chat || str(m.StopReason) != wantStop || m.Usage.InputTokens != cu.PromptTokens || m.Usage.OutputTokens != cu.CompletionTokens {
		t.Fatalf("messages %s; the chat completion says %q (%s) %+v", body, chat, finish, cu)
	}
	mreq["stream"] = true
	status, _, body = post(t, c.urls[2]+"/v1/messages", "", mreq)
	if status != http.StatusOK {
		t.Fatalf("messages stream: %d %s", status, body)
	}
	_, fm := accumulateMessage(t, readEvents(t, string(body)))
	if fm.summary() != m.summary() || str(fm.StopReason) != wantStop || fm.Usage != m.Usage {
		t.Fatalf("messages streamed %s (%s)\nwhole %s", fm.summary(), str(fm.StopReason), m.summary())
	}

	// A stop sequence: a letter of the answer, after its first character.
	stop := ""
	for i, r := range chat {
		if i > 0 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			stop = string(r)
			break
		}
	}
	if stop == "" {
		t.Logf("answer %q has no letter to stop at: stop_sequences unchecked", chat)
		return
	}
	mreq["stream"] = false
	mreq["stop_sequences"] = []string{"\x00never", stop}
	status, _, body = post(t, c.urls[0]+"/v1/messages", "", mreq)
	if err := json.Unmarshal(body, &m); err != nil || status != http.StatusOK {
		t.Fatalf("messages: %d %s", status, body)
	}
	if want := chat[:strings.Index(chat, stop)]; m.summary() != "text:"+want || str(m.StopReason) != "stop_sequence" || str(m.StopSequence) != stop {
		t.Fatalf("stop %q: %s; want the text %q", stop, body, want)
	}
}
