package node

import (
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestWireModeParse(t *testing.T) {
	for s, want := range map[string]WireMode{"": WireF32, "f32": WireF32, "f16": WireF16, "q8": WireQ8, "auto": WireAuto} {
		if m, err := ParseWire(s); err != nil || m != want {
			t.Errorf("ParseWire(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"F16", "int8", "q4"} {
		if _, err := ParseWire(s); !errors.Is(err, ErrWireMode) {
			t.Errorf("ParseWire(%q): %v", s, err)
		}
	}
	var c config
	if err := WithWire("q4")(&c); !errors.Is(err, ErrConfig) || !errors.Is(err, ErrWireMode) {
		t.Errorf("WithWire(q4): %v", err)
	}
	if WithWireF16(true)(&c); c.wire != WireF16 {
		t.Errorf("WithWireF16(true): %q", c.wire)
	}
	if WithWireF16(false)(&c); c.wire != WireF32 {
		t.Errorf("WithWireF16(false): %q", c.wire)
	}
}

// TestWireAutoPick: forced modes ignore the link; auto follows the
// measured bandwidth, keeps f32 where nothing was measured, and holds a
// link's dtype until the figure passes the threshold by wireSlack.
func TestWireAutoPick(t *testing.T) {
	const mbit = 1e6 / 8
	bw := map[peer.ID]float64{}
	a, b := testPeer(t, 1), testPeer(t, 2)
	for mode, want := range map[WireMode]DType{WireF32: DTypeF32, WireF16: DTypeF16, WireQ8: DTypeQ8, "": DTypeF32} {
		w := &wirePicker{mode: mode, bandwidth: func(p peer.ID) float64 { return 1 }}
		if got := w.pick(a); got != want {
			t.Errorf("%q: %v, want %v", mode, got, want)
		}
	}
	w := &wirePicker{mode: WireAuto, bandwidth: func(p peer.ID) float64 { return bw[p] }}
	steps := []struct {
		bw   float64
		want DType
	}{
		{0, DTypeF32},            // unmeasured
		{20 * mbit, DTypeQ8},     // a home uplink
		{110 * mbit, DTypeQ8},    // above 100 Mbit/s, within the slack
		{125 * mbit, DTypeF16},   // past it
		{90 * mbit, DTypeF16},    // below, within the slack
		{80 * mbit, DTypeQ8},     // past it
		{10000 * mbit, DTypeF32}, // a datacenter link
		{900 * mbit, DTypeF32},   // within the slack under 1 Gbit/s
		{800 * mbit, DTypeF16},
	}
	for i, s := range steps {
		bw[a] = s.bw
		if got := w.pick(a); got != s.want {
			t.Fatalf("step %d, %v Mbit/s: %v, want %v", i, s.bw/mbit, got, s.want)
		}
	}
	// Links are independent: b's first choice has no slack to keep.
	bw[b] = 110 * mbit
	if got := w.pick(b); got != DTypeF16 {
		t.Fatalf("another link at 110 Mbit/s: %v", got)
	}
	if got := (*wirePicker)(nil).pick(a); got != DTypeF32 {
		t.Fatalf("no picker: %v", got)
	}
}
