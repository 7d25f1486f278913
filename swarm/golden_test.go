package swarm

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/stratanet/strata/internal/goldentest"
)

// goldenKey is a fixed Ed25519 key: Ed25519 signs deterministically, so
// signed messages have fixed bytes too.
func goldenKey(t *testing.T, seed byte) (crypto.PrivKey, peer.ID) {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{seed}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return sk, id
}

// goldenHeartbeat fills every field and every section of a heartbeat.
func goldenHeartbeat(t *testing.T) *Heartbeat {
	_, a := goldenKey(t, 1)
	_, b := goldenKey(t, 2)
	_, c := goldenKey(t, 3)
	return &Heartbeat{
		NodeID: a,
		Status: Status{
			RangeStart: 4, RangeEnd: 20, Epoch: 7, State: StateServing,
			QueueDepth: 3, ActiveSessions: 12, FreeKV: 40960,
			LayerLatency: 1500 * time.Microsecond, Region: "eu-west",
			Prefixes:   "\x01\xaa\x00\x00\x00\x00\x00\x00\x80",
			EntryQueue: 5, EntryWait: 1500 * time.Millisecond,
			FetchDone: 1 << 20, FetchTotal: 3 << 20,
			Engine:       "ggml-CUDA0",
			TokensServed: 1234, StepsRun: 98765,
		},
		Flags:     FlagRelayed,
		RTTs:      []RTTSample{{Peer: b, RTT: 2 * time.Millisecond}, {Peer: c, RTT: 35 * time.Millisecond}},
		Timestamp: time.Unix(1700000000, 123456789),
		Vouches:   []Vouch{{Peer: b, Checks: 9}, {Peer: c, Checks: 1}},
	}
}

// goldenLine is one message's name and bytes, a line of the file.
type goldenLine = goldentest.Line

// checkGoldenLines is goldentest.Lines, the file's bytes by name.
func checkGoldenLines(t *testing.T, name string, lines []goldenLine) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	for _, l := range goldentest.Lines(t, name, lines) {
		got[l.Name] = l.Bytes
	}
	return got
}

