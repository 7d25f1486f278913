package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/engine/chatparse"
	"github.com/stratanet/strata/node"
)

// TestOfficialOpenAIClient drives the shared 3-node swarm with the
// official openai npm client, which `make test` installs (pinned in
// testdata/openai-client/package-lock.json).
func TestOfficialOpenAIClient(t *testing.T) {
	dir, _ := filepath.Abs("testdata/openai-client")
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node.js on this machine: the openai client check needs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("the openai npm package is not installed: run make test (it runs npm ci in %s)", dir)
	}
	c := shared.get(t)
	const key = "s3cret-key"
	keyed, err := New(NodeBackend(c.nodes[1]), WithLogger(testLog()), WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	addr, err := keyed.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "check.mjs", c.urls[0]+"/v1", "http://"+addr.String()+"/v1", key)
	cmd.Dir = dir
	outb, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("openai client check: %v\n%s", err, stderr)
	}
	var got struct {
		Models          []string
		Completion      string
		Chat            string
		ChatFinish      string
		Streamed        string
		Chunks          int
		UnknownModel    map[string]any
		WrongKey        map[string]any
		RightKeyModels  int
		CompletionUsage map[string]int
		ChatLogprobs    *struct {
			Content []tokenLPOut     `json:"content"`
			Refusal *json.RawMessage `json:"refusal"`
		}
		ChatLogprobsUsage map[string]int
		StreamedLogprobs  []tokenLPOut
		NIndices          []int
		NUsage            map[string]int
		LegacyLogprobs    *legacyLPOut
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}
	t.Logf("openai client saw: models %v, completion %q, chat %q (%s), streamed in %d chunks, unknown model %v, wrong key %v",
		got.Models, got.Completion, got.Chat, got.ChatFinish, got.Chunks, got.UnknownModel, got.WrongKey)
	if len(got.Models) != 1 || got.Models[0] != c.nodes[0].Model().Name {
		t.Errorf("models %v", got.Models)
	}
	if got.Completion == "" || got.CompletionUsage["completion_tokens"] == 0 {
		t.Errorf("completion %q usage %v", got.Completion, got.CompletionUsage)
	}
	if got.Streamed != got.Chat || got.Chunks < 2 {
		t.Errorf("streamed %q in %d chunks, whole %q", got.Streamed, got.Chunks, got.Chat)
	}
	if got.UnknownModel["status"] != float64(404) || got.UnknownModel["isAPIError"] != true || got.UnknownModel["notFound"] != true {
		t.Errorf("unknown model: %v", got.UnknownModel)
	}
	if got.WrongKey["status"] != float64(401) || got.WrongKey["auth"] != true || got.RightKeyModels != 1 {
		t.Errorf("wrong key: %v, right key listed %d models", got.WrongKey, got.RightKeyModels)
	}
	// logprobs as the client reads them: one entry per token, each with
	// its bytes and three alternatives, the chosen (greedy) first.
	if lp := got.ChatLogprobs; lp == nil || len(lp.Content) == 0 || len(lp.Content) != got.ChatLogprobsUsage["completion_tokens"] {
		t.Errorf("chat logprobs %+v, usage %v", got.ChatLogprobs, got.ChatLogprobsUsage)
	} else {
		for i, c := range lp.Content {
			if len(c.TopLogprobs) != 3 || c.TopLogprobs[0].Logprob != c.Logprob || c.Logprob > 0 || len(c.Bytes) == 0 && c.Token != "" {
				t.Errorf("chat logprobs token %d: %+v", i, c)
			}
		}
		if len(got.StreamedLogprobs) != len(lp.Content) {
			t.Errorf("streamed %d logprobs, whole %d", len(got.StreamedLogprobs), len(lp.Content))
		}
		for i := range got.StreamedLogprobs {
			if got.StreamedLogprobs[i].Logprob != lp.Content[i].Logprob || got.StreamedLogprobs[i].Token != lp.Content[i].Token {
				t.Errorf("streamed logprob %d: %+v, whole %+v", i, got.StreamedLogprobs[i], lp.Content[i])
			}
		}
	}
	if len(got.NIndices) != 2 || got.NIndices[0] != 0 || got.NIndices[1] != 1 || got.NUsage["completion_tokens"] < 2 {
		t.Errorf("n = 2: indices %v, usage %v", got.NIndices, got.NUsage)
	}
	if l := got.LegacyLogprobs; l == nil || len(l.Tokens) == 0 || len(l.TokenLogprobs) != len(l.Tokens) || len(l.TopLogprobs) != len(l.Tokens) ||
		len(l.TextOffset) != len(l.Tokens) {
		t.Errorf("legacy logprobs %+v", got.LegacyLogprobs)
	}
	t.Logf("openai client read logprobs of %d tokens (first %+v), n=2 indices %v, legacy %d tokens",
		len(got.StreamedLogprobs), got.ChatLogprobs.Content[0], got.NIndices, len(got.LegacyLogprobs.Tokens))
}

