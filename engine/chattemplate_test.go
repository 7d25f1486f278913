package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// chatTemplateFiles are the templates checked: each vocabulary's own file
// template (template ""), and templates of testdata/chat/templates set on
// a vocabulary of the same family (see its PROVENANCE.md), plus date.jinja
// (strftime_now, trim/lstrip of blocks, raise_exception on a role) and
// cond.jinja (conditionals in brackets, see hoistConditionals) and
// space.jinja (whitespace between tags on a line, see keepMidLineSpace). Gemma
// 3's own template has a conditional inside parentheses, which gonja
// parses only once hoistConditionals has rewritten it.
var chatTemplateFiles = []struct{ vocab, template string }{
	{"llama3", ""},
	{"llama3_1", ""},
	{"qwen3", ""},
	{"gemma3", ""},
	{"deepseek_v3", ""},
	{"qwen3", "date.jinja"},
	{"qwen3", "cond.jinja"},
	{"qwen3", "space.jinja"},
	{"qwen3", "templates/Qwen-Qwen2.5-7B-Instruct.jinja"},
	{"llama3_1", "templates/meta-llama-Llama-3.1-8B-Instruct.jinja"},
	{"llama3", "templates/meta-llama-Llama-3.2-3B-Instruct.jinja"},
	{"llama2", "templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"},
	{"llama2", "templates/microsoft-Phi-3.5-mini-instruct.jinja"},
	{"llama2", "templates/meta-llama-Llama-2-13b-chat-hf.jinja"},
	{"llama2", "templates/mistralai-Mixtral-8x7B-Instruct-v0.1.jinja"},
	{"gemma3", "templates/google-gemma-7b-it.jinja"},
	{"gemma3", "templates/google-gemma-2-2b-it.jinja"},
	{"gptoss", "templates/openai-gpt-oss-120b.jinja"},
}

// chatTemplateOnly are cases with more variables that only one template
// gets: gpt-oss's builtin_tools, which Llama 3.1's template reads too,
// through a reject filter that @huggingface/jinja 0.5.11 lacks.
var chatTemplateOnly = map[string][]struct {
	file  string
	extra map[string]any
}{
	"openai-gpt-oss-120b": {{"harmony-tools.json", map[string]any{"builtin_tools": []any{"browser", "python"}}}},
}