// The heartbeat, the monitor's snapshot (plain and signed) and request,
// the charter and the swarm key file, each fully populated; decoding the
// golden bytes gives each value back.
func TestGoldenSwarmMessages(t *testing.T) {
	hb := goldenHeartbeat(t)
	hbBytes, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}

	founderKey, founder := goldenKey(t, 4)
	ch, err := NewCharter("lab", "sha256:abc", founderKey)
	if err != nil {
		t.Fatal(err)
	}
	chBytes, err := ch.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Founder != founder {
		t.Fatalf("charter founder %s, want %s", ch.Founder, founder)
	}

	nodeKey, node := goldenKey(t, 1)
	_, p5 := goldenKey(t, 5)
	_, p6 := goldenKey(t, 6)
	old := goldenHeartbeat(t)
	old.Timestamp = hb.Timestamp.Add(-9 * time.Second)
	old.TokensServed = 100
	snap := &Snapshot{
		Node: node, Nonce: [SnapshotNonceLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		Time: time.Unix(1700000001, 5), Swarm: "lab",
		SnapshotInfo: SnapshotInfo{ModelName: "tiny", Fingerprint: "sha256:abc", Layers: 8, Map: []byte{1, 2, 3}},
		Reachability: "private",
		Heartbeats:   []*Heartbeat{old, hb},
		Peers: []LinkReport{
			{Peer: p5, Link: LinkRelayed, Liveness: Alive, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/4001"), ma.StringCast("/ip6/::1/udp/4001/quic-v1")}},
			{Peer: p6, Link: LinkHolePunched, Liveness: Suspect},
		},
		Charter: chBytes,
	}
	snapBytes, err := snap.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	signed, err := SignSnapshot(snap, nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	// The fixed part alone, as heartbeats before sections were sent.
	plain := &Heartbeat{NodeID: hb.NodeID, Status: Status{RangeStart: 0, RangeEnd: 8, Epoch: 1, State: StateWarming, FreeKV: -1},
		Timestamp: hb.Timestamp}
	plainBytes, err := plain.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	psk := bytes.Repeat([]byte{0xa5, 0x3c}, 16)

	g := checkGoldenLines(t, "messages.txt", []goldenLine{
		{Name: "heartbeat", Bytes: hbBytes},
		{Name: "heartbeat-plain", Bytes: plainBytes},
		{Name: "charter", Bytes: chBytes},
		{Name: "snapshot", Bytes: snapBytes},
		{Name: "snapshot-signed", Bytes: signed},
		{Name: "monitor-request", Bytes: encodeMonitorRequest(snap.Nonce, "")},
		{Name: "monitor-request-target", Bytes: encodeMonitorRequest(snap.Nonce, p5)},
		{Name: "swarm-key", Bytes: EncodeSwarmKey(psk)},
	})

	gotHB, err := DecodeHeartbeat(g["heartbeat"])
	if err != nil {
		t.Fatal(err)
	}
	gotHB.Timestamp = gotHB.Timestamp.In(hb.Timestamp.Location())
	if !reflect.DeepEqual(gotHB, hb) {
		t.Fatalf("heartbeat:\n got %+v\nwant %+v", gotHB, hb)
	}

	gotPlain, err := DecodeHeartbeat(g["heartbeat-plain"])
	if err != nil {
		t.Fatal(err)
	}
	gotPlain.Timestamp = gotPlain.Timestamp.In(plain.Timestamp.Location())
	if !reflect.DeepEqual(gotPlain, plain) {
		t.Fatalf("plain heartbeat:\n got %+v\nwant %+v", gotPlain, plain)
	}

	gotCh, err := DecodeCharter(g["charter"])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotCh, ch) {
		t.Fatalf("charter:\n got %+v\nwant %+v", gotCh, ch)
	}
	if err := gotCh.Verify("lab", "sha256:abc"); err != nil {
		t.Fatalf("golden charter does not verify: %v", err)
	}

	gotSnap, err := DecodeSnapshot(g["snapshot"])
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, "snapshot", gotSnap, snap)
	verified, err := VerifySnapshot(g["snapshot-signed"], node, snap.Nonce)
	if err != nil {
		t.Fatalf("golden signed snapshot: %v", err)
	}
	checkSnapshot(t, "signed snapshot", verified, snap)

	for name, target := range map[string]peer.ID{"monitor-request": "", "monitor-request-target": p5} {
		nonce, gotTarget, err := decodeMonitorRequest(g[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if nonce != snap.Nonce || gotTarget != target {
			t.Fatalf("%s: decoded %x %s, want %x %s", name, nonce, gotTarget, snap.Nonce, target)
		}
	}

	gotPSK, err := DecodeSwarmKey(bytes.NewReader(g["swarm-key"]))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotPSK, psk) {
		t.Fatalf("swarm key %x, want %x", []byte(gotPSK), psk)
	}
}

// checkSnapshot compares snapshots with their times in one location
// (decoding gives local time) and multiaddrs by their bytes.
func checkSnapshot(t *testing.T, what string, got, want *Snapshot) {
	t.Helper()
	g, w := *got, *want
	g.Time = g.Time.In(w.Time.Location())
	hbs := make([]*Heartbeat, len(g.Heartbeats))
	for i, hb := range g.Heartbeats {
		c := *hb
		c.Timestamp = c.Timestamp.In(time.Local)
		hbs[i] = &c
	}
	g.Heartbeats = hbs
	whbs := make([]*Heartbeat, len(w.Heartbeats))
	for i, hb := range w.Heartbeats {
		c := *hb
		c.Timestamp = c.Timestamp.In(time.Local)
		whbs[i] = &c
	}
	w.Heartbeats = whbs
	if fmt.Sprintf("%+v", g.Peers) != fmt.Sprintf("%+v", w.Peers) {
		t.Fatalf("%s peers:\n got %+v\nwant %+v", what, g.Peers, w.Peers)
	}
	g.Peers, w.Peers = nil, nil
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}
