package engine

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer turns text into token IDs and back, from GGUF tokenizer
// metadata: SentencePiece-style ("llama": score-ordered merges with byte
// fallback) or byte-level BPE ("gpt2", as qwen2 uses: ranked merges over
// GPT-2's byte-to-unicode mapping, after a qwen2 pre-tokenizer split).
type Tokenizer struct {
	model       string
	tokens      []string
	types       []int32
	scores      []float32
	ids         map[string]int32 // pieces text may merge into
	ranks       map[string]int   // BPE merges: left + "\x00" + right
	specials    []int32          // control and user-defined, longest first
	byteTok     [256]int32       // SPM byte-fallback tokens, -1 when absent
	bos, eos    int32
	ends        map[int32]bool // eos, eot, eom and turn-ending control tokens
	unk         int32
	addBOS      bool
	spacePrefix bool
	chat        *chatTemplate // tokenizer.chat_template; nil when none
	// phiChat: the vocabulary has Phi-3's <|user|>, <|assistant|> and
	// <|end|> control tokens, so the built-in format is Phi-3's.
	phiChat bool
	// Byte-level BPE only: the pre-tokenizer, NFC normalization first
	// (Qwen2's tokenizer.json asks for it), and whether a piece that is a
	// whole token skips the merges (Llama 3's ignore_merges).
	split        func(string) []string
	nfc          bool
	ignoreMerges bool
}

// LoadTokenizer reads only the metadata of the GGUF file at path.
func LoadTokenizer(path string) (*Tokenizer, error) {
	f, fh, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return NewTokenizer(f)
}

// NewTokenizer builds the tokenizer described by f's metadata.
func NewTokenizer(f *File) (*Tokenizer, error) {
	model, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	v := &vocab{model: model, unk: -1, bos: -1, eos: -1}
	tv, _ := f.Get("tokenizer.ggml.tokens")
	var ok bool
	if v.tokens, ok = tv.([]string); !ok || len(v.tokens) == 0 {
		return nil, fmt.Errorf("%w: key %q missing or not a string array", ErrCorrupt, "tokenizer.ggml.tokens")
	}
	n := len(v.tokens)
	if sv, present := f.Get("tokenizer.ggml.scores"); present {
		if v.scores, ok = sv.([]float32); !ok || len(v.scores) != n {
			return nil, fmt.Errorf("%w: key %q is not %d float32s", ErrCorrupt, "tokenizer.ggml.scores", n)
		}
	}
	if tv, present := f.Get("tokenizer.ggml.token_type"); present {
		if v.types, ok = tv.([]int32); !ok || len(v.types) != n {
			return nil, fmt.Errorf("%w: key %q is not %d int32s", ErrCorrupt, "tokenizer.ggml.token_type", n)
		}
	}
	if mv, present := f.Get("tokenizer.ggml.merges"); present {
		if v.merges, ok = mv.([]string); !ok {
			return nil, fmt.Errorf("%w: key %q is not a string array", ErrCorrupt, "tokenizer.ggml.merges")
		}
	}
	eot, eom := int32(-1), int32(-1)
	for _, k := range []struct {
		key string
		dst *int32
	}{{"tokenizer.ggml.bos_token_id", &v.bos}, {"tokenizer.ggml.eos_token_id", &v.eos}, {"tokenizer.ggml.unknown_token_id", &v.unk},
		{"tokenizer.ggml.eot_token_id", &eot}, {"tokenizer.ggml.eom_token_id", &eom}} {
		if _, present := f.Get(k.key); !present {
			continue
		}
		id, err := f.Uint(k.key)
		if err != nil {
			return nil, err
		}
		if id >= uint64(n) {
			return nil, fmt.Errorf("%w: key %q = %d outside the vocabulary of %d", ErrCorrupt, k.key, id, n)
		}
		*k.dst = int32(id)
	}
	v.addBOS = model == "llama"
	if b, present := f.Get("tokenizer.ggml.add_bos_token"); present {
		v.addBOS, _ = b.(bool)
	}
	spacePrefix := model == "llama"
	if b, present := f.Get("tokenizer.ggml.add_space_prefix"); present {
		spacePrefix, _ = b.(bool)
	}
	if p, present := f.Get("tokenizer.ggml.pre"); present {
		v.pre, _ = p.(string)
	}
	t, err := newTokenizer(v, spacePrefix)
	if err != nil {
		return nil, err
	}
	if src, _ := f.Get("tokenizer.chat_template"); src != nil {
		if s, ok := src.(string); ok && s != "" {
			t.chat = &chatTemplate{src: s}
		}
	}
	for _, id := range []int32{eot, eom} {
		if id >= 0 {
			t.ends[id] = true
		}
	}
	return t, nil
}

