package swarm

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/proto"
)

// ProtocolBW is the bandwidth probe of relayed links.
const ProtocolBW = proto.BW

// Bandwidth probes. A relayed link's bandwidth is the relay's uplink and
// rate cap shared by its circuits, which no configuration knows, so the
// host measures it: it sends ProbeBytes through the link and times the
// answer. Routing then charges the link's activations at that rate. The
// probe costs ProbeBytes per relayed peer every probeEvery, a fraction of
// a second on a 10 Mbit/s uplink.
const (
	// ProbeBytes is the size of one probe: large against the relay's
	// 64 KiB burst and buffers, so that their head start counts little.
	ProbeBytes = 512 << 10
	probeEvery = time.Minute
	bwAlpha    = 0.5 // weight of a new probe in the smoothed bandwidth
)

// serveBW counts the probe's bytes and answers with the count. It reads
// at most ProbeBytes: a longer probe is reset.
func (s *Host) serveBW(st network.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	n, err := io.Copy(io.Discard, io.LimitReader(st, ProbeBytes+1))
	if err != nil || n > ProbeBytes {
		s.log.Debug("bandwidth probe refused", zap.Stringer("peer", st.Conn().RemotePeer()), zap.Int64("bytes", n), zap.Error(err))
		_ = st.Reset()
		return
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	if _, err := st.Write(b[:]); err != nil {
		_ = st.Reset()
	}
}

// ProbeBandwidth measures the bytes per second our link to p carries:
// it sends ProbeBytes and waits for p's count of them. The time taken,
// less one round trip (the first byte's way there and the answer's way
// back), is the transfer's. The result is folded into p's row
// (Peer.Bandwidth) and returned.
func (s *Host) ProbeBandwidth(ctx context.Context, p peer.ID) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := s.h.NewStream(network.WithAllowLimitedConn(ctx, "bandwidth probe"), p, ProtocolBW)
	if err != nil {
		return 0, fmt.Errorf("%w: open stream to %s: %w", ErrProbe, p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	buf := make([]byte, 64<<10)
	start := time.Now()
	for sent := 0; sent < ProbeBytes; sent += len(buf) {
		if _, err := st.Write(buf[:min(len(buf), ProbeBytes-sent)]); err != nil {
			_ = st.Reset()
			return 0, fmt.Errorf("%w: send to %s: %w", ErrProbe, p, err)
		}
	}
	if err := st.CloseWrite(); err != nil {
		_ = st.Reset()
		return 0, fmt.Errorf("%w: close write to %s: %w", ErrProbe, p, err)
	}
	var b [8]byte
	if _, err := io.ReadFull(st, b[:]); err != nil {
		_ = st.Reset()
		return 0, fmt.Errorf("%w: answer from %s: %w", ErrProbe, p, err)
	}
	took := time.Since(start)
	if n := binary.BigEndian.Uint64(b[:]); n != ProbeBytes {
		return 0, fmt.Errorf("%w: %s counted %d of %d bytes", ErrProbe, p, n, ProbeBytes)
	}
	var rtt time.Duration
	if row, ok := s.table.Get(p); ok {
		rtt = row.RTT
	}
	// The round trip is subtracted, but a wrong RTT must not make the
	// figure absurd: the transfer takes at least half the time.
	xfer := max(took-rtt, took/2)
	bw := float64(ProbeBytes) / xfer.Seconds()
	s.table.observeBandwidth(p, bw, bwAlpha)
	return bw, nil
}

// bwProber probes the relayed peers, each at most once per probeEvery,
// one at a time.
type bwProber struct {
	h    *Host
	mu   sync.Mutex
	last map[peer.ID]time.Time
}

func (b *bwProber) run(ctx context.Context) {
	t := time.NewTicker(max(b.h.cfg.rttInterval, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var due []peer.ID
		b.mu.Lock()
		for id := range b.last {
			if row, ok := b.h.table.Get(id); !ok || row.Link != LinkRelayed {
				delete(b.last, id)
			}
		}
		for _, p := range b.h.table.Snapshot() {
			if p.Link == LinkRelayed && p.Liveness != Dead && now.Sub(b.last[p.ID]) >= probeEvery {
				due = append(due, p.ID)
			}
		}
		slices.Sort(due)
		for _, id := range due {
			b.last[id] = now
		}
		b.mu.Unlock()
		for _, id := range due {
			if bw, err := b.h.ProbeBandwidth(ctx, id); err != nil {
				b.h.log.Debug("bandwidth probe", zap.Stringer("peer", id), zap.Error(err))
			} else {
				b.h.log.Debug("bandwidth probe", zap.Stringer("peer", id), zap.Float64("mb_per_s", bw/1e6))
			}
		}
	}
}
