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

	"github.com/stratanet/strata/internal/codec"
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

// The probe protocol: the prober writes the probe's size (u32, 1 to
// ProbeBytes) and the other side answers one byte (1), a round trip on
// the same path that the transfer's time is corrected by; then the
// prober writes the bytes (zeros), the other side answers with the count
// it read (u64), and the prober tells it the bytes per second it found
// (the f64's bits, u64) and closes. Only one end of a link probes (the
// one with the lower peer ID, see bwProber), so that two probes do not
// share the link and each halve the other's figure; the other end learns
// the figure from the last message. All big-endian. Each message has an
// encoder and a decoder below, which both ends use.

// maxBandwidth bounds a reported figure (bytes/s): 100 GB/s.
const maxBandwidth = 100e9

// The probe's messages' lengths, and the ready byte.
const (
	probeSizeLen   = 4
	probeReadyLen  = 1
	probeCountLen  = 8
	probeFigureLen = 8
	probeReady     = 1
)

// encodeProbeSize is the prober's first message; a size out of 1 to
// ProbeBytes encodes to nil (nothing a decoder takes).
func encodeProbeSize(size int64) []byte {
	w := codec.NewWriter(make([]byte, 0, probeSizeLen), binary.BigEndian, ErrProbeSchema)
	if size <= 0 || size > ProbeBytes {
		w.Fail("probe size %d (want 1 to %d)", size, ProbeBytes)
	}
	w.U32(uint32(size))
	return w.Bytes()
}

// decodeProbeSize reads the probe's size; the answerer reads no more.
func decodeProbeSize(b []byte) (int64, error) {
	r := codec.NewReader(b, binary.BigEndian, ErrProbeSchema)
	size := int64(r.U32("probe size"))
	if r.Err() == nil && (size == 0 || size > ProbeBytes) {
		r.Fail("probe size %d (want 1 to %d)", size, ProbeBytes)
	}
	r.End()
	return size, r.Err()
}

// encodeProbeReady is the answerer's first answer.
func encodeProbeReady() []byte { return []byte{probeReady} }

func decodeProbeReady(b []byte) error {
	r := codec.NewReader(b, binary.BigEndian, ErrProbeSchema)
	if v := r.U8("ready"); r.Err() == nil && v != probeReady {
		r.Fail("ready byte %d", v)
	}
	r.End()
	return r.Err()
}

// encodeProbeCount is the answerer's count of the bytes it read; a count
// out of 1 to ProbeBytes encodes to nil.
func encodeProbeCount(n int64) []byte {
	w := codec.NewWriter(make([]byte, 0, probeCountLen), binary.BigEndian, ErrProbeSchema)
	if n <= 0 || n > ProbeBytes {
		w.Fail("probe count %d (want 1 to %d)", n, ProbeBytes)
	}
	w.U64(uint64(n))
	return w.Bytes()
}

// decodeProbeCount reads a count; one above ProbeBytes (a negative int64
// included) cannot be the count of a probe.
func decodeProbeCount(b []byte) (int64, error) {
	r := codec.NewReader(b, binary.BigEndian, ErrProbeSchema)
	n := r.U64("probe count")
	if r.Err() == nil && (n == 0 || n > ProbeBytes) {
		r.Fail("probe count %d (want 1 to %d)", n, ProbeBytes)
	}
	r.End()
	return int64(n), r.Err()
}

// encodeProbeFigure is the prober's last message, the bytes per second it
// found; the prober bounds it to (0, maxBandwidth] first.
func encodeProbeFigure(bw float64) []byte {
	w := codec.NewWriter(make([]byte, 0, probeFigureLen), binary.BigEndian, ErrProbeSchema)
	w.F64(bw)
	return w.Bytes()
}

// decodeProbeFigure reads a figure; NaN, zero, negative and figures above
// maxBandwidth are refused, so the answerer's row never takes them.
func decodeProbeFigure(b []byte) (float64, error) {
	r := codec.NewReader(b, binary.BigEndian, ErrProbeSchema)
	bw := r.F64("figure")
	if r.Err() == nil && !(bw > 0 && bw <= maxBandwidth) {
		r.Fail("figure %v bytes/s (want above 0, at most %v)", bw, maxBandwidth)
	}
	r.End()
	return bw, r.Err()
}

