package swarm

import (
	"context"
	"sync/atomic"
	"time"

	pbv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/pb"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"golang.org/x/time/rate"
)

// DefaultRelayRate is how many bytes per second a relay carries for
// others, all circuits together, unless WithRelayRate says otherwise:
// enough for a few relayed members' activations (a 4 MB prefill frame in
// a sixth of a second), little enough that the relay's own hops keep
// most of a home uplink or of a CPU core's worth of encryption.
const DefaultRelayRate = 25 << 20

// relayRateBurst is the most bytes let through at once. The relay copies
// in chunks of at most its buffer size (64 KiB here, 2 KiB with the stock
// limits), and a chunk must fit in the burst.
const relayRateBurst = 64 << 10

// relayMeter throttles the bytes a relay copies between the two halves
// of its circuits. go-libp2p's relay has per-circuit data and duration
// limits but no byte rate, and it calls its metrics tracer after every
// chunk it copies, from the copying goroutine: blocking there until the
// limiter has tokens paces the copy without wrapping the host's streams.
// It also counts the bytes relayed, for status and tests.
type relayMeter struct {
	ctx     context.Context // the host's: Close unblocks waiting copies
	lim     *rate.Limiter   // nil: no cap
	relayed atomic.Int64
	open    atomic.Int64 // circuits open
}

var _ relayv2.MetricsTracer = (*relayMeter)(nil)

func newRelayMeter(ctx context.Context, bytesPerSec float64) *relayMeter {
	m := &relayMeter{ctx: ctx}
	if bytesPerSec > 0 {
		m.lim = rate.NewLimiter(rate.Limit(bytesPerSec), relayRateBurst)
	}
	return m
}

// BytesTransferred paces the copy that just wrote n bytes.
func (m *relayMeter) BytesTransferred(n int) {
	m.relayed.Add(int64(n))
	if m.lim == nil {
		return
	}
	for n > 0 {
		k := min(n, relayRateBurst)
		if m.lim.WaitN(m.ctx, k) != nil {
			return // host closing: let the copy run into its closed streams
		}
		n -= k
	}
}

// ConnectionOpened counts an open circuit.
func (m *relayMeter) ConnectionOpened() { m.open.Add(1) }

// ConnectionClosed counts a closed circuit.
func (m *relayMeter) ConnectionClosed(time.Duration) { m.open.Add(-1) }

// RelayStatus, ConnectionRequestHandled, ReservationAllowed,
// ReservationClosed and ReservationRequestHandled are not needed.
func (m *relayMeter) RelayStatus(bool)                      {}
func (m *relayMeter) ConnectionRequestHandled(pbv2.Status)  {}
func (m *relayMeter) ReservationAllowed(bool)               {}
func (m *relayMeter) ReservationClosed(int)                 {}
func (m *relayMeter) ReservationRequestHandled(pbv2.Status) {}

// RelayStats is what this host has relayed for other members.
type RelayStats struct {
	Bytes    int64   // carried since start, both directions
	Circuits int64   // open now
	Rate     float64 // the cap in bytes per second; 0: none
}

// RelayStats returns the relay counters; all zero when the host does not
// relay.
func (ln *Links) RelayStats() RelayStats {
	s := ln.h
	m := s.relayMeter
	if m == nil {
		return RelayStats{}
	}
	st := RelayStats{Bytes: m.relayed.Load(), Circuits: m.open.Load()}
	if m.lim != nil {
		st.Rate = float64(m.lim.Limit())
	}
	return st
}
