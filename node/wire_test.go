package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
)

func testPeer(t testing.TB, seed byte) peer.ID {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func sampleMessages(t testing.TB) []Message {
	a, b, c := testPeer(t, 1), testPeer(t, 2), testPeer(t, 3)
	sid := SessionID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	return []Message{
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 0, 4}, {c, 4, 8}}, Pos: 0, Tokens: []int32{1, 2, 3},
			Open: &Open{MaxTokens: 40, Model: ModelHash("m"), Sampling: engine.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 7, RepeatPenalty: 1.1, RepeatLastN: 32}}},
		&Step{Session: sid, Entry: a, Hops: []Hop{{c, 4, 8}}, Pos: 5, Tokens: []int32{9, 10},
			Hidden: []float32{1, -2, 3.5, 0, 1e-3, -1e9}, Cols: 3, DType: DTypeF32},
		// A resumed prefill: the sender skipped two cached positions.
		&Step{Session: sid, Entry: a, Hops: []Hop{{c, 4, 8}}, Pos: 0, Tokens: []int32{1, 2, 3}, Skip: 2,
			Open: &Open{MaxTokens: 40, Model: ModelHash("m"), Cold: false}, Hidden: []float32{1, 2, 3}, Cols: 3, DType: DTypeF32},
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 0, 8}}, Pos: 0, Tokens: []int32{1, 2, 3},
			Open: &Open{MaxTokens: 40, Model: ModelHash("m"), Cold: true}},
		&Token{Session: sid, Pos: 17, Token: 42},
		// A constrained session (grammar.Spec), with log-probabilities
		// and a resumed prefill beside it.
		&Step{Session: sid, Entry: a, Hops: []Hop{{c, 4, 8}}, Pos: 0, Tokens: []int32{1, 2, 3}, Skip: 1,
			Open: &Open{MaxTokens: 40, Model: ModelHash("m"), LogProbs: true, TopLogProbs: 2,
				Grammar: []byte(`{"schema":{"type":"object"}}`), GrammarFrom: 2}, Hidden: []float32{1, 2, 3, 4}, Cols: 2, DType: DTypeF32},
		&ErrorMsg{Session: sid, Code: CodeUnreachable, Peer: c, Text: "gone"},
		&ErrorMsg{Session: sid, Code: CodeBusy},
		&Close{Session: sid},
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 0, 4}}, Pos: 0, Tokens: []int32{1, 2, 3}, Check: true,
			Open: &Open{MaxTokens: 3, Model: ModelHash("m")}},
		// A tolerance check session: its last hop answers with logits.
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 4, 8}}, Pos: 0, Tokens: []int32{1, 2, 3}, Check: true, Logits: true,
			Open: &Open{MaxTokens: 3, Model: ModelHash("m"), Cold: true}},
		&Audit{Session: sid, From: 4},
		// A signed frame (sigframe.go) and the entry's ask for its receipt.
		&Step{Session: sid, Entry: a, Hops: []Hop{{c, 4, 8}}, Pos: 5, Tokens: []int32{9}, Hidden: []float32{1, -2, 3.5},
			Cols: 3, DType: DTypeF32, Sig: &FrameSig{From: 1, InChain: [32]byte{9, 8, 7}, Sig: bytes.Repeat([]byte{5}, 64)}},
		&UpAudit{Session: sid, From: 4},
		&ReceiptMsg{Session: sid, Receipt: consensus.Receipt{Signer: b, Session: sid, Model: ModelHash("m"), From: 4, To: 8,
			Positions: 12, InChain: [32]byte{1}, OutChain: [32]byte{2}, OutLast: [32]byte{3}, Sig: bytes.Repeat([]byte{7}, 64)}},
		// A last hop's receipt with its logits (a tolerance check).
		&ReceiptMsg{Session: sid, Receipt: consensus.Receipt{Signer: b, Session: sid, Model: ModelHash("m"), From: 4, To: 8,
			Positions: 12, InChain: [32]byte{1}, OutLast: [32]byte{3}, Sig: bytes.Repeat([]byte{7}, 64),
			Logits: &consensus.Logits{Engine: "ggml-CUDA0", Tokens: [32]byte{4}, MaxAbs: 9,
				Top: []consensus.TopLogit{{ID: 17, Logit: 9}, {ID: 3, Logit: 2.5}}}}},
	}
}