// TestOpenAIClientToolCalls: the official openai client reads the
// server's tool calls, whole and streamed: the stream's deltas, written
// by the server's own code from a Qwen3 output as Qwen3's template
// renders a turn (qwen3Output), accumulate in the client's stream helper
// (which refuses a call missing its id, type, name or arguments) into
// the same calls as the whole answer's.
func TestOpenAIClientToolCalls(t *testing.T) {
	dir, _ := filepath.Abs("testdata/openai-client")
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node.js on this machine: the openai client check needs it")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skipf("the openai npm package is not installed: run make test (it runs npm ci in %s)", dir)
	}
	syn := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		c := &call{g: genRequest{chat: true, stream: body.Stream}, id: "chatcmpl-fixture", created: 1, model: node.ModelInfo{Name: "fixture"}}
		cs := &choiceState{parser: chatparse.New(syn, true, chatparse.WithArgumentDeltas())}
		if !body.Stream {
			var a answer
			a.add(cs.parser.Feed(qwen3Output))
			a.add(cs.parser.End())
			finish := finishOf(node.FinishStop, len(a.calls))
			out := c.envelope(false, choiceJSON{Message: a.message(), FinishReason: &finish})
			out.Usage = &usageJSON{PromptTokens: 1, CompletionTokens: 1, TotalTokens: 2}
			writeJSON(w, http.StatusOK, out)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		out := &sse{w: w, rc: http.NewResponseController(w)}
		chunk := func(ch choiceJSON) responseJSON { return c.envelope(true, ch) }
		empty := ""
		out.data(chunk(choiceJSON{Delta: &deltaJSON{Role: "assistant", Content: &empty}}))
		for i := 0; i < len(qwen3Output); i += 5 {
			c.parsed(out, chunk, cs, choiceJSON{}, cs.parser.Feed(qwen3Output[i:min(i+5, len(qwen3Output))]))
		}
		c.parsed(out, chunk, cs, choiceJSON{}, cs.parser.End())
		finish := finishOf(node.FinishStop, cs.calls)
		out.data(chunk(choiceJSON{Delta: &deltaJSON{}, FinishReason: &finish}))
		out.raw("data: [DONE]\n\n")
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "tools.mjs", hs.URL+"/v1")
	cmd.Dir = dir
	outb, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("openai client: %v\n%s", err, stderr)
	}
	type msg struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Finish    string              `json:"finish"`
		Reasoning string              `json:"reasoning"`
		ArgDeltas map[string][]string `json:"argDeltas"`
	}
	var got struct{ Whole, Streamed msg }
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("client output %q: %v", outb, err)
	}
	t.Logf("openai client saw: %s", outb)
	wantReasoning := "The user wants the weather and the time.\nI will call both tools.\n"
	for _, m := range []msg{got.Whole, got.Streamed} {
		calls := m.Message.ToolCalls
		if m.Finish != "tool_calls" || len(calls) != 2 || calls[0].Function.Name != "get_weather" || calls[1].Function.Name != "get_time" ||
			calls[0].Function.Arguments != `{"city": "Paris", "unit": "celsius"}` || calls[1].Function.Arguments != `{"city": "Tōkyō \"東京\""}` ||
			calls[0].Type != "function" || !strings.HasPrefix(calls[0].ID, "call_") {
			t.Errorf("calls %+v, finish %q", calls, m.Finish)
		}
	}
	// The arguments streamed as the model wrote them (5 bytes a delta
	// here), in fragments that add up to the call's.
	for i, call := range got.Streamed.Message.ToolCalls {
		frags := got.Streamed.ArgDeltas[strconv.Itoa(i)]
		if len(frags) < 4 || strings.Join(frags, "") != call.Function.Arguments {
			t.Errorf("call %d: argument deltas %q; arguments %q", i, frags, call.Function.Arguments)
		}
	}
	if r := got.Whole.Message.ReasoningContent; r == nil || *r != wantReasoning || got.Streamed.Reasoning != wantReasoning {
		t.Errorf("reasoning: whole %v, streamed %q", r, got.Streamed.Reasoning)
	}
}