// TestChatTemplateMatchesHFJinja renders every case of testdata/chat with
// each model file's own tokenizer.chat_template and checks the prompt is
// byte for byte what @huggingface/jinja renders, or that both refuse it
// (raise_exception) with the same message.
func TestChatTemplateMatchesHFJinja(t *testing.T) {
	if testing.Short() {
		t.Skip("short: Node oracle and large vocabularies")
	}
	files, _ := filepath.Glob("testdata/chat/*.json")
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no cases in testdata/chat")
	}
	var jobs, rjobs []hfJob
	var toks, rtoks []*Tokenizer
	var names, rnames []string
	for _, v := range chatTemplateFiles {
		tok, name := hfTestTokenizer(t, v.vocab), v.vocab
		if v.template != "" {
			tpl, err := os.ReadFile(filepath.Join("testdata/chat", v.template))
			if err != nil {
				t.Fatal(err)
			}
			tok, name = hfTestTokenizerWith(t, v.vocab, string(tpl)), strings.TrimSuffix(filepath.Base(v.template), ".jinja")
		}
		if !tok.HasChatTemplate() {
			t.Fatalf("%s: the file has no chat template", v)
		}
		for _, f := range files {
			c, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, hfJob{tok.chat.src, c, tok.specialText(tok.bos), tok.specialText(tok.eos)})
			toks = append(toks, tok)
			names = append(names, name+"/"+filepath.Base(f))
		}
		for k, c := range randomChats(40, 2) {
			rjobs = append(rjobs, hfJob{tok.chat.src, c, tok.specialText(tok.bos), tok.specialText(tok.eos)})
			rtoks = append(rtoks, tok)
			rnames = append(rnames, fmt.Sprintf("%s/random-%d %s", name, k, c))
		}
		for _, x := range chatTemplateOnly[name] {
			c, err := os.ReadFile(filepath.Join("testdata/chat", x.file))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(c, &m); err != nil {
				t.Fatal(err)
			}
			maps.Copy(m["extra"].(map[string]any), x.extra)
			c, _ = json.Marshal(m)
			jobs = append(jobs, hfJob{tok.chat.src, c, tok.specialText(tok.bos), tok.specialText(tok.eos)})
			toks = append(toks, tok)
			names = append(names, name+"/"+x.file+"+extra")
		}
	}
	// The random chats go to Jinja2 only: @huggingface/jinja's strip,
	// lstrip and rstrip ignore their argument (Qwen3's
	// content.lstrip('\n') loses a leading space).
	all, allToks, allNames := append(slices.Clone(jobs), rjobs...), append(slices.Clone(toks), rtoks...), append(slices.Clone(names), rnames...)
	oracles := []struct {
		name  string
		jobs  []hfJob
		toks  []*Tokenizer
		names []string
		want  []hfRendering
	}{{"@huggingface/jinja", jobs, toks, names, renderHF(t, jobs)}, {"jinja2", all, allToks, allNames, renderPy(t, all)}}
	for _, o := range oracles {
		if o.want == nil {
			continue
		}
		jobs, toks, names := o.jobs, o.toks, o.names
		rendered, raised := 0, 0
		for i, j := range jobs {
			r, err := ParseChatRequest(j.Case)
			if err != nil {
				t.Fatal(names[i], err)
			}
			got, err := toks[i].RenderChat(r)
			if msg := renderingDiffers(got, err, o.want[i]); msg != "" {
				t.Errorf("%s, %s: %s", o.name, names[i], msg)
			} else if err != nil {
				raised++
			} else {
				rendered++
			}
		}
		t.Logf("%s: %d prompts byte-identical, %d refusals alike, of %d", o.name, rendered, raised, len(jobs))
		if raised == 0 {
			t.Errorf("%s: no case made a template raise", o.name)
		}
	}
}

// renderingDiffers says how our rendering (got, err) differs from an
// oracle's: "" when the text is the same, or when both refuse with the
// same raise_exception message.
func renderingDiffers(got string, err error, w hfRendering) string {
	switch {
	case w.Error != nil:
		if !errors.Is(err, ErrChatRejected) || err.Error() != ErrChatRejected.Error()+": "+*w.Error {
			return fmt.Sprintf("the oracle refuses with %q; we: %q, %v", *w.Error, got, err)
		}
	case err != nil:
		return fmt.Sprintf("%v; the oracle renders %q", err, *w.Text)
	case got != *w.Text:
		return fmt.Sprintf("\n got  %q\n want %q", got, *w.Text)
	}
	return ""
}

// randomChats are n chat cases drawn from seed: one to six messages of
// any role, with contents of edge text, tool calls, reasoning_content and
// thinking, tools or none, generation prompt or none, enable_thinking and
// reasoning_effort or none.
func randomChats(n int, seed int64) [][]byte {
	r := rand.New(rand.NewSource(seed))
	texts := []string{"", " ", "hi", "  padded  ", "line\nbreak", "\n\nlead", "<think>\nx\n</think>\n\ny", "{\"a\": 1}", "日本語",
		"tab\t", "<|im_end|>", "a {{ b }} %}", "\u2028", "😀", "\x1c sep"}
	roles := []string{"user", "user", "assistant", "assistant", "system", "tool", "developer"}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "f", "description": "d",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "number", "description": "X"},
			"y": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "required": []any{"x"}}}}}
	out := make([][]byte, n)
	for i := range out {
		var msgs []any
		for range 1 + r.Intn(6) {
			m := map[string]any{"role": roles[r.Intn(len(roles))], "content": texts[r.Intn(len(texts))]}
			if m["role"] == "assistant" && r.Intn(3) == 0 {
				m["tool_calls"] = []any{map[string]any{"id": "c1", "type": "function",
					"function": map[string]any{"name": "f", "arguments": map[string]any{"x": 2.5, "y": []any{"a"}}}}}
				if r.Intn(2) == 0 {
					m["content"] = ""
				}
			}
			if m["role"] == "assistant" && r.Intn(2) == 0 {
				m["reasoning_content"] = texts[r.Intn(len(texts))]
				m["thinking"] = texts[r.Intn(len(texts))]
			}
			msgs = append(msgs, m)
		}
		c := map[string]any{"messages": msgs, "add_generation_prompt": r.Intn(2) == 0, "extra": map[string]any{}, "now": "2024-07-26"}
		if r.Intn(2) == 0 {
			c["tools"] = tools
		}
		if r.Intn(3) == 0 {
			c["extra"] = map[string]any{"enable_thinking": r.Intn(2) == 0, "reasoning_effort": "low"}
		}
		out[i], _ = json.Marshal(c)
	}
	return out
}

