package swarm

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

func testPeerID(t testing.TB) peer.ID {
	t.Helper()
	_, pk, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func sampleHeartbeat(t testing.TB) *Heartbeat {
	a, b := testPeerID(t), testPeerID(t)
	return &Heartbeat{
		NodeID: a,
		Status: Status{
			RangeStart: 4, RangeEnd: 20, Epoch: 7, State: StateServing,
			QueueDepth: 3, ActiveSessions: 12, FreeKV: 40960,
			LayerLatency: 1500 * time.Microsecond, Region: "eu-west",
			Prefixes: "\x01\xaa\x00\x00\x00\x00\x00\x00\x80",
		},
		Flags:     FlagRelayed,
		RTTs:      []RTTSample{{Peer: b, RTT: 2 * time.Millisecond}},
		Timestamp: time.Unix(1700000000, 123456789),
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	hb := sampleHeartbeat(t)
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHeartbeat(data)
	if err != nil {
		t.Fatal(err)
	}
	got.Timestamp = got.Timestamp.In(hb.Timestamp.Location())
	if !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, hb)
	}
	if !got.Relayed() {
		t.Fatal("relayed flag lost")
	}
}

func TestHeartbeatLargestFits(t *testing.T) {
	hb := sampleHeartbeat(t)
	hb.Region = string(bytes.Repeat([]byte("x"), MaxRegionLen))
	hb.Prefixes = string(make([]byte, MaxPrefixLen))
	for range MaxRTTSamples - 1 {
		hb.RTTs = append(hb.RTTs, RTTSample{Peer: testPeerID(t), RTT: time.Hour})
	}
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > MaxHeartbeatSize/2 {
		t.Fatalf("largest heartbeat is %d bytes", len(data))
	}
}

// TestHeartbeatLoadTable: the entry's queue travels in section 2, only
// while the queue is not empty: an idle entry's heartbeat has no such
// section. An empty or malformed section is refused.
func TestHeartbeatLoadTable(t *testing.T) {
	hb := sampleHeartbeat(t)
	hb.Prefixes = "" // the load table's bytes sit just before the sections
	idle, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hb.EntryQueue, hb.EntryWait = 12, 2500*time.Millisecond
	loaded, err := hb.MarshalBinary()
	if err != nil || len(loaded) != len(idle)+15 || !bytes.Equal(loaded[:len(idle)], idle) {
		t.Fatalf("loaded heartbeat: %d bytes (idle %d), %v", len(loaded), len(idle), err)
	}
	got, err := DecodeHeartbeat(loaded)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, hb) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, hb)
	}
	empty := append(bytes.Clone(idle), 2, 0, 12)
	empty = append(empty, make([]byte, 12)...)
	short := append(bytes.Clone(idle), 2, 0, 4, 0, 0, 0, 1)
	neg := bytes.Clone(loaded)
	neg[len(neg)-8] = 0x80
	for name, data := range map[string][]byte{"empty": empty, "short": short, "negative wait": neg} {
		if _, err := DecodeHeartbeat(data); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s section: %v", name, err)
		}
	}
	for _, f := range []func(h *Heartbeat){
		func(h *Heartbeat) { h.EntryQueue = -1 },
		func(h *Heartbeat) { h.EntryWait = -time.Second },
	} {
		h := sampleHeartbeat(t)
		f(h)
		if _, err := h.MarshalBinary(); !errors.Is(err, ErrHeartbeatSchema) {
			t.Fatalf("bad load table encoded: %v", err)
		}
	}
}

