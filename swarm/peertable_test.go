package swarm

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time             { return c.t }
func (c *fakeClock) advance(d time.Duration)    { c.t = c.t.Add(d) }
func (c *fakeClock) beat(id peer.ID) *Heartbeat { return &Heartbeat{NodeID: id, Timestamp: c.t} }

func newTestTable(t *testing.T) (*PeerTable, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1700000000, 0)}
	tab := newPeerTable(testPeerID(t), tableConfig{
		suspectAfter: 1500 * time.Millisecond, deadAfter: 2 * time.Second, connGrace: time.Second,
		forgetAfter: 10 * time.Second, hintTTL: 20 * time.Second,
	}, clk.now)
	return tab, clk
}

func liveness(t *testing.T, tab *PeerTable, id peer.ID) Liveness {
	t.Helper()
	p, ok := tab.Get(id)
	if !ok {
		t.Fatalf("%s not in table", id)
	}
	return p.Liveness
}

func TestPeerTableSilence(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	tab.hint(peer.AddrInfo{ID: id})
	if got := liveness(t, tab, id); got != Hint {
		t.Fatalf("hinted peer is %v", got)
	}
	tab.heard(clk.beat(id))
	if got := liveness(t, tab, id); got != Alive {
		t.Fatalf("heard peer is %v", got)
	}
	clk.advance(1600 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Suspect {
		t.Fatalf("after 1.6 s of silence: %v", got)
	}
	clk.advance(500 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("after 2.1 s of silence: %v", got)
	}
	clk.advance(10 * time.Second)
	tab.sweep()
	if _, ok := tab.Get(id); ok || tab.Len() != 0 {
		t.Fatalf("dead peer not forgotten after expiry (len %d)", tab.Len())
	}
}

// TestPeerTableStalled: time this process spent stalled does not count as
// a peer's silence; silence after the stall still does.
func TestPeerTableStalled(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	tab.heard(clk.beat(id))
	clk.advance(2100 * time.Millisecond)
	tab.stalled(1900 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Alive {
		t.Fatalf("2.1 s after its heartbeat, 1.9 s of it stalled: %v", got)
	}
	clk.advance(1600 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Suspect {
		t.Fatalf("1.8 s of silence out of a stall: %v", got)
	}
	clk.advance(500 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("2.3 s of silence out of a stall: %v", got)
	}
	// A heartbeat clears the credit: the next silence counts in full.
	tab.heard(clk.beat(id))
	clk.advance(2100 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("2.1 s of silence after a fresh heartbeat: %v", got)
	}
}

// TestPeerTableStaleHints: discovery that keeps naming a dead peer (its
// DHT records outlive it) neither keeps its hint alive nor brings it back
// right after it was forgotten; a heartbeat does.
func TestPeerTableStaleHints(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	tab.heard(clk.beat(id))
	clk.advance(3 * time.Second)
	tab.sweep() // dead
	for range 10 {
		clk.advance(time.Second)
		tab.hint(peer.AddrInfo{ID: id})
		tab.sweep()
	}
	if _, ok := tab.Get(id); ok {
		t.Fatal("a dead peer named by discovery is not forgotten")
	}
	clk.advance(5 * time.Second)
	tab.hint(peer.AddrInfo{ID: id})
	if _, ok := tab.Get(id); ok {
		t.Fatal("a hint brought back a peer forgotten 5 s ago")
	}

	// After a hint's lifetime a hint is taken again, and expires even
	// while discovery keeps naming the peer.
	clk.advance(20 * time.Second)
	tab.hint(peer.AddrInfo{ID: id})
	if got := liveness(t, tab, id); got != Hint {
		t.Fatalf("hint after burial: %v", got)
	}
	for range 20 {
		clk.advance(time.Second)
		tab.hint(peer.AddrInfo{ID: id})
		tab.sweep()
	}
	if _, ok := tab.Get(id); ok {
		t.Fatal("a hint refreshed by discovery alone never expires")
	}

	// A heartbeat brings it back at once.
	tab.heard(clk.beat(id))
	if got := liveness(t, tab, id); got != Alive {
		t.Fatalf("heard after burial: %v", got)
	}
}

func TestPeerTableConnectionLoss(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	tab.setConn(id, true, false)
	tab.heard(clk.beat(id))
	clk.advance(100 * time.Millisecond)
	tab.setConn(id, false, false)
	if got := liveness(t, tab, id); got != Suspect {
		t.Fatalf("after its connection closed: %v", got)
	}
	clk.advance(time.Second)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("connection grace over: %v", got)
	}

	// A peer whose connection drops but who is still heard (through the
	// gossip mesh) is alive again and not killed by the grace.
	other := testPeerID(t)
	tab.setConn(other, true, false)
	tab.heard(clk.beat(other))
	tab.setConn(other, false, false)
	clk.advance(500 * time.Millisecond)
	tab.heard(clk.beat(other))
	clk.advance(700 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, other); got != Alive {
		t.Fatalf("peer heard after its connection closed: %v", got)
	}
}

// TestPeerTableLateRelayedHeartbeat: a heartbeat sent before a peer's
// connection closed but heard after, relayed late by the mesh, does not
// hold off the connection-loss verdict; one sent after the close does.
func TestPeerTableLateRelayedHeartbeat(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	tab.setConn(id, true, false)
	tab.heard(clk.beat(id))
	clk.advance(100 * time.Millisecond)
	late := clk.beat(id) // its direct copy is cut off with the connection
	clk.advance(50 * time.Millisecond)
	tab.setConn(id, false, false)
	clk.advance(100 * time.Millisecond)
	if tab.heard(late) {
		t.Fatal("a heartbeat sent before the connection closed was taken as a sign of life")
	}
	if got := liveness(t, tab, id); got != Suspect {
		t.Fatalf("after the late copy: %v", got)
	}
	clk.advance(900 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("connection grace over, only a late copy heard: %v", got)
	}

	// The same timing, but the copy was sent 50 ms after the close, by
	// the peer's clock: the peer outlived its connection.
	other := testPeerID(t)
	tab.setConn(other, true, false)
	tab.heard(clk.beat(other))
	clk.advance(150 * time.Millisecond)
	tab.setConn(other, false, false)
	clk.advance(50 * time.Millisecond)
	after := clk.beat(other)
	clk.advance(50 * time.Millisecond)
	if !tab.heard(after) {
		t.Fatal("a heartbeat sent after the connection closed was refused")
	}
	clk.advance(900 * time.Millisecond)
	tab.sweep()
	if got := liveness(t, tab, other); got != Alive {
		t.Fatalf("peer heard after its connection closed: %v", got)
	}
}

func TestPeerTableComesBack(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	events, stop := tab.Watch(16)
	defer stop()
	tab.heard(clk.beat(id))
	clk.advance(3 * time.Second)
	tab.sweep()
	if got := liveness(t, tab, id); got != Dead {
		t.Fatalf("silent peer: %v", got)
	}
	clk.advance(time.Second)
	tab.heard(clk.beat(id))
	if got := liveness(t, tab, id); got != Alive || tab.Len() != 1 {
		t.Fatalf("peer back: %v, %d rows", got, tab.Len())
	}
	// A replayed old heartbeat changes nothing.
	old := &Heartbeat{NodeID: id, Timestamp: clk.t.Add(-time.Hour)}
	if tab.heard(old) {
		t.Fatal("stale heartbeat accepted")
	}
	var seen []Liveness
	for len(events) > 0 {
		seen = append(seen, (<-events).To)
	}
	want := []Liveness{Alive, Dead, Alive} // 3 s of silence at one sweep: straight to dead
	if len(seen) != len(want) {
		t.Fatalf("events %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("events %v, want %v", seen, want)
		}
	}
}

func TestPeerTableRelayedAndRejects(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	hb := clk.beat(id)
	hb.Flags = FlagRelayed
	tab.heard(hb)
	if p, _ := tab.Get(id); !p.Relayed {
		t.Fatal("relayed-only peer not marked relayed")
	}
	tab.setConn(id, true, false)
	if p, _ := tab.Get(id); !p.Relayed || !p.Direct {
		t.Fatalf("relayed-only peer that dialled us directly: relayed %v direct %v", p.Relayed, p.Direct)
	}
	other := testPeerID(t)
	tab.setConn(other, true, true)
	if p, _ := tab.Get(other); !p.Relayed || p.Direct {
		t.Fatalf("peer reached only through a relay: relayed %v direct %v", p.Relayed, p.Direct)
	}
	tab.setConn(other, true, false)
	if p, _ := tab.Get(other); p.Relayed || !p.Direct {
		t.Fatalf("peer with a direct connection: relayed %v direct %v", p.Relayed, p.Direct)
	}
	tab.reject(id, rejectSender)
	tab.reject(id, rejectSender)
	tab.reject(id, rejectFrame)
	if r := tab.Rejections(id); r.Sender != 2 || r.Frame != 1 || r.Total() != 3 {
		t.Fatalf("rejections %+v", r)
	}
	if p, _ := tab.Get(id); p.Rejected.Total() != 3 {
		t.Fatalf("row rejections %+v", p.Rejected)
	}
}

func TestRTTMatrix(t *testing.T) {
	self, a, b, dead := testPeerID(t), testPeerID(t), testPeerID(t), testPeerID(t)
	peers := []Peer{
		{ID: a, Liveness: Alive, RTT: 2 * time.Millisecond, Heartbeat: &Heartbeat{NodeID: a, RTTs: []RTTSample{
			{Peer: self, RTT: 4 * time.Millisecond}, {Peer: b, RTT: 10 * time.Millisecond}, {Peer: dead, RTT: time.Millisecond},
		}}},
		{ID: b, Liveness: Suspect},
		{ID: dead, Liveness: Dead, RTT: time.Millisecond},
	}
	m := rttMatrix(self, peers)
	if d, ok := m.Lookup(a, self); !ok || d != 3*time.Millisecond {
		t.Fatalf("self-a: %v %v (want the mean of both ends, 3ms)", d, ok)
	}
	if d, ok := m.Lookup(b, a); !ok || d != 10*time.Millisecond {
		t.Fatalf("a-b: %v %v", d, ok)
	}
	if _, ok := m.Lookup(a, dead); ok {
		t.Fatal("link to a dead peer kept")
	}
	if len(m.Pairs) != 2 {
		t.Fatalf("pairs %v", m.Pairs)
	}
}

// TestPeerTableChanged: Changed's channel closes on an accepted heartbeat,
// a liveness verdict and a connection change, and not on a replayed
// heartbeat.
func TestPeerTableChanged(t *testing.T) {
	tab, clk := newTestTable(t)
	id := testPeerID(t)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := tab.Changed()
	if closed(ch) {
		t.Fatal("closed before any change")
	}
	hb := clk.beat(id)
	tab.heard(hb)
	if !closed(ch) {
		t.Fatal("a heartbeat did not close it")
	}
	ch = tab.Changed()
	tab.heard(hb) // a replay: rejected, no change
	if closed(ch) {
		t.Fatal("a replayed heartbeat closed it")
	}
	tab.setConn(id, true, false)
	if !closed(ch) {
		t.Fatal("a connection did not close it")
	}
	ch = tab.Changed()
	clk.advance(1600 * time.Millisecond)
	tab.sweep()
	if !closed(ch) || liveness(t, tab, id) == Alive {
		t.Fatal("a liveness verdict did not close it")
	}
}