// TestEncodeChatTools: a chat as the API receives it (OpenAI messages with
// tool_calls whose arguments are JSON text, a tool result, tools) renders
// as the dict-shaped case that TestChatTemplateMatchesHFJinja checks
// against @huggingface/jinja.
func TestEncodeChatTools(t *testing.T) {
	tok := hfTestTokenizer(t, "qwen3")
	data, err := os.ReadFile("testdata/chat/tool-call.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseChatRequest(data)
	if err != nil {
		t.Fatal(err)
	}
	wantText, err := tok.RenderChat(want)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Tools json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	call := ToolCall{ID: "call_1", Type: "function"}
	call.Function.Name = "get_weather"
	call.Function.Arguments = `{"city": "Paris", "unit": "celsius"}`
	msgs := []Message{
		{Role: "system", Content: "You can look up the weather."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{call}},
		{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"temperature": 21, "sky": "clear"}`},
	}
	ids, err := tok.EncodeChat(msgs, raw.Tools)
	if err != nil {
		t.Fatal(err)
	}
	if !equalIDs(ids, tok.Encode(wantText, false, true)) {
		t.Errorf("EncodeChat renders %q\nwant %q", tok.Decode(ids), wantText)
	}
	if !strings.Contains(wantText, `"arguments": {"city": "Paris", "unit": "celsius"}`) || !strings.Contains(wantText, "get_weather") {
		t.Errorf("the tools and the call are not in the prompt: %q", wantText)
	}
}

// FuzzChatRequest: any chat case either fails with one of our errors or
// renders, and tojson of what it holds is valid JSON.
func FuzzChatRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/chat/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"messages": [{"role": "user", "content": "\u00e9<>&'\"\\\\ \ud83d\ude00", "x": [1, 2.5, -3e-7, true, null, {}]}], "tools": [[], {"a": {"b": [{}]}}]}`))
	tok := testTokenizer(f, "qwen2", 512)
	tok.chat = &chatTemplate{src: "{{ messages | tojson }}\n{{ (tools or []) | tojson(indent=2) }}"}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseChatRequest(data)
		if err != nil {
			if !errors.Is(err, ErrInput) {
				t.Fatalf("error %v does not wrap ErrInput", err)
			}
			return
		}
		out, err := tok.RenderChat(r)
		if err != nil {
			if !errors.Is(err, ErrChatTemplate) {
				t.Fatalf("error %v does not wrap ErrChatTemplate", err)
			}
			return
		}
		msgs, tools, _ := strings.Cut(out, "\n")
		if !json.Valid([]byte(msgs)) || !json.Valid([]byte(tools)) {
			t.Fatalf("tojson gave invalid JSON: %q", out)
		}
	})
}