// serveBW answers a probe. It reads the announced size, at most
// ProbeBytes, and the figure; anything else resets the stream.
func (ln *Links) serveBW(st network.Stream) {
	s := ln.h
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(30 * time.Second))
	from := st.Conn().RemotePeer()
	refuse := func(why string, err error) {
		s.log.Debug("bandwidth probe refused", zap.Stringer("peer", from), zap.String("why", why), zap.Error(err))
		_ = st.Reset()
	}
	var buf [8]byte
	if _, err := io.ReadFull(st, buf[:probeSizeLen]); err != nil {
		refuse("header", err)
		return
	}
	size, err := decodeProbeSize(buf[:probeSizeLen])
	if err != nil {
		refuse("header", err)
		return
	}
	if _, err := st.Write(encodeProbeReady()); err != nil {
		refuse("ready", err)
		return
	}
	n, err := io.CopyN(io.Discard, st, size)
	if err != nil {
		refuse("payload", err)
		return
	}
	if _, err := st.Write(encodeProbeCount(n)); err != nil {
		refuse("count", err)
		return
	}
	if _, err := io.ReadFull(st, buf[:probeFigureLen]); err != nil {
		refuse("figure", err)
		return
	}
	bw, err := decodeProbeFigure(buf[:probeFigureLen])
	if err != nil {
		refuse("figure", err)
		return
	}
	if k, _ := st.Read(buf[:1]); k != 0 {
		refuse("bytes after the figure", nil)
		return
	}
	s.table.observeBandwidth(from, bw, bwAlpha)
}

// ProbeBandwidth measures the bytes per second our link to p carries:
// after one round trip on the probe stream it sends ProbeBytes and waits
// for p's count of them. The time from the first byte to the answer, less
// that round trip (the first byte's way there and the answer's way back),
// is the transfer's. The result is folded into p's row (Peer.Bandwidth),
// told to p, and returned.
func (ln *Links) ProbeBandwidth(ctx context.Context, p peer.ID) (float64, error) {
	s := ln.h
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
	fail := func(what string, err error) (float64, error) {
		_ = st.Reset()
		return 0, fmt.Errorf("%w: %s %s: %w", ErrProbe, what, p, err)
	}
	hdr := encodeProbeSize(ProbeBytes)
	var ans [8]byte
	t0 := time.Now()
	if _, err := st.Write(hdr); err != nil {
		return fail("send to", err)
	}
	if _, err := io.ReadFull(st, ans[:probeReadyLen]); err != nil {
		return fail("first answer from", err)
	}
	start := time.Now()
	rtt := start.Sub(t0)
	if err := decodeProbeReady(ans[:probeReadyLen]); err != nil {
		return fail("first answer from", err)
	}
	buf := make([]byte, 64<<10)
	for sent := 0; sent < ProbeBytes; sent += len(buf) {
		if _, err := st.Write(buf[:min(len(buf), ProbeBytes-sent)]); err != nil {
			return fail("send to", err)
		}
	}
	if _, err := io.ReadFull(st, ans[:probeCountLen]); err != nil {
		return fail("answer from", err)
	}
	took := time.Since(start)
	n, err := decodeProbeCount(ans[:probeCountLen])
	if err != nil {
		return fail("answer from", err)
	}
	if n != ProbeBytes {
		_ = st.Reset()
		return 0, fmt.Errorf("%w: %s counted %d of %d bytes", ErrProbe, p, n, ProbeBytes)
	}
	// A round trip that queued behind other traffic must not make the
	// figure absurd: the transfer takes at least half the time.
	xfer := max(took-rtt, took/2)
	bw := min(float64(ProbeBytes)/xfer.Seconds(), maxBandwidth)
	if _, err := st.Write(encodeProbeFigure(bw)); err != nil {
		return fail("send the figure to", err)
	}
	if err := st.CloseWrite(); err != nil {
		return fail("close write to", err)
	}
	s.table.observeBandwidth(p, bw, bwAlpha)
	return bw, nil
}

// bwProber probes the relayed peers whose ID is above ours, each at
// most once per probeEvery, one at a time.
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
			// The end with the lower ID probes and tells the other.
			if p.Link == LinkRelayed && p.Liveness != Dead && b.h.ID() < p.ID && now.Sub(b.last[p.ID]) >= probeEvery {
				due = append(due, p.ID)
			}
		}
		slices.Sort(due)
		for _, id := range due {
			b.last[id] = now
		}
		b.mu.Unlock()
		for _, id := range due {
			if bw, err := b.h.links.ProbeBandwidth(ctx, id); err != nil {
				b.h.log.Debug("bandwidth probe", zap.Stringer("peer", id), zap.Error(err))
			} else {
				b.h.log.Debug("bandwidth probe", zap.Stringer("peer", id), zap.Float64("mb_per_s", bw/1e6))
			}
		}
	}
}