func newTokenizer(v *vocab, spacePrefix bool) (*Tokenizer, error) {
	if v.model != "llama" && v.model != "gpt2" {
		return nil, fmt.Errorf("%w: tokenizer model %q (supported: llama, gpt2)", ErrUnsupportedArch, v.model)
	}
	n := len(v.tokens)
	t := &Tokenizer{model: v.model, tokens: v.tokens, types: v.types, scores: v.scores,
		ids: make(map[string]int32, n), bos: v.bos, eos: v.eos, unk: v.unk, addBOS: v.addBOS && v.bos >= 0, spacePrefix: spacePrefix}
	if t.types == nil {
		t.types = make([]int32, n)
		for i := range t.types {
			t.types[i] = tokNormal
		}
	}
	for i := range t.byteTok {
		t.byteTok[i] = -1
	}
	for i, s := range t.tokens {
		switch t.types[i] {
		case tokControl, tokUserDefined:
			if s != "" {
				t.specials = append(t.specials, int32(i))
			}
			if t.types[i] == tokUserDefined {
				t.setID(s, int32(i))
			}
		case tokByte:
			var b byte
			if _, err := fmt.Sscanf(s, "<0x%02X>", &b); err == nil && len(s) == 6 {
				t.byteTok[b] = int32(i)
			}
		case tokUnused, tokUnknown:
		default:
			t.setID(s, int32(i))
		}
	}
	if t.model == "gpt2" {
		t.split = preSplitters[v.pre]
		if t.split == nil {
			// As llama.cpp: an unknown pre-tokenizer falls back to GPT-2's.
			slog.Warn("tokenizer: unknown pre-tokenizer, using the GPT-2 default", "tokenizer.ggml.pre", v.pre)
			t.split = preSplitters["default"]
		}
		t.nfc = v.pre == "qwen2"
		// o200k's tokenizer.json asks for it too, as tiktoken does (a piece
		// that is a token is that token); llama.cpp's gpt-4o does not.
		t.ignoreMerges = v.pre == "llama-bpe" || v.pre == "gpt-4o"
	}
	// Generation ends at EOS and, as in llama.cpp, at the control tokens
	// that end a turn or a tool call in the families' templates.
	t.ends = map[int32]bool{}
	if t.eos >= 0 {
		t.ends[t.eos] = true
	}
	phi := 0
	for _, id := range t.specials {
		switch t.tokens[id] {
		case "<|user|>", "<|assistant|>", "<|end|>":
			phi++
		}
		switch t.tokens[id] {
		case "</s>", "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|end|>", "<end_of_turn>", "<EOT>":
			t.ends[id] = true
		}
	}
	t.phiChat = phi == 3
	if _, ok := t.SpecialID("<|channel|>"); ok {
		// Harmony (gpt-oss): <|end|> ends one message of the turn (the
		// thinking, say), not the turn; the turn ends at <|return|> or at
		// a call's <|call|>, as llama.cpp's end-of-generation set has it.
		for _, id := range t.specials {
			switch t.tokens[id] {
			case "<|end|>":
				if id != t.eos {
					delete(t.ends, id)
				}
			case "<|return|>", "<|call|>":
				t.ends[id] = true
			}
		}
	}
	sort.SliceStable(t.specials, func(a, b int) bool { return len(t.tokens[t.specials[a]]) > len(t.tokens[t.specials[b]]) })
	if t.model == "gpt2" {
		t.ranks = make(map[string]int, len(v.merges))
		for i, m := range v.merges {
			l, r, ok := strings.Cut(m, " ")
			if !ok || l == "" || r == "" {
				return nil, fmt.Errorf("%w: key %q: merge %d %q is not two pieces", ErrCorrupt, "tokenizer.ggml.merges", i, m)
			}
			if _, dup := t.ranks[l+"\x00"+r]; !dup {
				t.ranks[l+"\x00"+r] = i
			}
		}
	}
	return t, nil
}