func TestHeartbeatRejects(t *testing.T) {
	hb := sampleHeartbeat(t)
	good, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	noPrefix := sampleHeartbeat(t)
	noPrefix.Prefixes = ""
	plain, err := noPrefix.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	idLen := int(good[1])
	stateOff := 2 + idLen + 16
	cases := map[string]struct {
		data []byte
		want error
	}{
		"empty":     {nil, ErrHeartbeatSchema},
		"version":   {mut(func(b []byte) []byte { b[0] = 3; return b }), ErrHeartbeatSchema},
		"truncated": {good[:len(good)-1], ErrHeartbeatSchema},
		"trailing":  {append(bytes.Clone(good), 0), ErrHeartbeatSchema},
		"state":     {mut(func(b []byte) []byte { b[stateOff] = 9; return b }), ErrHeartbeatSchema},
		"flags":     {mut(func(b []byte) []byte { b[stateOff+1] = 0x80; return b }), ErrHeartbeatSchema},
		"bad id":    {mut(func(b []byte) []byte { b[2] ^= 0xff; return b }), ErrHeartbeatSchema},
		"zero id":   {[]byte{1, 0}, ErrHeartbeatSchema},
		"oversize":  {make([]byte, MaxHeartbeatSize+1), ErrHeartbeatSize},
		// Optional sections: known tags only, ascending, once, non-empty.
		"unknown section":  {append(bytes.Clone(good), 9, 0, 1, 0), ErrHeartbeatSchema},
		"repeated section": {append(bytes.Clone(good), sectionPrefixes, 0, 1, 0), ErrHeartbeatSchema},
		"empty section":    {append(bytes.Clone(plain), sectionPrefixes, 0, 0), ErrHeartbeatSchema},
		"section overrun":  {append(bytes.Clone(plain), sectionPrefixes, 0, 9, 1), ErrHeartbeatSchema},
		"oversize section": {append(append(bytes.Clone(plain), sectionPrefixes, byte((MaxPrefixLen+1)>>8), byte((MaxPrefixLen+1)&0xff)),
			make([]byte, MaxPrefixLen+1)...), ErrHeartbeatSchema},
	}
	for name, c := range cases {
		if _, err := DecodeHeartbeat(c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}

	bad := []func(h *Heartbeat){
		func(h *Heartbeat) { h.RangeEnd = h.RangeStart - 1 },
		func(h *Heartbeat) { h.State = numStates },
		func(h *Heartbeat) { h.QueueDepth = -1 },
		func(h *Heartbeat) { h.LayerLatency = -1 },
		func(h *Heartbeat) { h.Region = string(make([]byte, MaxRegionLen+1)) },
		func(h *Heartbeat) { h.Region = "\xff" },
		func(h *Heartbeat) { h.RTTs = make([]RTTSample, MaxRTTSamples+1) },
		func(h *Heartbeat) { h.NodeID = "" },
		func(h *Heartbeat) { h.Prefixes = string(make([]byte, MaxPrefixLen+1)) },
	}
	for i, f := range bad {
		h := sampleHeartbeat(t)
		f(h)
		if _, err := h.MarshalBinary(); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("bad heartbeat %d encoded: %v", i, err)
		}
	}
}

