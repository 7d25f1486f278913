package engine

import (
	"fmt"
	"strings"
)

// Token types as llama.cpp stores them in tokenizer.ggml.token_type.
const (
	tokNormal      = 1
	tokUnknown     = 2
	tokControl     = 3
	tokUserDefined = 4
	tokUnused      = 5
	tokByte        = 6
)

// commonWords seed the generated vocabularies: real English pieces, so that
// a generated model tokenizes text into words as a real one would.
const commonWords = `the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how said an each she
which do their time if will way about many then them write would like so these her long make thing see him two
has look more day could go come did number sound no most people my over know water than call first who may down
side been now find any new work part take get place made live where after back little only round man year came
show every good me give our under name very through just form sentence great think say help low line differ turn
cause much mean before move right boy old too same tell does set three want air well also play small end put home
read hand port large spell add even land here must big high such follow act why ask men change went light kind
off need house picture try us again animal point mother world near build self earth father head stand own page
should country found answer school grow study still learn plant cover food sun four between state keep eye never
last let thought city tree cross farm hard start might story saw far sea draw left late run while press close night
real life few north open seem together next white children begin got walk example ease paper group always music
those both mark often letter until mile river car feet care second book carry took science eat room friend began
idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual young
ready above ever red list though feel talk bird soon body dog family direct pose leave song measure door product
black short numeral class wind question happen complete ship area half rock order fire south problem piece told
knew pass since top whole king space heard best hour better true during hundred five remember step early hold
west ground interest reach fast verb sing listen six table travel less morning ten simple several vowel toward war
lay against pattern slow center love person money serve appear road map rain rule govern pull cold notice voice
unit power town fine certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct
able pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm free
minute strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel full force
blue object decide surface deep moon island foot system busy test record boat common gold possible plane stead dry
wonder laugh thousand ago ran check game shape equate miss brought heat snow tire bring yes distant fill east paint
language among hello model token layer swarm node stage cache prompt`

// vocab is a tokenizer vocabulary as GGUF metadata stores it.
type vocab struct {
	model  string // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
	pre    string // tokenizer.ggml.pre: the gpt2 pre-tokenizer
	tokens []string
	scores []float32
	types  []int32
	merges []string
	bos    int32
	eos    int32
	unk    int32 // -1 when none
	addBOS bool
}

// minVocab is the smallest vocabulary the generator makes: the 256 byte
// tokens plus the special ones.
const minVocab = 259

// buildVocab makes a deterministic vocabulary of exactly n tokens for the
// tokenizer model of arch: byte tokens, specials, then real English pieces,
// padded with unused tokens when n is larger than the pieces.
func buildVocab(arch string, n int) (*vocab, error) {
	if n < minVocab {
		return nil, fmt.Errorf("%w: vocabulary of %d tokens (want >= %d)", ErrShape, n, minVocab)
	}
	words := strings.Fields(commonWords)
	switch arch {
	case "llama":
		return buildSPMVocab(words, n), nil
	case "phi3":
		// Phi-3's vocabulary: Llama 2's SentencePiece pieces, then the
		// chat template's control tokens; <|endoftext|> is EOS and
		// <|end|> ends a turn.
		if n < minVocab+len(phi3Specials) {
			return nil, fmt.Errorf("%w: phi3 vocabulary of %d tokens (want >= %d)", ErrShape, n, minVocab+len(phi3Specials))
		}
		v := buildSPMVocab(words, n-len(phi3Specials))
		v.eos = int32(len(v.tokens))
		for _, s := range phi3Specials {
			v.tokens = append(v.tokens, s)
			v.types = append(v.types, tokControl)
			v.scores = append(v.scores, 0)
		}
		return v, nil
	}
	return buildBPEVocab(words, n), nil
}

// phi3Specials are Phi-3's added control tokens, in its order.
var phi3Specials = []string{"<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>"}

func buildSPMVocab(words []string, n int) *vocab {
	v := &vocab{model: "llama", bos: 1, eos: 2, unk: 0, addBOS: true}
	seen := map[string]bool{}
	add := func(s string, typ int32) bool {
		if len(v.tokens) >= n || seen[s] {
			return false
		}
		seen[s] = true
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, typ)
		v.scores = append(v.scores, 0)
		return true
	}
	add("<unk>", tokUnknown)
	add("<s>", tokControl)
	add("</s>", tokControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), tokByte)
	}
	// Pieces score by their order: SentencePiece merges the best-scored
	// pair first, so shorter, earlier pieces win ties as in a trained model.
	piece := func(s string) {
		if add(s, tokNormal) {
			v.scores[len(v.scores)-1] = -float32(len(v.tokens))
		}
	}
	piece("▁")
	for c := byte(33); c < 127; c++ {
		piece(string(c))
	}
	for _, w := range words {
		r := []rune("▁" + w)
		for i := 2; i <= len(r); i++ {
			piece(string(r[:i]))
		}
	}
	for i := 0; len(v.tokens) < n; i++ {
		add(fmt.Sprintf("<unused%d>", i), tokUnused)
	}
	return v
}

func buildBPEVocab(words []string, n int) *vocab {
	v := &vocab{model: "gpt2", pre: "qwen2", unk: -1}
	specials := []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
	budget := n - len(specials)
	seen := map[string]bool{}
	add := func(s string, typ int32) {
		seen[s] = true
		v.tokens = append(v.tokens, s)
		v.types = append(v.types, typ)
	}
	for b := 0; b < 256; b++ {
		add(string(byteToRune[b]), tokNormal)
	}
	// Each word becomes one token: BPE with the merges so far splits it
	// into pieces, and new merges (ranked after all earlier ones, so they
	// cannot change how earlier words split) join the pieces left to right.
	ranks := map[string]int{}
	for _, w := range words {
		for _, form := range []string{" " + w, w} {
			pieces := mergeSymbols(bytesToBPE([]byte(form)), func(l, r string) (float64, bool) {
				rank, ok := ranks[l+"\x00"+r]
				return -float64(rank), ok
			})
			cur := pieces[0]
			for _, p := range pieces[1:] {
				next := cur + p
				if !seen[next] {
					if len(v.tokens) >= budget {
						break
					}
					add(next, tokNormal)
				}
				if _, ok := ranks[cur+"\x00"+p]; !ok {
					ranks[cur+"\x00"+p] = len(v.merges)
					v.merges = append(v.merges, cur+" "+p)
				}
				cur = next
			}
		}
	}
	for i := 0; len(v.tokens) < budget; i++ {
		add(fmt.Sprintf("<|unused_%d|>", i), tokUnused)
	}
	for _, s := range specials {
		add(s, tokControl)
	}
	v.bos = int32(n - 3) // <|endoftext|>, not added by default, as in Qwen2
	v.eos = int32(n - 1) // <|im_end|> ends a chat turn
	v.scores = nil
	return v
}

// byteToRune is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the rest to code points from U+0100 up, so that every byte
// sequence is a printable string.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

func bytesToBPE(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteToRune[c])
	}
	return sb.String()
}
