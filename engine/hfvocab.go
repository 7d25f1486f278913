package engine

import (
	"encoding/json"
	"fmt"
	"strings"
)

// HFTokenizerKVs converts a Hugging Face tokenizer (the tokenizer.json and
// tokenizer_config.json of a model repository) into the tokenizer.ggml.*
// and tokenizer.chat_template metadata that llama.cpp's convert script
// writes, and returns the vocabulary size with it. It understands the two
// shapes the supported families use: byte-level BPE (Llama 3, Qwen2) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral).
func HFTokenizerKVs(tokenizerJSON, configJSON []byte) ([]KV, int, error) {
	var tj struct {
		Model struct {
			Type         string          `json:"type"`
			Vocab        map[string]int  `json:"vocab"`
			Merges       json.RawMessage `json:"merges"`
			ByteFallback bool            `json:"byte_fallback"`
		} `json:"model"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor *hfProcessor    `json:"post_processor"`
	}
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, 0, fmt.Errorf("%w: tokenizer.json: %v", ErrCorrupt, err)
	}
	var cfg map[string]any
	if len(configJSON) > 0 {
		if err := json.Unmarshal(configJSON, &cfg); err != nil {
			return nil, 0, fmt.Errorf("%w: tokenizer_config.json: %v", ErrCorrupt, err)
		}
	}
	if tj.Model.Type != "BPE" {
		return nil, 0, fmt.Errorf("%w: tokenizer.json model %q (supported: BPE)", ErrUnsupportedArch, tj.Model.Type)
	}
	merges, err := hfMerges(tj.Model.Merges)
	if err != nil {
		return nil, 0, err
	}
	n := 0
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	tokens := make([]string, n)
	types := make([]int32, n)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("[PAD%d]", i)
		types[i] = tokUnused
	}
	spm := tj.Model.ByteFallback
	for s, id := range tj.Model.Vocab {
		if id < 0 {
			return nil, 0, fmt.Errorf("%w: tokenizer.json: token %q has id %d", ErrCorrupt, s, id)
		}
		tokens[id], types[id] = s, tokNormal
		if spm && len(s) == 6 && strings.HasPrefix(s, "<0x") && strings.HasSuffix(s, ">") {
			types[id] = tokByte
		}
	}
	for _, a := range tj.AddedTokens {
		tokens[a.ID], types[a.ID] = a.Content, tokUserDefined
		if a.Special {
			types[a.ID] = tokControl
		}
	}
	id := func(key string) int {
		s := tokenText(cfg[key])
		for i, t := range tokens {
			if s != "" && t == s {
				return i
			}
		}
		return -1
	}
	kvs := []KV{}
	pre := "default"
	if spm {
		// SentencePiece merges the pair whose result scores best: score a
		// piece by minus the rank of the merge that makes it.
		scores := make([]float32, n)
		for rank, m := range merges {
			if i, ok := tj.Model.Vocab[strings.Replace(m, " ", "", 1)]; ok && scores[i] == 0 {
				scores[i] = -float32(rank + 1)
			}
		}
		if u := id("unk_token"); u >= 0 {
			types[u] = tokUnknown
			kvs = append(kvs, KV{"tokenizer.ggml.unknown_token_id", uint32(u)})
		}
		kvs = append(kvs, KV{"tokenizer.ggml.model", "llama"}, KV{"tokenizer.ggml.pre", "default"},
			KV{"tokenizer.ggml.tokens", tokens}, KV{"tokenizer.ggml.scores", scores},
			KV{"tokenizer.ggml.add_space_prefix", strings.Contains(string(tj.Normalizer), `"Prepend"`)})
	} else {
		switch p := string(tj.PreTokenizer); {
		case strings.Contains(p, `[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]`):
			pre = "gpt-4o"
		case strings.Contains(p, `[\\p{L}\\p{M}]+`) && strings.Contains(p, `\\p{N}{1,3}`):
			pre = "deepseek-v3"
		case strings.Contains(p, `\\p{N}{1,3}`):
			pre = "llama-bpe"
		case strings.Contains(p, `[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|`):
			pre = "qwen2"
		}
		kvs = append(kvs, KV{"tokenizer.ggml.model", "gpt2"}, KV{"tokenizer.ggml.pre", pre},
			KV{"tokenizer.ggml.tokens", tokens})
	}
	kvs = append(kvs, KV{"tokenizer.ggml.token_type", types}, KV{"tokenizer.ggml.merges", merges})
	for _, k := range []struct{ cfg, gguf string }{{"bos_token", "bos"}, {"eos_token", "eos"}, {"pad_token", "padding"}} {
		if i := id(k.cfg); i >= 0 {
			kvs = append(kvs, KV{"tokenizer.ggml." + k.gguf + "_token_id", uint32(i)})
		}
	}
	// As llama.cpp's convert script: the post-processor's template says
	// whether BOS and EOS are added, and tokenizer_config.json's flags
	// override it (LlamaTokenizerFast rebuilds its template from them).
	add := map[string]bool{}
	if pp := tj.PostProcessor; pp != nil {
		for _, p := range append(pp.Processors, *pp) {
			if p.Type != "TemplateProcessing" || len(p.Single) < 2 {
				continue
			}
			if first := p.Single[0].SpecialToken.ID; first != "" {
				add["add_bos_token"] = first == tokenText(cfg["bos_token"])
			}
			if last := p.Single[len(p.Single)-1].SpecialToken.ID; last != "" {
				add["add_eos_token"] = last == tokenText(cfg["eos_token"])
			}
		}
	}
	for _, k := range []string{"add_bos_token", "add_eos_token"} {
		if b, ok := cfg[k].(bool); ok {
			add[k] = b
		}
	}
	if _, ok := add["add_bos_token"]; !ok && pre == "llama-bpe" && id("bos_token") >= 0 {
		// The first Llama 3 release says neither; llama.cpp adds BOS for
		// its pre-tokenizer all the same: write that down.
		add["add_bos_token"] = true
	}
	for _, k := range []string{"add_bos_token", "add_eos_token"} {
		if b, ok := add[k]; ok {
			kvs = append(kvs, KV{"tokenizer.ggml." + k, b})
		}
	}
	if t, ok := cfg["chat_template"].(string); ok {
		kvs = append(kvs, KV{"tokenizer.chat_template", t})
	}
	return kvs, n, nil
}

// hfProcessor is a tokenizer.json post-processor: a TemplateProcessing,
// another kind, or a Sequence of them.
type hfProcessor struct {
	Type   string `json:"type"`
	Single []struct {
		SpecialToken struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
	} `json:"single"`
	Processors []hfProcessor `json:"processors"`
}

// tokenText is a tokenizer_config.json token: "<s>" or {"content": "<s>", ...}.
func tokenText(v any) string {
	if m, ok := v.(map[string]any); ok {
		v = m["content"]
	}
	s, _ := v.(string)
	return s
}

// hfMerges reads merges in either form tokenizer.json uses: "a b" strings
// or [a, b] pairs.
func hfMerges(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		return strs, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("%w: tokenizer.json merges: %v", ErrCorrupt, err)
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}