func TestCheckHeartbeat(t *testing.T) {
	hb := sampleHeartbeat(t)
	data, _ := hb.MarshalBinary()
	now := hb.Timestamp.Add(time.Second)
	if _, err := CheckHeartbeat(hb.NodeID, data, now, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckHeartbeat(testPeerID(t), data, now, time.Minute); !errors.Is(err, ErrHeartbeatSender) {
		t.Fatalf("forged sender: %v", err)
	}
	if _, err := CheckHeartbeat(hb.NodeID, data, now.Add(time.Hour), time.Minute); !errors.Is(err, ErrHeartbeatClock) {
		t.Fatalf("old timestamp: %v", err)
	}
	if _, err := CheckHeartbeat(hb.NodeID, data, now.Add(-time.Hour), time.Minute); !errors.Is(err, ErrHeartbeatClock) {
		t.Fatalf("future timestamp: %v", err)
	}
}

// FuzzHeartbeatDecoder: any input decodes or fails with a schema or size
// error, never panics, and what decodes re-encodes to the same bytes.
func FuzzHeartbeatDecoder(f *testing.F) {
	hb := sampleHeartbeat(f)
	good, _ := hb.MarshalBinary()
	f.Add(good)
	hb.RTTs, hb.Region, hb.Flags = nil, "", 0
	plain, _ := hb.MarshalBinary()
	f.Add(plain)
	hb.EntryQueue, hb.EntryWait = 7, 1500*time.Millisecond
	loaded, _ := hb.MarshalBinary()
	f.Add(loaded)
	hb.Engine = "ggml-CUDA0"
	engined, _ := hb.MarshalBinary()
	f.Add(engined)
	hb.Engine = ""
	hb.TokensServed, hb.StepsRun = 1234, 98765
	served, _ := hb.MarshalBinary()
	f.Add(served)
	hb.TokensServed, hb.StepsRun = 0, 0
	hb.Vouches = []Vouch{{Peer: hb.NodeID, Checks: 9}}
	vouched, _ := hb.MarshalBinary()
	f.Add(vouched)
	hb.Vouches = nil
	f.Add(append(bytes.Clone(plain), 2, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)) // an empty queue section
	f.Add([]byte{1})
	f.Add([]byte{1, 64})
	f.Fuzz(func(t *testing.T, in []byte) {
		hb, err := DecodeHeartbeat(in)
		if err != nil {
			if !errors.Is(err, ErrHeartbeatSchema) && !errors.Is(err, ErrHeartbeatSize) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		out, err := hb.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded heartbeat does not re-encode: %v", err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
		}
	})
}

// The fetch progress section round-trips, goes out only while a fetch is
// in progress, and is checked: 16 bytes, done within a positive total.
func TestHeartbeatFetchSection(t *testing.T) {
	hb := sampleHeartbeat(t)
	plain, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hb.FetchDone, hb.FetchTotal = 3<<20, 40<<20
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != len(plain)+3+16 {
		t.Fatalf("%d bytes with the fetch section, %d without", len(data), len(plain))
	}
	got, err := DecodeHeartbeat(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.FetchDone != hb.FetchDone || got.FetchTotal != hb.FetchTotal || got.Prefixes != hb.Prefixes {
		t.Fatalf("fetch %d of %d (prefixes %q), want %d of %d", got.FetchDone, got.FetchTotal, got.Prefixes, hb.FetchDone, hb.FetchTotal)
	}
	section := func(done, total uint64, n uint16) []byte {
		b := append(bytes.Clone(plain), sectionFetch)
		b = binary.BigEndian.AppendUint16(b, n)
		b = binary.BigEndian.AppendUint64(b, done)
		return binary.BigEndian.AppendUint64(b, total)[:len(plain)+3+int(min(n, 16))]
	}
	for name, b := range map[string][]byte{
		"done > total": section(5, 4, 16),
		"total 0":      section(0, 0, 16),
		"negative":     section(1<<63, 1<<63, 16),
		"short":        section(1, 2, 8),
	} {
		if _, err := DecodeHeartbeat(b); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
	hb.FetchDone = hb.FetchTotal + 1
	if _, err := hb.MarshalBinary(); !errors.Is(err, ErrHeartbeatSchema) {
		t.Fatalf("done past total encoded: %v", err)
	}
}

// The engine section round-trips, is absent for the pure-Go engine (so
// that such a node's heartbeat is what it was before engines were named)
// and is checked: 1..MaxEngineLen bytes of UTF-8.
func TestHeartbeatEngineSection(t *testing.T) {
	hb := sampleHeartbeat(t)
	hb.FetchDone, hb.FetchTotal = 1, 2
	plain, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hb.Engine = "ggml-CPU"
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != len(plain)+3+len(hb.Engine) || !bytes.Equal(data[:len(plain)], plain) {
		t.Fatalf("%d bytes with the engine section, %d without", len(data), len(plain))
	}
	got, err := DecodeHeartbeat(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Engine != hb.Engine || got.FetchTotal != hb.FetchTotal {
		t.Fatalf("engine %q (fetch total %d), want %q", got.Engine, got.FetchTotal, hb.Engine)
	}
	section := func(label []byte) []byte {
		b := append(bytes.Clone(plain), sectionEngine)
		b = binary.BigEndian.AppendUint16(b, uint16(len(label)))
		return append(b, label...)
	}
	for name, b := range map[string][]byte{
		"empty":    section(nil),
		"too long": section(bytes.Repeat([]byte("g"), MaxEngineLen+1)),
		"not utf8": section([]byte{0xff, 0xfe}),
	} {
		if _, err := DecodeHeartbeat(b); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
	hb.Engine = string(bytes.Repeat([]byte("g"), MaxEngineLen+1))
	if _, err := hb.MarshalBinary(); !errors.Is(err, ErrHeartbeatSchema) {
		t.Fatalf("an over-long engine encoded: %v", err)
	}
}

// The served section carries the two counters, goes out only while one
// is non-zero, and is checked: 16 bytes, not both zero.
func TestHeartbeatServedSection(t *testing.T) {
	hb := sampleHeartbeat(t)
	plain, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	hb.TokensServed, hb.StepsRun = 0, 1<<40
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != len(plain)+3+16 || !bytes.Equal(data[:len(plain)], plain) {
		t.Fatalf("%d bytes with the served section, %d without", len(data), len(plain))
	}
	got, err := DecodeHeartbeat(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.TokensServed != 0 || got.StepsRun != 1<<40 {
		t.Fatalf("served %d steps %d", got.TokensServed, got.StepsRun)
	}
	section := func(body []byte) []byte {
		b := append(bytes.Clone(plain), sectionServed)
		b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
		return append(b, body...)
	}
	for name, b := range map[string][]byte{
		"zero":  section(make([]byte, 16)),
		"short": section(make([]byte, 8)),
		"long":  section(append(make([]byte, 16), 1)),
	} {
		if _, err := DecodeHeartbeat(b); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The vouches section round-trips, is absent when the node vouches for
// nobody, and is checked: 1..MaxVouches entries, each of a valid peer ID
// with a positive count, no peer twice. The largest heartbeat with it
// still fits MaxHeartbeatSize.
func TestHeartbeatVouchesSection(t *testing.T) {
	hb := sampleHeartbeat(t)
	hb.Engine = "ggml-CPU"
	plain, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	p, q := testPeerID(t), testPeerID(t)
	hb.Vouches = []Vouch{{Peer: p, Checks: 3}, {Peer: q, Checks: 1 << 31}}
	data, err := hb.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[:len(plain)], plain) || len(data) != len(plain)+3+1+2*(1+len(p)+4) {
		t.Fatalf("%d bytes with the vouches section, %d without", len(data), len(plain))
	}
	got, err := DecodeHeartbeat(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Vouches, hb.Vouches) || got.Engine != hb.Engine {
		t.Fatalf("vouches %v (engine %q), want %v", got.Vouches, got.Engine, hb.Vouches)
	}
	section := func(n byte, entries ...Vouch) []byte {
		body := []byte{n}
		for _, v := range entries {
			body = append(body, byte(len(v.Peer)))
			body = append(body, v.Peer...)
			body = binary.BigEndian.AppendUint32(body, v.Checks)
		}
		b := append(bytes.Clone(plain), sectionVouches)
		b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
		return append(b, body...)
	}
	for name, b := range map[string][]byte{
		"no entries":  section(0),
		"zero checks": section(1, Vouch{Peer: p}),
		"repeated":    section(2, Vouch{Peer: p, Checks: 1}, Vouch{Peer: p, Checks: 2}),
		"count short": section(2, Vouch{Peer: p, Checks: 1}),
		"count long":  section(1, Vouch{Peer: p, Checks: 1}, Vouch{Peer: q, Checks: 1}),
		"bad peer":    section(1, Vouch{Peer: "not a peer", Checks: 1}),
		"too many":    section(MaxVouches + 1),
	} {
		if _, err := DecodeHeartbeat(b); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, vs := range map[string][]Vouch{
		"zero checks": {{Peer: p}},
		"repeated":    {{Peer: p, Checks: 1}, {Peer: p, Checks: 1}},
		"no peer":     {{Checks: 1}},
		"too many":    make([]Vouch, MaxVouches+1),
	} {
		hb.Vouches = vs
		if _, err := hb.MarshalBinary(); !errors.Is(err, ErrHeartbeatSchema) {
			t.Errorf("%s encoded: %v", name, err)
		}
	}
	// The largest heartbeat: every field and section at its maximum.
	hb.Vouches = nil
	hb.Region = string(bytes.Repeat([]byte("x"), MaxRegionLen))
	hb.Prefixes = string(make([]byte, MaxPrefixLen))
	hb.Engine = string(bytes.Repeat([]byte("g"), MaxEngineLen))
	hb.EntryQueue, hb.FetchDone, hb.FetchTotal = 1, 1, 2
	hb.TokensServed, hb.StepsRun = 1, 1
	for range MaxRTTSamples - len(hb.RTTs) {
		hb.RTTs = append(hb.RTTs, RTTSample{Peer: testPeerID(t), RTT: time.Hour})
	}
	for range MaxVouches {
		hb.Vouches = append(hb.Vouches, Vouch{Peer: testPeerID(t), Checks: 1})
	}
	if data, err = hb.MarshalBinary(); err != nil || len(data) > MaxHeartbeatSize {
		t.Fatalf("largest heartbeat: %d bytes, %v", len(data), err)
	}
}
