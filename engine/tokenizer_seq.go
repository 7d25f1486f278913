package engine

import (
	"regexp"
	"unicode/utf8"
)

// whiteSpace is \s as Hugging Face's regexes (Oniguruma) and llama.cpp's
// see it: Unicode White_Space, where Go's \s is ASCII only.
const whiteSpace = `\t\n\v\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`

// deepseekLLM is DeepSeek LLM's pre-tokenizer: a sequence of splits, each
// isolating its matches within every piece the previous ones left, as
// tokenizer.json's Sequence of Split(Isolated) and llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM do: newlines, letters with one
// leading space, ASCII and full-width punctuation with one, trailing
// space, CJK and Hangul runs, digit runs.
var deepseekLLM = []*regexp.Regexp{
	regexp.MustCompile(`[\r\n]`),
	regexp.MustCompile(`[` + whiteSpace + `]?[` + deepseekLetters + `]+`),
	regexp.MustCompile(`[` + whiteSpace + `]?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+`),
	regexp.MustCompile(`[` + whiteSpace + `]+$`),
	regexp.MustCompile(`[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+`),
	regexp.MustCompile(`\p{N}+`),
}

// deepseekLetters is the letter class of DeepSeek LLM's tokenizer.json, in
// code points: written as characters, several of them (U+1F7D, U+1FBE,
// U+2126, U+212A...) would not survive a Unicode normalization of this
// file.
const deepseekLetters = `A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}` +
	`\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}` +
	`\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}` +
	`\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}` +
	`\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}` +
	`\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}` +
	`\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}` +
	`\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}` +
	`\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}` +
	`\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}` +
	`\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}` +
	`\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}` +
	`\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}` +
	`\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}` +
	`\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}` +
	`\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}` +
	`\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}` +
	`\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}` +
	`\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}` +
	`\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}` +
	`\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}` +
	`\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}` +
	`\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}`

// seqSplit applies each regex in turn to every piece so far, keeping both
// its matches and the text between them as pieces.
func seqSplit(res []*regexp.Regexp, s string) []string {
	pieces := []string{s}
	for _, re := range res {
		var next []string
		for _, p := range pieces {
			at := 0
			for _, m := range re.FindAllStringIndex(p, -1) {
				if m[0] > at {
					next = append(next, p[at:m[0]])
				}
				next = append(next, p[m[0]:m[1]])
				at = m[1]
			}
			if at < len(p) {
				next = append(next, p[at:])
			}
		}
		pieces = next
	}
	return pieces
}

// o200k is the pre-tokenizer of o200k (gpt-oss, GPT-4o; llama.cpp's
// "gpt-4o"), its one regex with \s+(?!\S) left to lookaheadSplit: words
// that split camel case apart (an upper-case run, then lower case, marks
// and other letters joining either side), each with one leading
// non-letter and a contraction; digits in threes; punctuation runs with
// newlines and slashes after them; whitespace. The contractions are
// ASCII-case-insensitive, as the JavaScript form of the regex (the
// oracle's) and llama.cpp's have them.
var o200k = regexp.MustCompile(
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+` + contractionsCI + `?` +
		`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*` + contractionsCI + `?` +
		`|\p{N}{1,3}` +
		`| ?[^` + whiteSpace + `\p{L}\p{N}]+[\r\n/]*` +
		`|[` + whiteSpace + `]*[\r\n]+` +
		`|[` + whiteSpace + `]+`)

// contractionsCI is (?i:'s|'t|'re|'ve|'m|'ll|'d) with ASCII case only.
const contractionsCI = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`

// deepseekV3 is DeepSeek V3's pre-tokenizer (llama.cpp's "deepseek-v3"):
// digits in threes, then runs of CJK ideographs and kana, then, in what is
// left, one regex (its \s+(?!\S) left to lookaheadSplit): an ASCII
// punctuation mark with the ASCII letters after it, letters and marks
// with one leading other character, punctuation and symbol runs with
// newlines after them, whitespace.
var (
	deepseekV3 = []*regexp.Regexp{
		regexp.MustCompile(`\p{N}{1,3}`),
		regexp.MustCompile(`[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+`),
	}
	deepseekV3Words = regexp.MustCompile("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" +
		`|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+` +
		`| ?[\p{P}\p{S}]+[\r\n]*` +
		`|[` + whiteSpace + `]*[\r\n]+` +
		`|[` + whiteSpace + `]+`)
)

func deepseekV3Split(s string) []string {
	var out []string
	for _, p := range seqSplit(deepseekV3, s) {
		out = lookaheadSplit(out, deepseekV3Words, p)
	}
	return out
}

// lookaheadSplit appends to out the matches of re in s and the text
// between them. re's last alternative is a whitespace run standing for
// the \s+(?!\S)|\s+ that ends these tokenizers' regexes (Go's regexp has
// no lookahead): a run of two or more without CR or LF that a non-space
// follows gives its last character back to the next piece, as a
// backtracking engine does. Earlier alternatives match no such run: the
// ones before it need a letter, digit, punctuation or newline.
func lookaheadSplit(out []string, re *regexp.Regexp, s string) []string {
	i := 0
	for i < len(s) {
		loc := re.FindStringIndex(s[i:])
		if loc == nil || loc[1] == loc[0] {
			break
		}
		a, b := i+loc[0], i+loc[1]
		if a > i {
			out = append(out, s[i:a])
		}
		if run := s[a:b]; b < len(s) && utf8.RuneCountInString(run) > 1 && isSpaceRun(run) {
			_, n := utf8.DecodeLastRuneInString(run)
			b -= n
		}
		out = append(out, s[a:b])
		i = b
	}
	if i < len(s) {
		out = append(out, s[i:])
	}
	return out
}

// isSpaceRun: s is whitespace with neither CR nor LF.
func isSpaceRun(s string) bool {
	for _, r := range s {
		if !isS(r) || isNL(r) {
			return false
		}
	}
	return true
}
