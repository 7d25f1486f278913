package node

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/engine"
)

// rewriteSteal rewrites the steal protocol's golden frames and fuzz seeds
// from the current code: only for a deliberate change of format, never to
// make a test pass.
var rewriteSteal = flag.Bool("rewrite-steal", false, "rewrite testdata/steal/golden.txt and the FuzzDecodeSteal seeds")

type stealCase struct {
	name string
	m    stealMsg
}

// stealGolden is one frame of each kind, and the edges of a handover.
func stealGolden() []stealCase {
	return []stealCase{
		{"ask", stealMsg{Kind: stealAsk}},
		{"ask-min-wait", stealMsg{Kind: stealAsk, MinWait: 1500 * time.Millisecond}},
		{"none", stealMsg{Kind: stealNone}},
		{"hand", stealMsg{Kind: stealHand, Hand: &handover{Tokens: []int32{1, 450, 2501}, MaxTokens: 24,
			Sampling: engine.SamplingParams{Seed: 7}, Stop: []string{"\n"}, Profile: "fast"}}},
		{"hand-sampling", stealMsg{Kind: stealHand, Hand: &handover{Tokens: []int32{math.MaxInt32}, MaxTokens: 1,
			Sampling: engine.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.95, MinKeep: 2, Seed: 1 << 40,
				RepeatPenalty: 1.1, RepeatLastN: 64}}}},
		{"tok", stealMsg{Kind: stealToken, Token: 2501}},
		{"done", stealMsg{Kind: stealDone}},
		{"error", stealMsg{Kind: stealFail, Err: "no room"}},
	}
}

// The steal frames' bytes are the golden file's; a change of format shows
// here first.
func TestStealGolden(t *testing.T) {
	var out strings.Builder
	for _, c := range stealGolden() {
		b, err := encodeSteal(c.m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		m, err := decodeSteal(b)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if back, _ := encodeSteal(m); !bytes.Equal(back, b) {
			t.Fatalf("%s: decoded %+v encodes to %x, not %x", c.name, m, back, b)
		}
		fmt.Fprintf(&out, "%s %s\n", c.name, hex.EncodeToString(b))
		if *rewriteSteal {
			writeSeed(t, c.name, b)
			writeSeed(t, c.name+"-cut", b[:len(b)-1])
		}
	}
	path := filepath.Join("testdata", "steal", "golden.txt")
	if *rewriteSteal {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("steal frames differ from %s:\n%s\nwant:\n%s", path, out.String(), want)
	}
}

func writeSeed(t *testing.T, name string, b []byte) {
	t.Helper()
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeSteal")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
	if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(seed), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The handover's layout, built field by field with encoding/binary from
// the format's comment (stealwire.go), not with the codec.
func TestStealHandLayout(t *testing.T) {
	le := binary.LittleEndian
	want := []byte{3}
	want = le.AppendUint32(want, 24)
	want = le.AppendUint32(want, 3)
	for _, tok := range []uint32{1, 450, 2501} {
		want = le.AppendUint32(want, tok)
	}
	want = le.AppendUint32(want, math.Float32bits(0.5)) // temperature
	want = le.AppendUint32(want, 40)                    // top-k
	want = le.AppendUint32(want, math.Float32bits(0.9)) // top-p
	want = le.AppendUint32(want, 1)                     // min-keep
	want = le.AppendUint64(want, 7)                     // seed
	want = le.AppendUint32(want, math.Float32bits(1.1)) // repeat penalty
	want = le.AppendUint32(want, 64)                    // repeat window
	want = append(want, 2)                              // stop strings
	want = le.AppendUint16(want, 1)
	want = append(want, '\n')
	want = le.AppendUint16(want, 3)
	want = append(want, "END"...)
	want = append(want, 4)
	want = append(want, "fast"...)
	got, err := encodeSteal(stealMsg{Kind: stealHand, Hand: &handover{Tokens: []int32{1, 450, 2501}, MaxTokens: 24,
		Sampling: engine.SamplingParams{Temperature: 0.5, TopK: 40, TopP: 0.9, MinKeep: 1, Seed: 7, RepeatPenalty: 1.1, RepeatLastN: 64},
		Stop:     []string{"\n", "END"}, Profile: "fast"}})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("handover %x (%v), want %x", got, err, want)
	}
	ask, err := encodeSteal(stealMsg{Kind: stealAsk, MinWait: 300})
	if err != nil || !bytes.Equal(ask, binary.AppendUvarint([]byte{1}, 300)) {
		t.Fatalf("ask %x (%v)", ask, err)
	}
}

// Every bad frame or message is refused with ErrBadSteal.
func TestStealRefusesBadFrames(t *testing.T) {
	good, err := encodeSteal(stealGolden()[3].m)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"unknown kind":   {9},
		"trailing":       append(bytes.Clone(good), 0),
		"cut":            good[:len(good)-1],
		"no tokens":      append([]byte{3, 24, 0, 0, 0}, 0, 0, 0, 0),
		"zero max":       append([]byte{3, 0, 0, 0, 0}, 1, 0, 0, 0, 5, 0, 0, 0),
		"huge count":     {3, 24, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f},
		"negative token": {4, 0xff, 0xff, 0xff, 0xff},
		"non-canonical":  {1, 0x80, 0x00},
	} {
		if _, err := decodeSteal(b); !errors.Is(err, ErrBadSteal) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, m := range map[string]stealMsg{
		"min wait on tok": {Kind: stealToken, MinWait: time.Second},
		"negative wait":   {Kind: stealAsk, MinWait: -1},
		"no handover":     {Kind: stealHand},
		"no tokens":       {Kind: stealHand, Hand: &handover{MaxTokens: 4}},
		"negative token":  {Kind: stealToken, Token: -1},
		"many stops":      {Kind: stealHand, Hand: &handover{Tokens: []int32{1}, MaxTokens: 4, Stop: make([]string, stealMaxStops+1)}},
		"long stop":       {Kind: stealHand, Hand: &handover{Tokens: []int32{1}, MaxTokens: 4, Stop: []string{strings.Repeat("x", stealMaxStopLen+1)}}},
		"long profile":    {Kind: stealHand, Hand: &handover{Tokens: []int32{1}, MaxTokens: 4, Profile: strings.Repeat("p", 256)}},
		"unknown kind":    {Kind: 9},
	} {
		if b, err := encodeSteal(m); !errors.Is(err, ErrBadSteal) || b != nil {
			t.Errorf("%s: %x, %v", name, b, err)
		}
	}
	// A long error message is cut, not refused.
	b, err := encodeSteal(stealMsg{Kind: stealFail, Err: strings.Repeat("e", 3*stealMaxErr)})
	if m, derr := decodeSteal(b); err != nil || derr != nil || len(m.Err) != stealMaxErr {
		t.Fatalf("long error: %v, %v, %d bytes", err, derr, len(m.Err))
	}
}
