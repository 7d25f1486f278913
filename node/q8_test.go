package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// q8Sample is a frame of two rows of 70 columns (blocks of 32, 32 and 6)
// with values of very different magnitudes per block.
func q8Sample(t testing.TB) *Step {
	const cols = 70
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 2*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * float32(math.Pow(10, float64(i/32%4)-2))
	}
	x[5], x[40] = 0, -1e30 // a zero, and a block scaled by a huge value
	for i := 2*cols - 6; i < 2*cols; i++ {
		x[i] = 0 // an all-zero last block
	}
	return &Step{Session: SessionID{7}, Entry: testPeer(t, 1), Hops: []Hop{{testPeer(t, 2), 4, 8}}, Pos: 3,
		Tokens: []int32{1, 2}, Hidden: x, Cols: cols, DType: DTypeQ8}
}

func TestWireQ8(t *testing.T) {
	s := q8Sample(t)
	b, err := Encode(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := Encode(nil, s)
	if !bytes.Equal(b, b2) {
		t.Fatal("the same rows gave different bytes")
	}
	f32, _ := Encode(nil, &Step{Session: s.Session, Entry: s.Entry, Hops: s.Hops, Pos: s.Pos, Tokens: s.Tokens, Hidden: s.Hidden, Cols: s.Cols})
	// Hidden bytes: 2 rows × (3 scales × 4 + 70) against 2 × 70 × 4.
	if got, want := len(f32)-len(b), 2*70*4-2*(3*4+70); got != want {
		t.Fatalf("q8 frame %d bytes smaller than f32, want %d", got, want)
	}
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*Step)
	if got.DType != DTypeQ8 || got.Cols != s.Cols || len(got.Hidden) != len(s.Hidden) {
		t.Fatalf("decoded %v × %d, %d values", got.DType, got.Cols, len(got.Hidden))
	}
	// Each value is within half a step (max|block| / 254) of the original.
	for r := 0; r < 2; r++ {
		for lo := 0; lo < s.Cols; lo += q8Block {
			hi := min(lo+q8Block, s.Cols)
			var m float64
			for _, v := range s.Hidden[r*s.Cols+lo : r*s.Cols+hi] {
				m = max(m, math.Abs(float64(v)))
			}
			for i := r*s.Cols + lo; i < r*s.Cols+hi; i++ {
				if d := math.Abs(float64(got.Hidden[i]) - float64(s.Hidden[i])); d > m/254*1.0001 {
					t.Fatalf("value %d: %v → %v (block max %v)", i, s.Hidden[i], got.Hidden[i], m)
				}
			}
		}
	}
	if got.Hidden[5] != 0 || got.Hidden[40] != -1e30 {
		t.Fatalf("zero → %v, block maximum -1e30 → %v", got.Hidden[5], got.Hidden[40])
	}
	// What a q8 link delivers is what q8RoundTrip computes.
	rt := append([]float32(nil), s.Hidden...)
	if err := q8RoundTrip(rt, s.Cols); err != nil {
		t.Fatal(err)
	}
	for i := range rt {
		if math.Float32bits(rt[i]) != math.Float32bits(got.Hidden[i]) {
			t.Fatalf("value %d: round trip %v, frame %v", i, rt[i], got.Hidden[i])
		}
	}
}

func TestWireQ8Rejects(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		s := q8Sample(t)
		s.Hidden[3] = v
		if _, err := Encode(nil, s); !errors.Is(err, ErrBadFrame) || !errors.Is(err, errQ8NonFinite) {
			t.Errorf("encoded %v as q8: %v", v, err)
		}
	}
	good, err := Encode(nil, q8Sample(t))
	if err != nil {
		t.Fatal(err)
	}
	// The hidden states are the frame's last 2 × 82 bytes: row 0's first
	// scale at hid, its first value at hid+4.
	hid := len(good) - 2*int(q8RowBytes(70))
	edit := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	scale := func(v float32) []byte {
		return edit(func(b []byte) { binary.LittleEndian.PutUint32(b[hid:], math.Float32bits(v)) })
	}
	cases := map[string][]byte{
		"negative scale":     scale(-1),
		"NaN scale":          scale(float32(math.NaN())),
		"infinite scale":     scale(float32(math.Inf(1))),
		"overflowing scale":  scale(math.MaxFloat32 / 100),
		"value -128":         edit(func(b []byte) { b[hid+4+3] = 0x80 }),
		"-128 in last block": edit(func(b []byte) { b[len(b)-1] = 0x80 }),
		"a byte short":       good[:len(good)-1],
		"a byte over":        append(bytes.Clone(good), 0),
		// The f32 size of the same rows under the q8 dtype byte.
		"f32 rows as q8": func() []byte {
			s := q8Sample(t)
			s.DType = DTypeF32
			b := mustEncodeTB(t, s)
			b[len(b)-4*len(s.Hidden)-5] = byte(DTypeQ8)
			return b
		}(),
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustEncodeTB(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Encode(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
