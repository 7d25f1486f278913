package node

import (
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
)

// WireMode is how a node sends hidden states to its next hops.
type WireMode string

// The wire modes.
const (
	// WireF32: float32, 4 bytes a value; every split is bit-identical
	// with a single-process run. The default.
	WireF32 WireMode = "f32"
	// WireF16: float16, 2 bytes a value.
	WireF16 WireMode = "f16"
	// WireQ8: 8-bit blocks (q8.go), 1.125 bytes a value.
	WireQ8 WireMode = "q8"
	// WireAuto picks per next hop from the link's measured bandwidth:
	// q8 below WireQ8Below, f16 below WireF16Below, f32 above and where
	// nothing was measured.
	WireAuto WireMode = "auto"
)

// The bandwidths (bytes/s) under which WireAuto compresses a link. A
// home uplink of 20 Mbit/s carries a 4096-wide float32 row in 6.5 ms,
// longer than a layer range's decode step on a GPU; q8 cuts it to 1.8 ms.
const (
	WireQ8Below  = 100e6 / 8 // 100 Mbit/s
	WireF16Below = 1e9 / 8   // 1 Gbit/s
	// wireSlack keeps a link's dtype until its bandwidth passes the
	// threshold by this factor, so that a figure hovering at a threshold
	// does not flip the dtype from one step to the next.
	wireSlack = 1.2
)

// ErrWireMode: an unknown wire mode.
var ErrWireMode = errors.New("node: unknown wire mode")

// ParseWire parses f32, f16, q8 or auto ("" is f32).
func ParseWire(s string) (WireMode, error) {
	switch m := WireMode(s); m {
	case "":
		return WireF32, nil
	case WireF32, WireF16, WireQ8, WireAuto:
		return m, nil
	}
	return "", fmt.Errorf("%w %q: want f32, f16, q8 or auto", ErrWireMode, s)
}

// lossy reports whether the mode may send rows other than float32, whose
// frames are then not signed (sigframe.go).
func (m WireMode) lossy() bool { return m != "" && m != WireF32 }

// wirePicker chooses the dtype of the hidden states sent to each peer.
type wirePicker struct {
	mode WireMode
	// bandwidth is the measured bytes/s of the link to a peer; 0 when
	// unmeasured (swarm probes only relayed links, bwprobe.go).
	bandwidth func(peer.ID) float64
	log       *zap.Logger // nil: no log

	mu   sync.Mutex
	last map[peer.ID]DType // WireAuto's latest choice per peer
}

// pick returns the dtype for the hidden states sent to p.
func (w *wirePicker) pick(p peer.ID) DType {
	if w == nil {
		return DTypeF32
	}
	switch w.mode {
	case WireF16:
		return DTypeF16
	case WireQ8:
		return DTypeQ8
	case WireAuto:
	default:
		return DTypeF32
	}
	bw := 0.0
	if w.bandwidth != nil {
		bw = w.bandwidth(p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = make(map[peer.ID]DType)
	}
	prev := w.last[p]
	d := autoDType(bw, prev)
	w.last[p] = d
	if d != prev && w.log != nil {
		w.log.Info("wire dtype of a link", zap.Stringer("peer", p), zap.Stringer("dtype", d), zap.Float64("measured_mbit_s", bw*8/1e6))
	}
	return d
}

// autoDType is WireAuto's choice for a link of bw bytes/s (0:
// unmeasured) whose frames went as prev (0: none yet).
func autoDType(bw float64, prev DType) DType {
	if !(bw > 0) {
		return DTypeF32
	}
	q8, f16 := float64(WireQ8Below), float64(WireF16Below)
	switch prev {
	case DTypeQ8:
		q8 *= wireSlack
	case DTypeF16:
		q8 /= wireSlack
		f16 *= wireSlack
	case DTypeF32:
		f16 /= wireSlack
	}
	switch {
	case bw < q8:
		return DTypeQ8
	case bw < f16:
		return DTypeF16
	}
	return DTypeF32
}
