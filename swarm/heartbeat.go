package swarm

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/internal/codec"
)

// HeartbeatVersion is the version byte of the heartbeat schema. A decoder
// rejects every other version: a new schema gets a new version and, if
// peers of both must coexist, a new topic.
const HeartbeatVersion = 1

// Heartbeat schema limits. Together they bound an encoded heartbeat well
// below MaxHeartbeatSize.
const (
	MaxHeartbeatSize = 4096 // bytes, checked before decoding
	MaxRTTSamples    = 16   // RTT samples per heartbeat
	MaxRegionLen     = 32   // bytes of the region label
	MaxEngineLen     = 32   // bytes of the engine label
	MaxPrefixLen     = 1040 // bytes of an encoded prefix summary (8192 bits and its size)
	MaxVouches       = 16   // vouches per heartbeat
	maxIDLen         = 64   // bytes of an encoded peer ID
)

// State is the phase a node announces.
type State uint8

// The states, in the order of the schema's byte.
const (
	StateJoining State = iota
	StateWarming
	StateServing
	StateDraining
	numStates
)

func (s State) String() string {
	switch s {
	case StateJoining:
		return "joining"
	case StateWarming:
		return "warming"
	case StateServing:
		return "serving"
	case StateDraining:
		return "draining"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Section tags of a heartbeat's optional part.
const (
	sectionPrefixes uint8 = 1
	sectionQueue    uint8 = 2
	sectionFetch    uint8 = 3
	sectionEngine   uint8 = 4
	sectionServed   uint8 = 5
	sectionVouches  uint8 = 6
)

// Flags in a heartbeat.
const (
	// FlagRelayed: the sender is reachable only through a circuit relay.
	FlagRelayed uint8 = 1 << iota
	knownFlags        = FlagRelayed
)

// RTTSample is the sender's smoothed round trip to one peer.
type RTTSample struct {
	Peer peer.ID
	RTT  time.Duration
}

// Status is the part of a heartbeat that the node fills in: what it
// serves and how loaded it is. The swarm adds identity, RTTs, flags and
// the timestamp.
type Status struct {
	RangeStart, RangeEnd int    // served layers [start, end); 0,0 for none
	Epoch                uint64 // LayerMap epoch the range belongs to
	State                State
	// QueueDepth is the sessions accepted that wait for KV memory before
	// they join the batch (admitted first, in order); ActiveSessions the
	// sessions holding KV. routing.NodeState carries both as they are.
	QueueDepth     int
	ActiveSessions int
	// FreeKV is the free KV cache in tokens; negative means not reported.
	FreeKV int64
	// LayerLatency is the EWMA of one layer's time over every batch the
	// node ran, prefills included; zero means unknown.
	LayerLatency time.Duration
	// Region is a coarse location label (at most MaxRegionLen bytes).
	Region string
	// Prefixes is the node's prefix cache summary as routing encodes it
	// (routing.PrefixSummary.MarshalBinary), opaque here; "": none (at
	// most MaxPrefixLen bytes). A string keeps Status comparable.
	Prefixes string
	// EntryQueue is how many requests wait in the node's entry queue for
	// a path with room, and EntryWait how long the oldest has waited:
	// the swarm's load table (section 2, sent while either is non-zero).
	EntryQueue int
	EntryWait  time.Duration
	// FetchDone of FetchTotal bytes: the node's fetch of weights from
	// peers in progress (FetchTotal 0: none), so that every node's view
	// of the swarm shows who is still fetching.
	FetchDone, FetchTotal int64
	// Engine names the backend that computes the node's layers when it
	// is not the pure-Go engine (e.g. "ggml-CUDA0"; at most MaxEngineLen
	// bytes); "": the pure-Go engine (or a simulated one), which sends no
	// section, so that a swarm of pure-Go nodes gossips what it did
	// before engines were named.
	Engine string
	// TokensServed is the tokens this node delivered to callers as an
	// entry, and StepsRun the steps it ran on its layers, both since it
	// started: counters, so that an observer with two heartbeats of a
	// node (the monitor) derives its throughput from signed data alone.
	TokensServed, StepsRun uint64
}

// Vouch is the sender's count of spot checks of Peer's work that agreed
// with a second holder since the sender started (it only grows): signed
// with the sender's heartbeat, it is what the leader weighs Peer's
// placement by (consensus/trust.go).
type Vouch struct {
	Peer   peer.ID
	Checks uint32
}

// Heartbeat is one gossiped liveness and load report. Version 1 encodes,
// in order, big-endian:
//
//	u8  version (1)
//	u8  len, bytes   node ID (peer ID bytes, 1..64)
//	u32 range start, u32 range end (start <= end)
//	u64 epoch
//	u8  state (0 joining, 1 warming, 2 serving, 3 draining)
//	u8  flags (bit 0: relayed only; other bits must be 0)
//	u32 queue depth, u32 active sessions
//	i64 free KV tokens (negative: not reported)
//	i64 per-layer latency EWMA, ns (>= 0)
//	i64 timestamp, Unix ns
//	u8  len, bytes   region (UTF-8, 0..32)
//	u8  n (0..16), then n × (u8 len, bytes peer ID; u32 RTT in µs)
//
// then optional sections, each u8 tag, u16 len, len bytes (1..), in
// ascending tag order, each at most once; unknown tags are refused:
//
//	tag 1: prefix summary (Status.Prefixes, 1..MaxPrefixLen bytes)
//	tag 2: entry queue: u32 length, i64 the oldest's wait in ns (>= 0;
//	       not both zero: an empty queue sends no section)
//	tag 3: fetch progress: u64 bytes done, u64 bytes in all (16 bytes;
//	       0 <= done <= all, all > 0); only while a fetch is in progress
//	tag 4: engine: the label of a backend other than the pure-Go
//	       engine (Status.Engine, UTF-8, 1..MaxEngineLen bytes)
//	tag 5: served: u64 tokens delivered as an entry, u64 steps run on
//	       the node's layers, both since start (16 bytes; not both zero)
//	tag 6: vouches: u8 n (1..16), then n × (u8 len, bytes peer ID;
//	       u32 checks, > 0), no peer twice (Heartbeat.Vouches)
//
// Nothing else may follow. Sections leave older heartbeats decodable and
// let fields be added without reordering the fixed part.
type Heartbeat struct {
	NodeID peer.ID
	Status
	Flags     uint8
	RTTs      []RTTSample
	Timestamp time.Time
	// Vouches are some of the sender's counts of checks it saw others
	// pass, at most MaxVouches a heartbeat (a sender with more rotates
	// through them).
	Vouches []Vouch
}

// Relayed reports whether the sender says it is reachable only by relay.
func (hb *Heartbeat) Relayed() bool { return hb.Flags&FlagRelayed != 0 }

// MarshalBinary encodes hb under the version-1 schema. It fails on values
// the schema cannot carry instead of truncating them.
func (hb *Heartbeat) MarshalBinary() ([]byte, error) {
	id := []byte(hb.NodeID)
	switch {
	case len(id) == 0 || len(id) > maxIDLen:
		return nil, fmt.Errorf("node ID of %d bytes: %w", len(id), ErrHeartbeatSchema)
	case hb.RangeStart < 0 || hb.RangeEnd < hb.RangeStart || uint64(hb.RangeEnd) > math.MaxUint32:
		return nil, fmt.Errorf("range [%d,%d): %w", hb.RangeStart, hb.RangeEnd, ErrHeartbeatSchema)
	case hb.State >= numStates:
		return nil, fmt.Errorf("state %d: %w", hb.State, ErrHeartbeatSchema)
	case hb.Flags&^knownFlags != 0:
		return nil, fmt.Errorf("flags %#x: %w", hb.Flags, ErrHeartbeatSchema)
	case hb.QueueDepth < 0 || uint64(hb.QueueDepth) > math.MaxUint32 ||
		hb.ActiveSessions < 0 || uint64(hb.ActiveSessions) > math.MaxUint32:
		return nil, fmt.Errorf("queue %d / sessions %d: %w", hb.QueueDepth, hb.ActiveSessions, ErrHeartbeatSchema)
	case hb.LayerLatency < 0:
		return nil, fmt.Errorf("layer latency %v: %w", hb.LayerLatency, ErrHeartbeatSchema)
	case len(hb.Region) > MaxRegionLen || !utf8.ValidString(hb.Region):
		return nil, fmt.Errorf("region %q: %w", hb.Region, ErrHeartbeatSchema)
	case len(hb.RTTs) > MaxRTTSamples:
		return nil, fmt.Errorf("%d RTT samples (max %d): %w", len(hb.RTTs), MaxRTTSamples, ErrHeartbeatSchema)
	case len(hb.Prefixes) > MaxPrefixLen:
		return nil, fmt.Errorf("prefix summary of %d bytes (max %d): %w", len(hb.Prefixes), MaxPrefixLen, ErrHeartbeatSchema)
	case hb.EntryQueue < 0 || uint64(hb.EntryQueue) > math.MaxUint32 || hb.EntryWait < 0:
		return nil, fmt.Errorf("entry queue %d / wait %v: %w", hb.EntryQueue, hb.EntryWait, ErrHeartbeatSchema)
	case hb.FetchTotal < 0 || hb.FetchDone < 0 || hb.FetchDone > hb.FetchTotal:
		return nil, fmt.Errorf("fetch progress %d of %d: %w", hb.FetchDone, hb.FetchTotal, ErrHeartbeatSchema)
	case len(hb.Engine) > MaxEngineLen || !utf8.ValidString(hb.Engine):
		return nil, fmt.Errorf("engine %q: %w", hb.Engine, ErrHeartbeatSchema)
	case len(hb.Vouches) > MaxVouches:
		return nil, fmt.Errorf("%d vouches (max %d): %w", len(hb.Vouches), MaxVouches, ErrHeartbeatSchema)
	}
	for i, v := range hb.Vouches {
		switch {
		case len(v.Peer) == 0 || len(v.Peer) > maxIDLen:
			return nil, fmt.Errorf("vouch peer ID of %d bytes: %w", len(v.Peer), ErrHeartbeatSchema)
		case v.Checks == 0:
			return nil, fmt.Errorf("vouch of 0 checks: %w", ErrHeartbeatSchema)
		}
		for _, w := range hb.Vouches[:i] {
			if w.Peer == v.Peer {
				return nil, fmt.Errorf("two vouches for one peer: %w", ErrHeartbeatSchema)
			}
		}
	}
	b := make([]byte, 0, 128+len(hb.RTTs)*(maxIDLen+5))
	b = append(b, HeartbeatVersion, byte(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint32(b, uint32(hb.RangeStart))
	b = binary.BigEndian.AppendUint32(b, uint32(hb.RangeEnd))
	b = binary.BigEndian.AppendUint64(b, hb.Epoch)
	b = append(b, byte(hb.State), hb.Flags)
	b = binary.BigEndian.AppendUint32(b, uint32(hb.QueueDepth))
	b = binary.BigEndian.AppendUint32(b, uint32(hb.ActiveSessions))
	b = binary.BigEndian.AppendUint64(b, uint64(hb.FreeKV))
	b = binary.BigEndian.AppendUint64(b, uint64(hb.LayerLatency))
	b = binary.BigEndian.AppendUint64(b, uint64(hb.Timestamp.UnixNano()))
	b = append(b, byte(len(hb.Region)))
	b = append(b, hb.Region...)
	b = append(b, byte(len(hb.RTTs)))
	for _, s := range hb.RTTs {
		pid := []byte(s.Peer)
		if len(pid) == 0 || len(pid) > maxIDLen {
			return nil, fmt.Errorf("RTT peer ID of %d bytes: %w", len(pid), ErrHeartbeatSchema)
		}
		us := s.RTT.Microseconds()
		if us < 0 || us > math.MaxUint32 {
			return nil, fmt.Errorf("RTT %v: %w", s.RTT, ErrHeartbeatSchema)
		}
		b = append(b, byte(len(pid)))
		b = append(b, pid...)
		b = binary.BigEndian.AppendUint32(b, uint32(us))
	}
	if len(hb.Prefixes) > 0 {
		b = append(b, sectionPrefixes)
		b = binary.BigEndian.AppendUint16(b, uint16(len(hb.Prefixes)))
		b = append(b, hb.Prefixes...)
	}
	if hb.EntryQueue != 0 || hb.EntryWait != 0 {
		b = append(b, sectionQueue)
		b = binary.BigEndian.AppendUint16(b, 12)
		b = binary.BigEndian.AppendUint32(b, uint32(hb.EntryQueue))
		b = binary.BigEndian.AppendUint64(b, uint64(hb.EntryWait))
	}
	if hb.FetchTotal > 0 {
		b = append(b, sectionFetch)
		b = binary.BigEndian.AppendUint16(b, 16)
		b = binary.BigEndian.AppendUint64(b, uint64(hb.FetchDone))
		b = binary.BigEndian.AppendUint64(b, uint64(hb.FetchTotal))
	}
	if hb.Engine != "" {
		b = append(b, sectionEngine)
		b = binary.BigEndian.AppendUint16(b, uint16(len(hb.Engine)))
		b = append(b, hb.Engine...)
	}
	if hb.TokensServed != 0 || hb.StepsRun != 0 {
		b = append(b, sectionServed)
		b = binary.BigEndian.AppendUint16(b, 16)
		b = binary.BigEndian.AppendUint64(b, hb.TokensServed)
		b = binary.BigEndian.AppendUint64(b, hb.StepsRun)
	}
	if len(hb.Vouches) > 0 {
		n := 1
		for _, v := range hb.Vouches {
			n += 1 + len(v.Peer) + 4
		}
		b = append(b, sectionVouches)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
		b = append(b, byte(len(hb.Vouches)))
		for _, v := range hb.Vouches {
			b = append(b, byte(len(v.Peer)))
			b = append(b, v.Peer...)
			b = binary.BigEndian.AppendUint32(b, v.Checks)
		}
	}
	if len(b) > MaxHeartbeatSize {
		return nil, fmt.Errorf("%d bytes: %w", len(b), ErrHeartbeatSize)
	}
	return b, nil
}

// DecodeHeartbeat decodes a version-1 heartbeat. It never panics and
// allocates in proportion to len(data), which it checks against
// MaxHeartbeatSize first. Peer IDs must parse as libp2p peer IDs.
func DecodeHeartbeat(data []byte) (*Heartbeat, error) {
	if len(data) > MaxHeartbeatSize {
		return nil, fmt.Errorf("%d bytes (max %d): %w", len(data), MaxHeartbeatSize, ErrHeartbeatSize)
	}
	d := codec.NewReader(data, binary.BigEndian, ErrHeartbeatSchema)
	if v := d.U8("version"); d.Err() == nil && v != HeartbeatVersion {
		return nil, fmt.Errorf("version %d (want %d): %w", v, HeartbeatVersion, ErrHeartbeatSchema)
	}
	hb := &Heartbeat{}
	hb.NodeID = d.PeerID("node ID", maxIDLen, false)
	hb.RangeStart = int(d.U32("range start"))
	hb.RangeEnd = int(d.U32("range end"))
	hb.Epoch = d.U64("epoch")
	hb.State = State(d.U8("state"))
	hb.Flags = d.U8("flags")
	hb.QueueDepth = int(d.U32("queue depth"))
	hb.ActiveSessions = int(d.U32("active sessions"))
	hb.FreeKV = int64(d.U64("free KV"))
	lat := int64(d.U64("layer latency"))
	ts := int64(d.U64("timestamp"))
	region := d.Take(int(d.U8("region length")), "region")
	n := d.U8("RTT count")
	if d.Err() == nil {
		switch {
		case hb.RangeEnd < hb.RangeStart:
			d.Fail("range [%d,%d)", hb.RangeStart, hb.RangeEnd)
		case hb.State >= numStates:
			d.Fail("state %d", hb.State)
		case hb.Flags&^knownFlags != 0:
			d.Fail("flags %#x", hb.Flags)
		case lat < 0:
			d.Fail("layer latency %d", lat)
		case len(region) > MaxRegionLen || !utf8.Valid(region):
			d.Fail("region %q", region)
		case n > MaxRTTSamples:
			d.Fail("%d RTT samples (max %d)", n, MaxRTTSamples)
		}
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	hb.LayerLatency = time.Duration(lat)
	hb.Timestamp = time.Unix(0, ts)
	hb.Region = string(region)
	if n > 0 {
		hb.RTTs = make([]RTTSample, 0, n)
	}
	for range n {
		id := d.PeerID("RTT peer", maxIDLen, false)
		us := d.U32("RTT")
		if d.Err() != nil {
			return nil, d.Err()
		}
		hb.RTTs = append(hb.RTTs, RTTSample{Peer: id, RTT: time.Duration(us) * time.Microsecond})
	}
	last := uint8(0)
	for d.Err() == nil && d.Len() > 0 {
		tag := d.U8("section tag")
		n := int(d.U16("section length"))
		body := d.Take(n, "section")
		if d.Err() != nil {
			return nil, d.Err()
		}
		switch {
		case tag <= last:
			d.Fail("section %d after section %d", tag, last)
		case n == 0:
			d.Fail("empty section %d", tag)
		case tag == sectionPrefixes && n > MaxPrefixLen:
			d.Fail("prefix summary of %d bytes (max %d)", n, MaxPrefixLen)
		case tag == sectionPrefixes:
			hb.Prefixes = string(body)
		case tag == sectionQueue && n != 12:
			d.Fail("entry queue section of %d bytes (want 12)", n)
		case tag == sectionQueue:
			q := binary.BigEndian.Uint32(body)
			w := int64(binary.BigEndian.Uint64(body[4:]))
			switch {
			case w < 0:
				d.Fail("entry wait %d", w)
			case q == 0 && w == 0:
				d.Fail("an empty entry queue section (none is sent)")
			}
			hb.EntryQueue, hb.EntryWait = int(q), time.Duration(w)
		case tag == sectionFetch && n != 16:
			d.Fail("fetch progress of %d bytes (want 16)", n)
		case tag == sectionFetch:
			done, total := int64(binary.BigEndian.Uint64(body)), int64(binary.BigEndian.Uint64(body[8:]))
			if total <= 0 || done < 0 || done > total {
				d.Fail("fetch progress %d of %d", done, total)
			}
			hb.FetchDone, hb.FetchTotal = done, total
		case tag == sectionEngine && (n > MaxEngineLen || !utf8.Valid(body)):
			d.Fail("engine %q", body)
		case tag == sectionEngine:
			hb.Engine = string(body)
		case tag == sectionServed && n != 16:
			d.Fail("served section of %d bytes (want 16)", n)
		case tag == sectionServed:
			hb.TokensServed, hb.StepsRun = binary.BigEndian.Uint64(body), binary.BigEndian.Uint64(body[8:])
			if hb.TokensServed == 0 && hb.StepsRun == 0 {
				d.Fail("an empty served section (none is sent)")
			}
		case tag == sectionVouches:
			hb.Vouches = decodeVouches(d, body)
		default:
			d.Fail("unknown section %d", tag)
		}
		last = tag
	}
	d.End()
	if d.Err() != nil {
		return nil, d.Err()
	}
	return hb, nil
}

// decodeVouches decodes a vouches section's body, failing d on a bad one.
func decodeVouches(d *codec.Reader, body []byte) []Vouch {
	r := codec.NewReader(body, binary.BigEndian, ErrHeartbeatSchema)
	n := int(r.U8("vouch count"))
	if r.Err() == nil && (n == 0 || n > MaxVouches) {
		r.Fail("%d vouches (max %d)", n, MaxVouches)
	}
	var out []Vouch
	for i := 0; i < n && r.Err() == nil; i++ {
		id := r.PeerID("vouch peer", maxIDLen, false)
		c := r.U32("vouch checks")
		if r.Err() != nil {
			break
		}
		if c == 0 || slices.ContainsFunc(out, func(v Vouch) bool { return v.Peer == id }) {
			r.Fail("vouch of %d checks for %s (zero or repeated)", c, id)
			break
		}
		out = append(out, Vouch{Peer: id, Checks: c})
	}
	r.End()
	if r.Err() != nil {
		d.Fail("vouches: %v", r.Err())
		return nil
	}
	return out
}