// lpMessages are the frames of a session with log-probabilities: its
// open step and its tokens (with alternatives, with none, with -Inf).
func lpMessages(t testing.TB) []Message {
	a, b := testPeer(t, 1), testPeer(t, 2)
	sid := SessionID{9, 8, 7}
	inf := float32(math.Inf(-1))
	return []Message{
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 0, 8}}, Pos: 0, Tokens: []int32{1, 2, 3},
			Open: &Open{MaxTokens: 40, Model: ModelHash("m"), Sampling: engine.SamplingParams{Temperature: 0.7, Seed: 3},
				LogProbs: true, TopLogProbs: 5}},
		&Step{Session: sid, Entry: a, Hops: []Hop{{b, 0, 8}}, Pos: 0, Tokens: []int32{1}, Skip: 0,
			Open: &Open{MaxTokens: 4, Model: ModelHash("m"), LogProbs: true}},
		&Token{Session: sid, Pos: 3, Token: 42, LP: &TokenLP{LogProb: -0.25,
			Top: []engine.TokenLogProb{{Token: 42, LogProb: -0.25}, {Token: 7, LogProb: -2}, {Token: 1, LogProb: inf}}}},
		&Token{Session: sid, Pos: 4, Token: 0, LP: &TokenLP{LogProb: inf}},
	}
}

func TestWireLogProbs(t *testing.T) {
	for _, m := range lpMessages(t) {
		b := mustEncode(t, m)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("cut at %d of %d: %v", i, len(b), err)
			}
		}
		if _, err := Decode(append(b, 0)); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("a trailing byte: %v", err)
		}
	}
	// A token without log-probabilities keeps version 1's bytes: nodes
	// that never ask see no change.
	if b := mustEncode(t, &Token{Session: SessionID{1}, Pos: 17, Token: 42}); len(b) != 18+8 || Kind(b[1]) != KindToken {
		t.Fatalf("plain token frame changed: %x", b)
	}
	tok := mustEncode(t, lpMessages(t)[2])
	const nAt = 18 + 4 + 4 + 4 // header, position, token, log-probability
	forged := map[string][]byte{
		// 21 alternatives, with the bytes for them: past the bound.
		"oversized": func() []byte {
			b := slices.Clone(tok[:nAt])
			b = append(b, MaxTopLogProbs+1)
			for i := range MaxTopLogProbs + 1 {
				b = binary.LittleEndian.AppendUint32(b, uint32(i))
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(-float32(i)))
			}
			return b
		}(),
		"count beyond the bytes":   func() []byte { b := slices.Clone(tok); b[nAt] = 4; return b }(),
		"count short of the bytes": func() []byte { b := slices.Clone(tok); b[nAt] = 2; return b }(),
		"NaN": func() []byte {
			b := slices.Clone(tok)
			binary.LittleEndian.PutUint32(b[nAt-4:], math.Float32bits(float32(math.NaN())))
			return b
		}(),
		"positive": func() []byte {
			b := slices.Clone(tok)
			binary.LittleEndian.PutUint32(b[nAt-4:], math.Float32bits(0.5))
			return b
		}(),
		"out of order": func() []byte {
			b := slices.Clone(tok)
			binary.LittleEndian.PutUint32(b[nAt+1+8+4:], math.Float32bits(-0.1))
			return b
		}(),
		"negative alternative": func() []byte {
			b := slices.Clone(tok)
			binary.LittleEndian.PutUint32(b[nAt+1:], math.MaxUint32)
			return b
		}(),
		// The open step's flag belongs to open steps, and its count to 20.
		"log-probabilities without open": func() []byte { b := mustEncode(t, sampleMessages(t)[1]); b[18] |= flagLP; return b }(),
		"top count": func() []byte {
			m := lpMessages(t)[0].(*Step)
			b := mustEncode(t, m)
			// The count follows the open parameters, before the tokens.
			at := len(b) - 4 - 4*len(m.Tokens) - 1
			if b[at] != 5 {
				t.Fatalf("top count not at %d", at)
			}
			b[at] = MaxTopLogProbs + 1
			return b
		}(),
	}
	for name, b := range forged {
		if _, err := Decode(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Decode(forged["oversized"]); err == nil || !strings.Contains(err.Error(), "21 alternatives (at most 20)") {
		t.Errorf("the oversized frame's error does not say why: %v", err)
	}
	many := make([]engine.TokenLogProb, MaxTopLogProbs+1)
	for _, m := range []Message{
		&Token{LP: &TokenLP{LogProb: float32(math.NaN())}},
		&Token{LP: &TokenLP{LogProb: 1}},
		&Token{LP: &TokenLP{Top: many}},
		&Token{LP: &TokenLP{Top: []engine.TokenLogProb{{Token: 1, LogProb: -2}, {Token: 2, LogProb: -1}}}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}, Tokens: []int32{1},
			Open: &Open{MaxTokens: 4, LogProbs: true, TopLogProbs: MaxTopLogProbs + 1}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}, Tokens: []int32{1},
			Open: &Open{MaxTokens: 4, TopLogProbs: 3}},
	} {
		if _, err := Encode(nil, m); !errors.Is(err, ErrBadFrame) {
			t.Errorf("encoded %+v: %v", m, err)
		}
	}
}

