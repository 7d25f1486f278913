package node

import (
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// pieceTokens finds tokens whose pieces are the given strings, so that
// tests can spell an output.
func pieceTokens(t *testing.T, tok *engine.Tokenizer, pieces ...string) []int32 {
	t.Helper()
	var ids []int32
	for _, p := range pieces {
		found := false
		for id := int32(0); int(id) < tok.Vocab(); id++ {
			if string(tok.Piece(id)) == p && !tok.IsEnd(id) {
				ids, found = append(ids, id), true
				break
			}
		}
		if !found {
			t.Skipf("no token for %q in the test vocabulary", p)
		}
	}
	return ids
}

func TestTextStateStopAndUTF8(t *testing.T) {
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	// Byte tokens spell "é" (0xC3 0xA9) in two tokens.
	var b3, ba9 int32 = -1, -1
	for id := int32(0); int(id) < tok.Vocab(); id++ {
		switch string(tok.Piece(id)) {
		case "\xc3":
			b3 = id
		case "\xa9":
			ba9 = id
		}
	}
	if b3 < 0 || ba9 < 0 {
		t.Skip("no byte tokens")
	}
	ts := newTextState(tok, nil, nil)
	if s, _ := ts.add(b3); s != "" {
		t.Fatalf("half a character shown: %q", s)
	}
	if s, _ := ts.add(ba9); s != "é" {
		t.Fatalf("got %q, want é", s)
	}

	// A stop string split over tokens: held back, then cut.
	ids := pieceTokens(t, tok, "a", "b", "c", "d")
	ts = newTextState(tok, []string{"bc"}, nil)
	var shown strings.Builder
	stopped := false
	for _, id := range ids {
		s, stop := ts.add(id)
		shown.WriteString(s)
		if stop {
			stopped = true
			break
		}
	}
	if !stopped || shown.String() != "a" || string(ts.full) != "a" || ts.matched != "bc" {
		t.Fatalf("stop: %v, shown %q, text %q, matched %q", stopped, shown.String(), ts.full, ts.matched)
	}
	// Of two stop strings, the one that occurs first is the one matched.
	ts = newTextState(tok, []string{"cd", "bc"}, nil)
	for _, id := range ids {
		if _, stop := ts.add(id); stop {
			break
		}
	}
	if string(ts.full) != "a" || ts.matched != "bc" {
		t.Fatalf("two stops: text %q, matched %q", ts.full, ts.matched)
	}
	// A false start is released once it cannot be a stop string.
	ts = newTextState(tok, []string{"bd"}, nil)
	shown.Reset()
	for _, id := range ids {
		s, stop := ts.add(id)
		shown.WriteString(s)
		if stop {
			t.Fatal("stopped on a false start")
		}
		if id == ids[1] && strings.HasSuffix(shown.String(), "b") {
			t.Fatal("a possible stop prefix was shown")
		}
	}
	shown.WriteString(ts.flush())
	if shown.String() != "abcd" {
		t.Fatalf("shown %q", shown.String())
	}
}

// TestTextStateKeep: a control token prints nothing unless the request
// keeps it (a tool-call marker such as Mistral's [TOOL_CALLS]), and then
// prints its text.
func TestTextStateKeep(t *testing.T) {
	tok, err := engine.LoadTokenizer(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	bos := tok.BOS()
	if bos < 0 || tok.IsEnd(bos) || len(tok.Piece(bos)) != 0 {
		t.Skip("the test vocabulary has no silent BOS control token")
	}
	ids := append([]int32{bos}, pieceTokens(t, tok, "a")...)
	for _, c := range []struct {
		keep []string
		want string
	}{{nil, "a"}, {[]string{tok.Token(bos)}, tok.Token(bos) + "a"}, {[]string{"[NOT_IN_VOCAB]"}, "a"}} {
		ts := newTextState(tok, nil, c.keep)
		var got strings.Builder
		for _, id := range ids {
			s, _ := ts.add(id)
			got.WriteString(s)
		}
		if got.String() != c.want {
			t.Errorf("keep %q: %q, want %q", c.keep, got.String(), c.want)
		}
	}
}