// setID keeps the first token of a text, as llama.cpp does.
func (t *Tokenizer) setID(s string, id int32) {
	if _, dup := t.ids[s]; !dup {
		t.ids[s] = id
	}
}

// Vocab is the number of tokens.
func (t *Tokenizer) Vocab() int { return len(t.tokens) }

// BOS is the beginning-of-sequence token (-1 if none).
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence token (-1 if none).
func (t *Tokenizer) EOS() int32 { return t.eos }

// IsEnd reports whether id ends generation: EOS, the file's eot or eom
// token, or a special token that ends a turn.
func (t *Tokenizer) IsEnd(id int32) bool { return t.ends[id] }

// Token is the stored text of id ("" if out of range).
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Encode tokenizes text. addSpecial prepends BOS when the model asks for
// it; parseSpecial turns the text of control tokens (such as
// "<|im_start|>") into those tokens instead of spelling them out.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var out []int32
	if addSpecial && t.addBOS {
		out = append(out, t.bos)
	}
	first := true
	for text != "" {
		frag, id, rest := text, int32(-1), ""
		if parseSpecial {
			frag, id, rest = t.nextSpecial(text)
		}
		if frag != "" {
			out = t.encodeText(out, frag, first || !parseSpecial)
		}
		if id >= 0 {
			out = append(out, id)
		}
		text = rest
		first = id >= 0 // a fragment after a special token starts afresh
	}
	return out
}

// nextSpecial splits text at its earliest (longest) special token.
func (t *Tokenizer) nextSpecial(text string) (before string, id int32, after string) {
	best, bestAt := int32(-1), len(text)
	for _, s := range t.specials {
		if i := strings.Index(text[:min(len(text), bestAt+len(t.tokens[s]))], t.tokens[s]); i >= 0 && i < bestAt {
			best, bestAt = s, i
		}
	}
	if best < 0 {
		return text, -1, ""
	}
	return text[:bestAt], best, text[bestAt+len(t.tokens[best]):]
}

func (t *Tokenizer) encodeText(out []int32, text string, start bool) []int32 {
	if t.model == "gpt2" {
		if t.nfc {
			text = norm.NFC.String(text)
		}
		for _, piece := range t.split(text) {
			mapped := bytesToBPE([]byte(piece))
			if id, ok := t.ids[mapped]; ok && t.ignoreMerges {
				out = append(out, id)
				continue
			}
			out = t.bpe(out, mapped)
		}
		return out
	}
	if t.spacePrefix && start {
		text = " " + text
	}
	return t.spm(out, strings.ReplaceAll(text, " ", "▁"))
}