// TestRenderChatConcurrent: the node renders chats of concurrent requests
// with one parsed template (run under -race).
func TestRenderChatConcurrent(t *testing.T) {
	tok := testTokenizer(t, "qwen2", 512)
	want, err := tok.RenderChat(ChatRequest{Messages: []any{map[string]any{"role": "user", "content": "x"}}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			got, err := tok.RenderChat(ChatRequest{Messages: []any{map[string]any{"role": "user", "content": "x"}}, AddGenerationPrompt: true})
			if err == nil && got != want {
				err = errors.New("rendered " + got)
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestToolHistoryMatchesHFJinja: a chat with a past tool call, as the API
// receives it (OpenAI's messages: arguments as JSON text, the calling
// turn's content empty), renders through each family's own template as
// @huggingface/jinja renders what a Hugging Face user passes that
// template: arguments as an object and the content as sent, except for
// DeepSeek V3, whose template needs OpenAI's form (a null content, the
// arguments as text) to show the call at all.
func TestToolHistoryMatchesHFJinja(t *testing.T) {
	if testing.Short() {
		t.Skip("short: Node oracle and large vocabularies")
	}
	msgs := []Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Type: "function"}}},
		{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"temperature": 21}`},
	}
	msgs[1].ToolCalls[0].Function.Name = "get_weather"
	msgs[1].ToolCalls[0].Function.Arguments = `{"city": "Paris"}`
	tools := json.RawMessage(`[{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]`)
	call := func(args any, content any) string {
		c, _ := json.Marshal(map[string]any{
			"messages": []any{
				map[string]any{"role": "user", "content": "Weather in Paris?"},
				map[string]any{"role": "assistant", "content": content, "tool_calls": []any{map[string]any{"id": "call_1", "type": "function",
					"function": map[string]any{"name": "get_weather", "arguments": args}}}},
				map[string]any{"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": `{"temperature": 21}`},
			},
			"tools": json.RawMessage(tools), "add_generation_prompt": true, "extra": map[string]any{}, "now": "2024-07-26",
		})
		return string(c)
	}
	var jobs []hfJob
	var toks []*Tokenizer
	llama, err := os.ReadFile("testdata/chat/templates/meta-llama-Llama-3.1-8B-Instruct.jinja")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deepseek_v3", "qwen3", "llama3_1"} {
		tok := hfTestTokenizer(t, name)
		if name == "llama3_1" { // the package's template predates tools
			tok = hfTestTokenizerWith(t, name, string(llama))
		}
		c := call(map[string]any{"city": "Paris"}, "")
		if name == "deepseek_v3" {
			c = call(`{"city": "Paris"}`, nil)
		}
		jobs = append(jobs, hfJob{tok.chat.src, json.RawMessage(c), tok.specialText(tok.bos), tok.specialText(tok.eos)})
		toks = append(toks, tok)
	}
	want := renderHF(t, jobs)
	for i, tok := range toks {
		r, err := tok.chatRequest(msgs, tools, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Now = time.Date(2024, 7, 26, 0, 0, 0, 0, time.UTC)
		got, err := tok.RenderChat(r)
		if w := want[i]; w.Text == nil || err != nil || got != *w.Text {
			t.Errorf("%d: got %q (%v)\nwant %v", i, got, err, w)
		} else if !strings.Contains(got, "get_weather") || !strings.Contains(got, "Paris") {
			t.Errorf("%d: the call is not shown: %q", i, got)
		}
	}
}

// hfJob is one rendering for @huggingface/jinja (render.mjs).
type hfJob struct {
	Template string          `json:"template"`
	Case     json.RawMessage `json:"case"`
	BOS      string          `json:"bos_token"`
	EOS      string          `json:"eos_token"`
}

// hfRendering is what @huggingface/jinja made of an hfJob: its text, or
// the message the template raised.
type hfRendering struct {
	Text  *string `json:"text"`
	Error *string `json:"error"`
}

// renderPy runs jobs through Python's Jinja2 as transformers'
// apply_chat_template sets it up (render.py); nil, said in the log, where
// python3 or its jinja2 is missing.
func renderPy(t *testing.T, jobs []hfJob) []hfRendering {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(py, "-c", "import jinja2").Run()
	}
	if err != nil {
		t.Logf("python3 with jinja2 not found (%v): the Jinja2 oracle does not run", err)
		return nil
	}
	in, _ := json.Marshal(jobs)
	cmd := exec.Command(py, "render.py")
	cmd.Dir = hfOracle
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("render.py: %v\n%s", err, stderr.String())
	}
	var want []hfRendering
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(jobs) {
		t.Fatalf("render.py output (%d of %d): %v", len(want), len(jobs), err)
	}
	return want
}

// renderHF runs jobs through @huggingface/jinja, skipping the test where
// node or the oracle's packages are missing.
func renderHF(t *testing.T, jobs []hfJob) []hfRendering {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the @huggingface/jinja oracle cannot run")
	}
	if _, err := os.Stat(filepath.Join(hfOracle, "node_modules/@huggingface/jinja")); err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	in, _ := json.Marshal(jobs)
	cmd := exec.Command(node, "render.mjs")
	cmd.Dir = hfOracle
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var want []hfRendering
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(jobs) {
		t.Fatalf("oracle output (%d of %d): %v", len(want), len(jobs), err)
	}
	return want
}

// TestToJSONMatchesPython: tojson writes what Hugging Face's (Python's
// json.dumps with ensure_ascii=False, compact and indented) writes for
// the same JSON, floats and Unicode line separators included; the
// oracle is the machine's python3.
func TestToJSONMatchesPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the json.dumps oracle cannot run")
	}
	docs := []string{
		`{"s": "a\u2028b\u2029c<>&'\"\\\u0000\u001f\u007f\b\f é😀\ud7ff\ue000", "k": ["", " ", "\\u2028"]}`,
		`[1.5, 0.1, 2.0, -0.0, 100, 1e21, 1e16, 1e15, 1234567.5, 0.0001, 0.00001, 1e-7, 123456789012345678.0, -3.25e-10, 5e300, 1.7976931348623157e308]`,
		`{"a": {}, "b": [], "c": [{}], "d": null, "e": true, "f": false, "g": {"h": [1, {"i": "j"}]}}`,
	}
	prog := `import json, sys
for line in sys.stdin:
    v = json.loads(line)
    print(json.dumps(json.dumps(v, ensure_ascii=False)), json.dumps(json.dumps(v, ensure_ascii=False, indent=2)))`
	cmd := exec.Command(py, "-c", prog)
	cmd.Stdin = strings.NewReader(strings.Join(docs, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(docs) {
		t.Fatalf("python3 gave %d lines for %d documents", len(lines), len(docs))
	}
	for i, doc := range docs {
		var want [2]string
		d := json.NewDecoder(strings.NewReader(lines[i]))
		if err := d.Decode(&want[0]); err != nil {
			t.Fatal(err)
		}
		if err := d.Decode(&want[1]); err != nil {
			t.Fatal(err)
		}
		v, err := orderedJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		for j, pad := range []string{"", "  "} {
			var b strings.Builder
			if err := writePyJSON(&b, v, pad, "\n"); err != nil {
				t.Fatal(err)
			}
			if b.String() != want[j] {
				t.Errorf("%s (indent %q):\n got  %s\n want %s", doc, pad, b.String(), want[j])
			}
		}
	}
}

// TestStringMethodsMatchJinja2: strip, lstrip, rstrip, split and trim,
// with and without their argument, as Python's Jinja2 runs them (the
// Python oracle only: @huggingface/jinja ignores the argument).
func TestStringMethodsMatchJinja2(t *testing.T) {
	tok := testTokenizer(t, "qwen2", 512)
	tok.chat = &chatTemplate{src: `{% for m in messages %}{% set s = m.content %}` +
		`[{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(none) }}|{{ s.strip('\n ') }}|{{ s.lstrip('é a') }}|` +
		`{{ s.rstrip('3 ') }}|{{ s | trim }}|{{ s | trim('\n') }}|{{ s.split() | tojson }}|{{ s.split(none, 1) | tojson }}|{{ s.split(' ') | tojson }}]` +
		"\n{% endfor %}"}
	var msgs []any
	for _, s := range []string{"", " ", "\u2028\x1c 32é ab 23 \u3000\x85", "\n\n  x\t\ny \n", "é a é", "a  b   c", "\u00a0nbsp\u00a0", "33 3"} {
		msgs = append(msgs, map[string]any{"role": "user", "content": s})
	}
	c, _ := json.Marshal(map[string]any{"messages": msgs})
	want := renderPy(t, []hfJob{{tok.chat.src, c, "", ""}})
	if want == nil {
		t.Skip("no Jinja2 oracle")
	}
	r, err := ParseChatRequest(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tok.RenderChat(r)
	if msg := renderingDiffers(got, err, want[0]); msg != "" {
		t.Error(msg)
	}
}