// TestWireGrammar: a step with a grammar is a kind of its own (an older
// node refuses it rather than sampling freely); one without keeps the
// step's bytes; a grammar without an open, an empty one or one past
// MaxGrammar is refused.
func TestWireGrammar(t *testing.T) {
	a, b := testPeer(t, 1), testPeer(t, 2)
	open := func() *Open { return &Open{MaxTokens: 8, Model: ModelHash("m")} }
	plain := mustEncode(t, &Step{Session: SessionID{1}, Entry: a, Hops: []Hop{{b, 0, 8}}, Tokens: []int32{1}, Open: open()})
	o := open()
	o.Grammar, o.GrammarFrom = []byte(`{"schema":true}`), 1
	gram := mustEncode(t, &Step{Session: SessionID{1}, Entry: a, Hops: []Hop{{b, 0, 8}}, Tokens: []int32{1}, Open: o})
	if Kind(plain[1]) != KindStep || Kind(gram[1]) != KindStepGrammar || len(gram) != len(plain)+8+len(o.Grammar) {
		t.Fatalf("kinds %d, %d; %d and %d bytes", plain[1], gram[1], len(plain), len(gram))
	}
	// The grammar kind on a step that opens nothing.
	mid := mustEncode(t, &Step{Session: SessionID{1}, Entry: a, Hops: []Hop{{b, 0, 8}}, Pos: 3, Tokens: []int32{1}})
	mid[1] = byte(KindStepGrammar)
	if _, err := Decode(mid); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("a grammar kind without an open: %v", err)
	}
	for _, g := range [][]byte{{}, make([]byte, MaxGrammar+1)} {
		o := open()
		o.Grammar = g
		if _, err := Encode(nil, &Step{Session: SessionID{1}, Entry: a, Hops: []Hop{{b, 0, 8}}, Tokens: []int32{1}, Open: o}); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("a grammar of %d bytes: %v", len(g), err)
		}
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range sampleMessages(t) {
		b, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip of %T:\n got %+v\nwant %+v", m, got, m)
		}
		// Every strict prefix is refused, never a panic.
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("%T cut at %d of %d: %v", m, i, len(b), err)
			}
		}
		if _, err := Decode(append(b, 0)); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("%T with a trailing byte: %v", m, err)
		}
	}
}

func TestWireF16(t *testing.T) {
	vals := []float32{0, -0, 1, -1, 0.5, 65504, 1e-5, 6e-8, 3.14159, -2.71828, 1e6, float32(math.Inf(1))}
	s := &Step{Session: SessionID{1}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 1, 2}}, Tokens: []int32{1},
		Hidden: vals, Cols: len(vals), DType: DTypeF16}
	b, err := Encode(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*Step).Hidden
	for i, v := range vals {
		w := float64(v)
		if math.IsInf(w, 0) || w > 65504 {
			if !math.IsInf(float64(got[i]), 1) {
				t.Fatalf("%v → %v, want +Inf", v, got[i])
			}
			continue
		}
		if d := math.Abs(float64(got[i]) - w); d > math.Abs(w)/1000+6e-8 {
			t.Fatalf("%v → %v", v, got[i])
		}
	}
	if engine.F16ToF32(engine.F32ToF16(float32(math.NaN()))) == engine.F16ToF32(engine.F32ToF16(float32(math.NaN()))) {
		t.Fatal("NaN did not stay NaN")
	}
}