// spm merges adjacent symbols, best-scored pair first, then spells what is
// not a token as byte tokens.
func (t *Tokenizer) spm(out []int32, s string) []int32 {
	syms := mergeSymbols(s, func(l, r string) (float64, bool) {
		id, ok := t.ids[l+r]
		if !ok {
			return 0, false
		}
		if t.scores == nil {
			return 0, true
		}
		return float64(t.scores[id]), true
	})
	for _, sym := range syms {
		if id, ok := t.ids[sym]; ok {
			out = append(out, id)
			continue
		}
		for i := 0; i < len(sym); i++ {
			if b := t.byteTok[sym[i]]; b >= 0 {
				out = append(out, b)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// bpe merges by rank within one pre-tokenized piece of mapped bytes.
func (t *Tokenizer) bpe(out []int32, s string) []int32 {
	syms := mergeSymbols(s, func(l, r string) (float64, bool) {
		rank, ok := t.ranks[l+"\x00"+r]
		return -float64(rank), ok
	})
	for _, sym := range syms {
		if id, ok := t.ids[sym]; ok {
			out = append(out, id)
			continue
		}
		for _, c := range sym {
			if id, ok := t.ids[string(c)]; ok {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// mergeSymbols splits s into characters and repeatedly merges the adjacent
// pair with the highest priority (leftmost on ties) while pair says it may.
// It uses a heap with stale entries skipped, so it is O(n log n).
func mergeSymbols(s string, pair func(l, r string) (float64, bool)) []string {
	type sym struct{ start, end, prev, next int }
	var syms []sym
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		syms = append(syms, sym{i, i + n, len(syms) - 1, len(syms) + 1})
		i += n
	}
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1
	h := &bigramHeap{}
	try := func(l int) {
		if l < 0 || syms[l].next < 0 {
			return
		}
		r := syms[l].next
		if p, ok := pair(s[syms[l].start:syms[l].end], s[syms[r].start:syms[r].end]); ok {
			heap.Push(h, bigram{prio: p, left: syms[l].start, l: l, r: r, size: syms[r].end - syms[l].start})
		}
	}
	for i := range syms {
		try(i)
	}
	for h.Len() > 0 {
		b := heap.Pop(h).(bigram)
		l, r := &syms[b.l], &syms[b.r]
		if l.end == l.start || r.end == r.start || l.next != b.r || r.end-l.start != b.size {
			continue // stale
		}
		l.end = r.end
		l.next = r.next
		r.start, r.end = 0, 0
		if l.next >= 0 {
			syms[l.next].prev = b.l
		}
		try(l.prev)
		try(b.l)
	}
	var out []string
	for i := 0; i >= 0; i = syms[i].next {
		out = append(out, s[syms[i].start:syms[i].end])
	}
	return out
}

type bigram struct {
	prio       float64
	left       int
	l, r, size int
}

type bigramHeap []bigram

func (h bigramHeap) Len() int { return len(h) }
func (h bigramHeap) Less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].left < h[j].left
}
func (h bigramHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *bigramHeap) Push(x any)   { *h = append(*h, x.(bigram)) }
func (h *bigramHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// preSplitters are the pre-tokenizers of byte-level BPE vocabularies by
// tokenizer.ggml.pre, as llama.cpp's llama-vocab.cpp names and defines
// them. Each is its regex written out by hand (Go's regexp has no
// lookahead); pieces cover the text exactly.
var preSplitters = map[string]func(string) []string{
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	"llama-bpe": func(s string) []string { return llama3Split(s, 3) },
	// The same with \p{N} alone: one digit per piece.
	"qwen2": func(s string) []string { return llama3Split(s, 1) },
	// GPT-2's 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	"default": func(s string) []string { return gpt2Split(s, false) },
	"gpt2":    func(s string) []string { return gpt2Split(s, false) },
	// SmolLM's: \p{N} first, then GPT-2's, so digits split one by one.
	"smollm": func(s string) []string { return gpt2Split(s, true) },
	// DeepSeek LLM's sequence of splits (tokenizer_seq.go).
	"deepseek-llm": func(s string) []string { return seqSplit(deepseekLLM, s) },
	// DeepSeek V3's and o200k's (tokenizer_seq.go).
	"deepseek-v3": deepseekV3Split,
	"gpt-4o":      func(s string) []string { return lookaheadSplit(nil, o200k, s) },
}

// Character classes as the regexes of Hugging Face tokenizers see them.
func isL(r rune) bool  { return r >= 0 && unicode.IsLetter(r) }
func isN(r rune) bool  { return r >= 0 && unicode.IsNumber(r) }
func isS(r rune) bool  { return r >= 0 && unicode.IsSpace(r) }
func isNL(r rune) bool { return r == '\r' || r == '\n' }

func runeAt(text string, i int) (rune, int) {
	if i >= len(text) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(text[i:])
}

// contraction is the end of 's, 't, 're, 've, 'm, 'll or 'd at i (any case
// when fold), or -1.
func contraction(text string, i int, fold bool) int {
	r, n := runeAt(text, i)
	if r != '\'' {
		return -1
	}
	r1, n1 := runeAt(text, i+n)
	r2, n2 := runeAt(text, i+n+n1)
	if fold {
		r1, r2 = unicode.ToLower(r1), unicode.ToLower(r2)
	}
	switch {
	case (r1 == 'r' && r2 == 'e') || (r1 == 'v' && r2 == 'e') || (r1 == 'l' && r2 == 'l'):
		return i + n + n1 + n2
	case r1 == 's' || r1 == 't' || r1 == 'm' || r1 == 'd':
		return i + n + n1
	}
	return -1
}

// span is the end of the run of runes from i that are in class.
func span(text string, i int, class func(rune) bool) int {
	for r, n := runeAt(text, i); class(r); r, n = runeAt(text, i) {
		i += n
	}
	return i
}

// spaces matches \s+(?!\S)|\s+ at i (a whitespace run): the whole run at
// the end of text or before more whitespace, else all of it but the last
// character, which joins the next piece. nl makes it \s*[\r\n]+ first:
// a run that holds a newline ends after its last one.
func spaces(text string, i int, nl bool) int {
	e, lastNL, count := i, -1, 0
	for r, n := runeAt(text, e); isS(r); r, n = runeAt(text, e) {
		if isNL(r) {
			lastNL = e + n
		}
		e += n
		count++
	}
	switch {
	case nl && lastNL > 0:
		return lastNL
	case e >= len(text) || count == 1:
		return e
	}
	_, ln := utf8.DecodeLastRuneInString(text[:e])
	return e - ln
}

func llama3Split(text string, maxDigits int) []string {
	var out []string
	for i := 0; i < len(text); {
		r, n := runeAt(text, i)
		end := contraction(text, i, true)
		if end < 0 {
			if isL(r) {
				end = span(text, i, isL)
			} else if r1, _ := runeAt(text, i+n); !isNL(r) && !isN(r) && isL(r1) {
				end = span(text, i+n, isL)
			}
		}
		if end < 0 && isN(r) {
			end = i
			for d := 0; d < maxDigits; d++ {
				r, n := runeAt(text, end)
				if !isN(r) {
					break
				}
				end += n
			}
		}
		if end < 0 {
			j := i
			if r == ' ' {
				j += n
			}
			k := span(text, j, func(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) })
			if k > j {
				end = span(text, k, isNL)
			}
		}
		if end < 0 && isS(r) {
			end = spaces(text, i, true)
		}
		if end <= i {
			end = i + n
		}
		out = append(out, text[i:end])
		i = end
	}
	return out
}

func gpt2Split(text string, digitsFirst bool) []string {
	var out []string
	for i := 0; i < len(text); {
		r, n := runeAt(text, i)
		end := -1
		if digitsFirst && isN(r) {
			end = i + n
		}
		if end < 0 {
			end = contraction(text, i, false)
		}
		if end < 0 {
			j := i
			if r == ' ' {
				j += n
			}
			r1, _ := runeAt(text, j)
			switch {
			case isL(r1):
				end = span(text, j, isL)
			case isN(r1) && !digitsFirst:
				end = span(text, j, isN)
			case r1 >= 0 && !isS(r1) && !isL(r1) && !isN(r1):
				end = span(text, j, func(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) })
			}
		}
		if end < 0 && isS(r) {
			end = spaces(text, i, false)
			// SmolLM splits digits off first, so a run before a digit
			// ends its fragment and \s+(?!\S) takes all of it.
			if e := span(text, i, isS); digitsFirst && end < e {
				if r, _ := runeAt(text, e); isN(r) {
					end = e
				}
			}
		}
		if end <= i {
			end = i + n
		}
		out = append(out, text[i:end])
		i = end
	}
	return out
}

// Decode turns tokens back into text. Control tokens are skipped; byte
// tokens become their bytes; the space prefix that Encode adds is removed.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = t.appendPiece(b, id)
	}
	if t.spacePrefix && len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return string(b)
}

// Piece is the bytes one token stands for, for streaming: no prefix is
// removed, and it may be part of a UTF-8 character.
func (t *Tokenizer) Piece(id int32) []byte { return t.appendPiece(nil, id) }

func (t *Tokenizer) appendPiece(b []byte, id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return b
	}
	s := t.tokens[id]
	switch t.types[id] {
	case tokControl, tokUnused:
		return b
	case tokUnknown:
		return append(b, "\uFFFD"...)
	case tokByte:
		for c, tid := range t.byteTok {
			if tid == id {
				return append(b, byte(c))
			}
		}
		return b
	case tokUserDefined:
		return append(b, s...)
	}
	if t.model == "gpt2" {
		for _, r := range s {
			if c, ok := runeToByte[r]; ok {
				b = append(b, c)
			} else {
				b = utf8.AppendRune(b, r)
			}
		}
		return b
	}
	return append(b, strings.ReplaceAll(s, "▁", " ")...)
}

// Message is one chat turn. The tool fields are OpenAI's, for templates
// that render tool calls and their results.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// ToolCall is one function call an assistant turn made.
type ToolCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"` // JSON text, as OpenAI sends it
	} `json:"function"`
}

