package swarm

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// relayedPair starts a relay with opts, a public host a and a host c that
// listens nowhere and so is reached only through the relay, and connects a
// to c through it.
func relayedPair(t testing.TB, relayOpts ...Option) (relay, a, c *Host) {
	fast := WithHeartbeatInterval(100 * time.Millisecond)
	relay = newTestHost(t, append([]Option{fast, WithDiscovery(false)}, relayOpts...)...)
	a = newTestHost(t, fast, WithDiscovery(false), WithRelayService(false), bootstrapOf(relay))
	c = newTestHost(t, fast, WithNoListen(), WithDiscovery(false), WithRelayService(false), bootstrapOf(relay))
	waitFor(t, 15*time.Second, "relay reservation", func() bool {
		for _, ad := range c.Addrs() {
			if IsRelayAddr(ad) {
				return true
			}
		}
		return false
	})
	waitMemberAt(t, relay, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, c.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	return relay, a, c
}

// TestRelayRateCap: activations through a relay capped at 1 MiB/s take at
// least the time the cap allows for their bytes (less one burst), and the
// relay counts them as relayed.
func TestRelayRateCap(t *testing.T) {
	const capBps = 1 << 20
	const frame, frames = 512 << 10, 6
	relay, a, c := relayedPair(t, WithRelayRate(capBps))
	if st := relay.links.RelayStats(); st.Rate != capBps {
		t.Fatalf("relay stats %+v, want rate %d", st, capBps)
	}
	got := make(chan int, frames)
	c.streams.HandleActivations(func(_ peer.ID, f []byte) error {
		got <- len(f)
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// One small frame first opens the stream through the relay, so that
	// the timed part is the payload alone.
	if err := a.streams.SendActivation(ctx, c.ID(), []byte("open")); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 4 {
		t.Fatalf("first frame of %d bytes", n)
	}
	before := relay.links.RelayStats().Bytes
	payload := make([]byte, frame)
	start := time.Now()
	go func() {
		for range frames {
			if err := a.streams.SendActivation(ctx, c.ID(), payload); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range frames {
		select {
		case n := <-got:
			if n != frame {
				t.Fatalf("frame of %d bytes, want %d", n, frame)
			}
		case <-ctx.Done():
			t.Fatal("frames not delivered through the relay")
		}
	}
	took := time.Since(start)
	total := frame * frames
	relayed := relay.links.RelayStats().Bytes - before
	if relayed < int64(total) {
		t.Fatalf("relay carried %d bytes of the %d sent: the frames did not go through it", relayed, total)
	}
	// The limiter lets one burst through at once; the rest waits for
	// tokens. 5% margin for the limiter's clock granularity.
	floor := time.Duration(0.95 * float64(total-relayRateBurst) / capBps * float64(time.Second))
	t.Logf("%d bytes through a relay capped at %d B/s in %v (floor %v), %.2f MiB/s", total, capBps, took, floor,
		float64(total)/took.Seconds()/(1<<20))
	if took < floor {
		t.Fatalf("%d bytes through a %d B/s relay in %v, below the cap's floor %v", total, capBps, took, floor)
	}
	if p, ok := a.Peers().Get(c.ID()); !ok || p.Link != LinkRelayed {
		t.Fatalf("link to the relayed host: %+v", p)
	}
}

func TestRelayRateOption(t *testing.T) {
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := New(context.Background(), WithRelayRate(bad)); !errors.Is(err, ErrConfig) {
			t.Errorf("relay rate %v: %v", bad, err)
		}
	}
	h := newTestHost(t, WithDiscovery(false), WithRelayRate(0))
	if st := h.links.RelayStats(); st.Rate != 0 {
		t.Errorf("uncapped relay reports rate %v", st.Rate)
	}
	d := newTestHost(t, WithDiscovery(false))
	if st := d.links.RelayStats(); st.Rate != DefaultRelayRate {
		t.Errorf("default relay rate %v, want %d", st.Rate, DefaultRelayRate)
	}
	off := newTestHost(t, WithDiscovery(false), WithRelayService(false))
	if st := off.links.RelayStats(); st != (RelayStats{}) {
		t.Errorf("a host that does not relay reports %+v", st)
	}
}

// BenchmarkRelayOwnServing measures a relay's own activation throughput
// to a direct peer (4 MB frames) while it relays a stream of 1 MiB frames
// between two other members, with the relay rate capped at the default
// 25 MiB/s, at 4 MiB/s and uncapped. Rounds of frames alternate, on the same hosts,
// between the relayed load paused and running, so that a shared machine's
// drift hits both alike; x-alone is the loaded throughput as a fraction of
// the paused one:
//
//	go test -run '^$' -bench RelayOwnServing -benchtime 40x ./swarm/
func BenchmarkRelayOwnServing(b *testing.B) {
	for _, v := range []struct {
		name string
		rate float64
	}{
		{"capped-25MiB", DefaultRelayRate},
		{"capped-4MiB", 4 << 20},
		{"uncapped", 0},
	} {
		b.Run(v.name, func(b *testing.B) { benchOwnServing(b, v.rate) })
	}
}

// loadGate pauses a load loop between its sends.
type loadGate struct {
	mu         sync.Mutex
	cond       *sync.Cond
	open, busy bool
}

// enter waits until the gate is open and marks a send under way; it
// reports false once ctx is done.
func (g *loadGate) enter(ctx context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for !g.open && ctx.Err() == nil {
		g.cond.Wait()
	}
	g.busy = ctx.Err() == nil
	return g.busy
}

func (g *loadGate) leave() {
	g.mu.Lock()
	g.busy = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// set opens or closes the gate; closing waits for the send under way.
func (g *loadGate) set(open bool) {
	g.mu.Lock()
	g.open = open
	g.cond.Broadcast()
	for !open && g.busy {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

func benchOwnServing(b *testing.B, relayRate float64) {
	relay, a, c := relayedPair(b, WithRelayRate(relayRate))
	x := newTestHost(b, WithDiscovery(false), WithRelayService(false))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := relay.Connect(ctx, x.AddrInfo()); err != nil {
		b.Fatal(err)
	}
	c.streams.HandleActivations(func(peer.ID, []byte) error { return nil })
	g := &loadGate{}
	g.cond = sync.NewCond(&g.mu)
	done := make(chan struct{})
	defer func() {
		cancel()
		g.mu.Lock()
		g.cond.Broadcast() // wake a waiting enter to see ctx done
		g.mu.Unlock()
		<-done
	}()
	go func() {
		defer close(done)
		frame := make([]byte, 1<<20)
		for g.enter(ctx) {
			err := a.streams.SendActivation(ctx, c.ID(), frame)
			g.leave()
			if err != nil && ctx.Err() == nil {
				b.Error(err)
				return
			}
		}
	}()

	got := make(chan struct{}, 64)
	x.streams.HandleActivations(func(peer.ID, []byte) error { got <- struct{}{}; return nil })
	payload := make([]byte, frame4MB)
	send := func(n int) time.Duration {
		start := time.Now()
		recv := make(chan struct{})
		go func() {
			for range n {
				<-got
			}
			close(recv)
		}()
		for range n {
			if err := relay.streams.SendActivation(ctx, x.ID(), payload); err != nil {
				b.Fatal(err)
			}
		}
		<-recv
		return time.Since(start)
	}
	send(4) // open the stream and grow the windows
	g.set(true)
	waitFor(b, 30*time.Second, "relayed load flowing", func() bool { return relay.links.RelayStats().Bytes > 4<<20 })

	const round = 5
	var alone, loaded time.Duration
	var relayed int64
	b.SetBytes(frame4MB)
	b.ResetTimer()
	for left := b.N; left > 0; left -= round {
		n := min(round, left)
		b.StopTimer()
		g.set(false)
		alone += send(n)
		g.set(true)
		from := relay.links.RelayStats().Bytes
		waitFor(b, 30*time.Second, "relayed load flowing", func() bool { return relay.links.RelayStats().Bytes > from+1<<20 })
		from = relay.links.RelayStats().Bytes
		b.StartTimer()
		loaded += send(n)
		relayed += relay.links.RelayStats().Bytes - from
	}
	b.StopTimer()
	b.ReportMetric(alone.Seconds()/loaded.Seconds(), "x-alone")
	b.ReportMetric(float64(frame4MB)*float64(b.N)/alone.Seconds()/1e9, "alone-GB/s")
	b.ReportMetric(float64(relayed)/loaded.Seconds()/1e6, "relayed-MB/s")
}

// TestRelayedLinkMeasured: a host measures its relayed link on its own:
// pings through the relay give the pair's round trip in the RTT matrix,
// and bandwidth probes give the link's rate, which a relay capped at
// 2 MiB/s keeps below what the cap allows (the probe less one burst at
// the cap's pace). A probe of a direct link is not held to it.
func TestRelayedLinkMeasured(t *testing.T) {
	const capBps = 2 << 20
	relay, a, c := relayedPair(t, WithRelayRate(capBps))
	waitFor(t, 20*time.Second, "relayed link's bandwidth probed and round trip measured", func() bool {
		p, ok := a.Peers().Get(c.ID())
		_, inMatrix := a.links.RTTMatrix().Lookup(a.ID(), c.ID())
		return ok && p.Bandwidth > 0 && p.Link == LinkRelayed && inMatrix
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bw, err := a.links.ProbeBandwidth(ctx, c.ID())
	if err != nil {
		t.Fatal(err)
	}
	// The relay paces each chunk after writing it, so the first and the
	// last chunk (a burst each at most) pass unpaced.
	ceiling := capBps * float64(ProbeBytes) / float64(ProbeBytes-2*relayRateBurst)
	p, _ := a.Peers().Get(c.ID())
	t.Logf("relayed link: probe %.2f MiB/s, smoothed %.2f MiB/s (cap %.0f MiB/s, ceiling %.2f), rtt %v",
		bw/(1<<20), p.Bandwidth/(1<<20), float64(capBps)/(1<<20), ceiling/(1<<20), p.RTT)
	// The probe's time is at least (bytes − 2 bursts)/cap; the round
	// trip it subtracts was measured on an idle stream: 10% margin.
	if bw > 1.1*ceiling || p.Bandwidth > 1.1*ceiling {
		t.Fatalf("relayed link measured at %.0f B/s (smoothed %.0f), above the relay's cap allows (%.0f)", bw, p.Bandwidth, ceiling)
	}
	direct, err := a.links.ProbeBandwidth(ctx, relay.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("direct link to the relay: %.2f MiB/s", direct/(1<<20))
}

// TestProbeRefusesOverlong: the probe's answerer reads no more than it
// allows and was told.
func TestProbeRefusesOverlong(t *testing.T) {
	a, b := connectPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.h.NewStream(ctx, b.ID(), ProtocolBW)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	// A probe that announces more than ProbeBytes gets no answer.
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], ProbeBytes+1)
	_, _ = st.Write(hdr[:])
	var ready [1]byte
	if _, err := io.ReadFull(st, ready[:]); err == nil {
		t.Fatal("a probe announcing more than ProbeBytes was accepted")
	}
	// One that sends more than it announced is not believed.
	st, err = a.h.NewStream(ctx, b.ID(), ProtocolBW)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.SetDeadline(time.Now().Add(10 * time.Second))
	binary.BigEndian.PutUint32(hdr[:], 1000)
	if _, err := st.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(st, ready[:]); err != nil {
		t.Fatalf("a well-formed probe header was refused: %v", err)
	}
	var fig [8]byte
	binary.BigEndian.PutUint64(fig[:], math.Float64bits(1e9))
	if _, err := st.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	var ans [8]byte
	if _, err := io.ReadFull(st, ans[:]); err != nil || binary.BigEndian.Uint64(ans[:]) != 1000 {
		t.Fatalf("count of a 1000-byte probe: %x, %v", ans, err)
	}
	_, _ = st.Write(append(fig[:], "junk"...))
	_ = st.CloseWrite()
	if _, err := st.Read(ans[:]); err == nil {
		t.Fatal("the stream went on after the answer")
	}
	if p, _ := b.Peers().Get(a.ID()); p.Bandwidth != 0 {
		t.Fatalf("a figure followed by junk was believed: %v", p.Bandwidth)
	}
	// A good one is measured on both ends.
	bw, err := a.links.ProbeBandwidth(ctx, b.ID())
	if err != nil || !(bw > 0) {
		t.Fatalf("probe of a direct link: %v, %v", bw, err)
	}
	waitFor(t, 10*time.Second, "the probed end learns the figure", func() bool {
		p, _ := b.Peers().Get(a.ID())
		return p.Bandwidth == bw
	})
}
