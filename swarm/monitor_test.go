package swarm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func testKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	sk, pk, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return sk, id
}

func sampleSnapshot(t testing.TB, id peer.ID) *Snapshot {
	t.Helper()
	old, hb := sampleHeartbeat(t), sampleHeartbeat(t)
	old.NodeID, hb.NodeID = id, id
	old.Timestamp = hb.Timestamp.Add(-9 * time.Second)
	old.TokensServed, hb.TokensServed = 100, 190
	return &Snapshot{
		Node: id, Nonce: [SnapshotNonceLen]byte{1, 2, 3}, Time: time.Unix(1700000001, 5), Swarm: "lab",
		SnapshotInfo: SnapshotInfo{ModelName: "tiny", Fingerprint: "sha256:abc", Layers: 8, Map: []byte{1, 2, 3}},
		Reachability: "private",
		Heartbeats:   []*Heartbeat{old, hb},
		Peers: []LinkReport{
			{Peer: testPeerID(t), Link: LinkRelayed, Liveness: Alive, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/4001")}},
			{Peer: testPeerID(t), Link: LinkHolePunched, Liveness: Suspect},
		},
	}
}

// A signed snapshot verifies for the node and nonce asked, and a
// flipped byte, another nonce or another signer is refused as such.
func TestSnapshotSignature(t *testing.T) {
	sk, id := testKey(t)
	s := sampleSnapshot(t, id)
	signed, err := SignSnapshot(s, sk)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifySnapshot(signed, id, s.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	if got.Swarm != "lab" || got.ModelName != "tiny" || got.Layers != 8 || !bytes.Equal(got.Map, s.Map) ||
		got.Reachability != "private" || len(got.Heartbeats) != 2 || got.Heartbeats[1].TokensServed != 190 ||
		len(got.Peers) != 2 || got.Peers[0].Link != LinkRelayed || got.Peers[1].Link != LinkHolePunched ||
		len(got.Peers[0].Addrs) != 1 || !got.Time.Equal(s.Time) {
		t.Fatalf("round trip: %+v", got)
	}

	forged := bytes.Clone(signed)
	forged[len(forged)-40] ^= 1 // inside the body, past the signature
	if _, err := VerifySnapshot(forged, id, s.Nonce); !errors.Is(err, ErrSnapshotSignature) && !errors.Is(err, ErrSnapshotSchema) {
		t.Fatalf("tampered snapshot: %v", err)
	}
	if _, err := VerifySnapshot(signed, id, [SnapshotNonceLen]byte{9}); !errors.Is(err, ErrSnapshotSignature) {
		t.Fatalf("replayed nonce: %v", err)
	}
	if _, err := VerifySnapshot(signed, testPeerID(t), s.Nonce); !errors.Is(err, ErrSnapshotSignature) {
		t.Fatalf("another node's answer: %v", err)
	}
	// Signed by another key while naming id: decoded, but refused.
	other, _ := testKey(t)
	bad, err := SignSnapshot(s, other)
	if err != nil {
		t.Fatal(err)
	}
	got, err = VerifySnapshot(bad, id, s.Nonce)
	if !errors.Is(err, ErrSnapshotSignature) || got == nil || got.Node != id {
		t.Fatalf("forged signer: %v, %v", got, err)
	}
}

func TestSnapshotRejects(t *testing.T) {
	_, id := testKey(t)
	for name, mod := range map[string]func(*Snapshot){
		"other's heartbeat": func(s *Snapshot) { s.Heartbeats[0].NodeID = testPeerID(t) },
		"three heartbeats":  func(s *Snapshot) { s.Heartbeats = append(s.Heartbeats, s.Heartbeats[0]) },
		"big map":           func(s *Snapshot) { s.Map = make([]byte, MaxSnapshotMap+1) },
		"reachability":      func(s *Snapshot) { s.Reachability = "maybe" },
		"link":              func(s *Snapshot) { s.Peers[0].Link = "psychic" },
		"addresses":         func(s *Snapshot) { s.Peers[0].Addrs = make([]ma.Multiaddr, MaxSnapshotAddrs+1) },
		"label":             func(s *Snapshot) { s.ModelName = string(make([]byte, MaxSnapshotLabel+1)) },
	} {
		s := sampleSnapshot(t, id)
		mod(s)
		if _, err := s.MarshalBinary(); !errors.Is(err, ErrSnapshotSchema) && !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
	good, err := sampleSnapshot(t, id).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"empty":    nil,
		"version":  append([]byte{2}, good[1:]...),
		"trailing": append(bytes.Clone(good), 0),
		"short":    good[:len(good)-1],
	} {
		if _, err := DecodeSnapshot(b); !errors.Is(err, ErrSnapshotSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func FuzzSnapshotDecoder(f *testing.F) {
	_, id := testKey(f)
	s := sampleSnapshot(f, id)
	good, err := s.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	s.Heartbeats, s.Peers, s.Map = nil, nil, nil
	bare, _ := s.MarshalBinary()
	f.Add(bare)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := DecodeSnapshot(in)
		if err != nil {
			if !errors.Is(err, ErrSnapshotSchema) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		out, err := s.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded snapshot does not re-encode: %v", err)
		}
		again, err := DecodeSnapshot(out)
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if out2, _ := again.MarshalBinary(); !bytes.Equal(out, out2) {
			t.Fatalf("encoding not stable:\n%x\n%x", out, out2)
		}
	})
}

// TestMonitorProtocol: an observer that is no member (a bare libp2p host,
// no heartbeats, no swarm) gets a member's signed snapshot, and that of a
// member reachable only through a relay by asking the relay, which
// forwards the request over its own connection; both verify, and the
// relayed member's heartbeats say it is reachable only by relay.
func TestMonitorProtocol(t *testing.T) {
	fast := WithHeartbeatInterval(100 * time.Millisecond)
	relay := newTestHost(t, fast, WithDiscovery(false), WithModel("fp"))
	c := newTestHost(t, fast, WithNoListen(), WithDiscovery(false), bootstrapOf(relay))
	relay.beat.SetSnapshotSource(func() SnapshotInfo {
		return SnapshotInfo{ModelName: "tiny", Fingerprint: "sha256:fp", Layers: 8, Map: []byte("map")}
	})
	waitFor(t, 15*time.Second, "relayed host alive at the relay", func() bool {
		p, ok := relay.Peers().Get(c.ID())
		return ok && p.Liveness == Alive && p.Relayed
	})
	waitFor(t, 15*time.Second, "relay reservation", func() bool {
		for _, ad := range c.Addrs() {
			if IsRelayAddr(ad) {
				return true
			}
		}
		return false
	})

	obs, err := libp2p.New(libp2p.NoListenAddrs)
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := obs.Connect(ctx, relay.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "two heartbeats kept", func() bool {
		relay.beat.beatsMu.Lock()
		defer relay.beat.beatsMu.Unlock()
		return len(relay.beat.beats) >= 2
	})
	var nonce [SnapshotNonceLen]byte
	rand.Read(nonce[:])
	rs, err := FetchSnapshot(ctx, obs, relay.ID(), "", nonce)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Node != relay.ID() || rs.ModelName != "tiny" || string(rs.Map) != "map" || rs.Swarm != DefaultSwarmName ||
		rs.Reachability != "public" || len(rs.Heartbeats) != 2 || !rs.Heartbeats[0].Timestamp.Before(rs.Heartbeats[1].Timestamp) {
		t.Fatalf("relay's snapshot: %+v", rs)
	}
	var seen bool
	for _, p := range rs.Peers {
		if p.Peer == c.ID() {
			// c dialled the relay out, so the link itself is direct;
			// c's own heartbeats say it is reachable only by relay.
			seen = p.Link == LinkDirect && p.Liveness == Alive
		}
	}
	if !seen {
		t.Fatalf("relay's links do not show c: %+v", rs.Peers)
	}

	rand.Read(nonce[:])
	cs, err := FetchSnapshot(ctx, obs, relay.ID(), c.ID(), nonce)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Node != c.ID() || len(cs.Heartbeats) == 0 || !cs.Heartbeats[len(cs.Heartbeats)-1].Relayed() {
		t.Fatalf("relayed host's snapshot: %+v", cs)
	}
	// A member whose only link to c runs through the relay forwards over
	// that circuit (a limited connection; DCUtR may have made it direct by
	// the time the request goes: either way the forward must work).
	a := newTestHost(t, fast, WithDiscovery(false), bootstrapOf(relay))
	waitMemberAt(t, relay, a)
	if err := a.Connect(ctx, c.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a's link to c relayed", func() bool {
		p, ok := a.Peers().Get(c.ID())
		return ok && p.Link == LinkRelayed
	})
	if err := obs.Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	rand.Read(nonce[:])
	if cs, err := FetchSnapshot(ctx, obs, a.ID(), c.ID(), nonce); err != nil || cs.Node != c.ID() {
		t.Fatalf("forward over a relayed link: %v", err)
	}

	// A peer the relay is not connected to is refused, not dialled.
	if _, err := FetchSnapshot(ctx, obs, relay.ID(), testPeerID(t), nonce); !errors.Is(err, ErrRemote) {
		t.Fatalf("forward to a stranger: %v", err)
	}
}

func FuzzMonitorRequest(f *testing.F) {
	f.Add(encodeMonitorRequest([SnapshotNonceLen]byte{1}, ""))
	f.Add(encodeMonitorRequest([SnapshotNonceLen]byte{2}, testPeerID(f)))
	f.Add([]byte{1})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		nonce, target, err := decodeMonitorRequest(in)
		if err != nil {
			if !errors.Is(err, ErrSnapshotSchema) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if out := encodeMonitorRequest(nonce, target); !bytes.Equal(out, in) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
		}
	})
}