// ChatPrompt renders messages in the model's built-in chat format (ChatML
// for gpt2 vocabularies such as qwen2's, Phi-3's for a vocabulary with its
// <|user|>, <|assistant|> and <|end|> tokens, Llama-2's [INST] otherwise),
// ending where the assistant's reply begins.
func (t *Tokenizer) ChatPrompt(msgs []Message) string {
	var b strings.Builder
	if t.phiChat {
		for _, m := range msgs {
			b.WriteString("<|" + m.Role + "|>\n" + m.Content + "<|end|>\n")
		}
		b.WriteString("<|assistant|>\n")
		return b.String()
	}
	if t.model == "gpt2" {
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		b.WriteString("<|im_start|>assistant\n")
		return b.String()
	}
	for _, m := range msgs {
		switch m.Role {
		case "system":
			b.WriteString("<<SYS>>\n" + m.Content + "\n<</SYS>>\n\n")
		case "user":
			b.WriteString("[INST] " + m.Content + " [/INST]")
		default:
			b.WriteString(" " + m.Content + " " + t.Token(t.eos))
		}
	}
	return b.String()
}

// EncodeChat tokenizes the prompt of a chat that the assistant answers
// next: the file's chat template when it has one (see RenderChat), the
// built-in format otherwise; special-token text is parsed. BOS is added
// when the model wants it and the rendered prompt does not already begin
// with it.
// tools, when not nil, is the JSON array of tools offered to the template.
func (t *Tokenizer) EncodeChat(msgs []Message, tools json.RawMessage) ([]int32, error) {
	return t.EncodeChatVars(msgs, tools, nil)
}