func TestWireRejects(t *testing.T) {
	good, err := Encode(nil, sampleMessages(t)[1])
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":       {},
		"version":     append([]byte{2}, good[1:]...),
		"kind":        append([]byte{1, 9}, good[2:]...),
		"flags":       func() []byte { b := bytes.Clone(good); b[18] |= 0x80; return b }(),
		"hidden size": good[:len(good)-4],
		// Skip and cold belong to open steps only.
		"skip without open": func() []byte { b := bytes.Clone(good); b[18] |= flagSkip; return b }(),
		"cold without open": func() []byte { b := bytes.Clone(good); b[18] |= flagCold; return b }(),
		// A signature belongs to frames of hidden states only, from a
		// layer below the receiver's, and is never empty.
		"signed without hidden":               func() []byte { b := mustEncode(t, sampleMessages(t)[0]); b[18] |= flagSigned; return b }(),
		"signature from the receiver's layer": signedWith(t, func(b []byte, at int) { b[at] = 4 }),
		"empty signature":                     signedWith(t, func(b []byte, at int) { b[at+4+32] = 0 }),
		"upstream audit of layer 0":           func() []byte { b, _ := Encode(nil, &UpAudit{From: 1}); b[18] = 0; return b }(),
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Encoders refuse what decoders would refuse.
	for _, m := range []Message{
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Tokens: []int32{1}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 2, 1}}, Tokens: []int32{1}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}, Tokens: []int32{1}, Hidden: []float32{1, 2}, Cols: 3},
		&ErrorMsg{Code: 0},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}, Tokens: []int32{1, 2}, Skip: 1},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 0, 1}}, Tokens: []int32{1, 2}, Skip: 2,
			Open: &Open{MaxTokens: 4}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 4, 8}}, Tokens: []int32{1}, Hidden: []float32{1},
			Cols: 1, Sig: &FrameSig{From: 4, Sig: []byte{1}}},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 4, 8}}, Tokens: []int32{1}, Hidden: []float32{1},
			Cols: 1, Sig: &FrameSig{From: 0}},
		&UpAudit{From: 0},
		&Step{Session: SessionID{}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 4, 8}}, Tokens: []int32{1},
			Sig: &FrameSig{From: 0, Sig: []byte{1}}},
	} {
		if _, err := Encode(nil, m); !errors.Is(err, ErrBadFrame) {
			t.Errorf("encoded %+v: %v", m, err)
		}
	}
}

// FuzzDecode: no input panics the decoder, it allocates in proportion to
// its input, and whatever decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range append(append(sampleMessages(f), lpMessages(f)...), q8Sample(f)) {
		b, err := Encode(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		// A q8 value is a byte: 4 bytes decoded per byte received.
		if s, ok := m.(*Step); ok && 4*len(s.Hidden)+4*len(s.Tokens) > 2*len(b)+64 && (s.DType != DTypeQ8 || len(s.Hidden) > len(b)) {
			t.Fatalf("decoded %d values from %d bytes", len(s.Hidden)+len(s.Tokens), len(b))
		}
		out, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", m, err)
		}
		if s, ok := m.(*Step); ok && s.DType == DTypeF16 {
			return // NaN payloads need not survive a half round trip
		}
		if s, ok := m.(*Step); ok && s.DType == DTypeQ8 {
			// A forged block need not be what an encoder writes (a scale
			// above max/127, say), but it re-encodes to a frame of the
			// same shape that decodes.
			if len(out) != len(b) {
				t.Fatalf("q8 re-encoding is %d bytes, not %d", len(out), len(b))
			}
			if _, err := Decode(out); err != nil {
				t.Fatalf("q8 re-encoding does not decode: %v", err)
			}
			return
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, out)
		}
	})
}

// signedWith encodes the sample signed frame and lets edit change it;
// at is the offset of its signature block.
func signedWith(t *testing.T, edit func(b []byte, at int)) []byte {
	t.Helper()
	var m *Step
	for _, s := range sampleMessages(t) {
		if s, ok := s.(*Step); ok && s.Sig != nil {
			m = s
		}
	}
	b, err := Encode(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	// header 18, flags 1, position 4, entry 1+len, hops 1 + (1+len+8).
	at := 18 + 1 + 4 + 1 + len(m.Entry) + 1 + 1 + len(m.Hops[0].Peer) + 8
	if got := int(b[at]); got != m.Sig.From {
		t.Fatalf("signature block not at %d", at)
	}
	edit(b, at)
	return b
}
