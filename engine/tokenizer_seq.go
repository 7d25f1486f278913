package engine

import "regexp"

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