// EncodeChatVars is EncodeChat with more template variables (a request's
// chat_template_kwargs, such as Qwen3's enable_thinking); the variables
// the renderer sets itself (messages, tools, bos_token...) win over them.
func (t *Tokenizer) EncodeChatVars(msgs []Message, tools json.RawMessage, vars map[string]any) ([]int32, error) {
	r, err := t.chatRequest(msgs, tools, vars)
	if err != nil {
		return nil, err
	}
	prompt, err := t.RenderChat(r)
	if err != nil {
		return nil, err
	}
	return t.encodePrompt(prompt), nil
}

// encodePrompt tokenizes a rendered chat prompt: special-token text
// parsed, BOS added when the model wants it unless the template wrote it.
func (t *Tokenizer) encodePrompt(prompt string) []int32 {
	return t.Encode(prompt, t.bos < 0 || !strings.HasPrefix(prompt, t.tokens[t.bos]), true)
}

// chatRequest is what EncodeChatVars renders.
func (t *Tokenizer) chatRequest(msgs []Message, tools json.RawMessage, vars map[string]any) (ChatRequest, error) {
	asSent := t.HasChatTemplate() && strings.Contains(t.chat.src, toolMarkers[ToolsDeepSeek][0])
	r := ChatRequest{Messages: chatMessages(msgs, asSent), AddGenerationPrompt: true, Extra: vars, Now: time.Now().UTC()}
	if len(tools) > 0 && string(tools) != "null" {
		v, err := orderedJSON(tools)
		if err != nil {
			return ChatRequest{}, err
		}
		var ok bool
		if r.Tools, ok = v.([]any); !ok {
			return ChatRequest{}, fmt.Errorf("%w: tools must be a JSON array", ErrInput)
		}
	}
	return r, nil
}

// SimTokenizer is the tokenizer of a simulated model of vocab tokens: the
// generator's SentencePiece vocabulary.
func SimTokenizer(vocab int) (*Tokenizer, error) {
	v, err := buildVocab("llama", max(vocab, minVocab))
	if err != nil {
		return nil, err
	}
	return newTokenizer(v, true)
}
