package peerlimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// One peer flooding gets its burst and then its rate, nothing more; a
// second peer is served in full meanwhile.
func TestLimiterPerPeer(t *testing.T) {
	l := New(10, 5, 16)
	flood, calm := peer.ID("flood"), peer.ID("calm")
	allowed := 0
	for i := range 1000 {
		now := t0.Add(time.Duration(i) * time.Millisecond) // 1000 a second for 1 s
		if l.Allow(flood, now) {
			allowed++
		}
		if i%200 == 0 && !l.Allow(calm, now) {
			t.Fatalf("calm peer refused at %d ms", i)
		}
	}
	// Burst 5, then 10 a second over the 0.999 s: at most 5 + 9.99.
	if allowed < 5 || allowed > 14 {
		t.Fatalf("flooding peer allowed %d of 1000", allowed)
	}
	if l.Denied() != uint64(1000-allowed) {
		t.Fatalf("denied %d, want %d", l.Denied(), 1000-allowed)
	}
}

// A flood of identities keeps at most max buckets; idle peers' buckets
// are forgotten and the peers past max share one bucket, which holds the
// crowd together to one peer's rate.
func TestLimiterBoundedMemory(t *testing.T) {
	const maxPeers = 64
	l := New(10, 2, maxPeers)
	now := t0
	crowd := 0
	for i := range 10000 {
		if l.Allow(peer.ID(fmt.Sprintf("sybil-%d", i)), now) && i >= maxPeers {
			crowd++
		}
		if n := l.Len(); n > maxPeers {
			t.Fatalf("%d buckets after %d peers", n, i+1)
		}
	}
	// The 9936 peers past max shared one bucket of burst 2 at one instant.
	if crowd != 2 {
		t.Fatalf("peers past the bound allowed %d times, want 2", crowd)
	}
	// Once the first buckets are full again they are forgotten: a new
	// peer gets a bucket of its own and its whole burst.
	now = now.Add(time.Second)
	fresh := peer.ID("newcomer")
	for i := range 2 {
		if !l.Allow(fresh, now) {
			t.Fatalf("a new peer after the crowd went idle was refused its token %d", i+1)
		}
	}
	if l.Allow(fresh, now) {
		t.Fatal("a new peer got more than its burst")
	}
}

// Reserve paces: a flooding peer's n-th request past its burst waits
// (n − burst)/rate, while another peer waits for nothing.
func TestLimiterReserve(t *testing.T) {
	l := New(10, 2, 16)
	var last time.Duration
	for range 12 {
		last = l.Reserve("flood", t0)
	}
	if want := time.Second; last != want {
		t.Fatalf("12th request at once waits %v, want %v", last, want)
	}
	if d := l.Reserve("calm", t0); d != 0 {
		t.Fatalf("calm peer waits %v", d)
	}
	if l.Denied() != 10 {
		t.Fatalf("denied %d, want 10", l.Denied())
	}
}
