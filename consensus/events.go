package consensus

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/layers"
)

// Bounds on what a record, a snapshot or a control message may hold, so
// that a forged one cannot exhaust memory. A decoder checks each bound
// before it allocates.
const (
	// MaxRecordSize bounds one encoded log record.
	MaxRecordSize = 1 << 20
	// MaxMembers bounds the members a state holds and the names one
	// record lists.
	MaxMembers = 4096
	// MaxIDLen bounds a node ID (a peer ID in text form).
	MaxIDLen = layers.MaxNodeIDLen
	// MaxFingerprintLen bounds a model fingerprint.
	MaxFingerprintLen = 128
	// MaxAddrs bounds the multiaddrs a member advertises.
	MaxAddrs = 16
	// MaxAddrLen bounds one multiaddr in text form.
	MaxAddrLen = 256
	// MaxRegionLen bounds a region label.
	MaxRegionLen = 32
	// MaxHardwareNameLen bounds a hardware name.
	MaxHardwareNameLen = 64
	// MaxReasonLen bounds a reason in words.
	MaxReasonLen = 256
)

// recordVersion is the version byte of every record. A decoder refuses
// any other, so that an old member never misreads a newer log.
const recordVersion = 1

// Kind names an event type. The numbers are part of the log format.
type Kind uint8

// The event kinds.
const (
	KindNodeJoined      Kind = 1
	KindNodeLeft        Kind = 2
	KindNodeDraining    Kind = 3
	KindMapProposed     Kind = 4
	KindStageReady      Kind = 5
	KindMapCommitted    Kind = 6
	KindWarmupAbandoned Kind = 7
)

func (k Kind) String() string {
	switch k {
	case KindNodeJoined:
		return "NodeJoined"
	case KindNodeLeft:
		return "NodeLeft"
	case KindNodeDraining:
		return "NodeDraining"
	case KindMapProposed:
		return "MapProposed"
	case KindStageReady:
		return "StageReady"
	case KindMapCommitted:
		return "MapCommitted"
	case KindWarmupAbandoned:
		return "WarmupAbandoned"
	case KindNodeFaulted:
		return "NodeFaulted"
	case KindManifestPublished:
		return "ManifestPublished"
	case KindManifestPart:
		return "ManifestPart"
	case KindSwarmConfigSet:
		return "SwarmConfigSet"
	case KindSessionTokensSet:
		return "SessionTokensSet"
	case KindStewardsSet:
		return "StewardsSet"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Event is one past-tense fact in the replicated log. The concrete types
// are NodeJoined, NodeLeft, NodeDraining, MapProposed, StageReady,
// MapCommitted and WarmupAbandoned.
type Event interface {
	Kind() Kind
	appendTo(b []byte) []byte
}

// Record is one log entry: an event and the leader's clock when it was
// appended. Folding uses At, never the local clock, so every member
// computes the same state.
type Record struct {
	At    time.Time
	Event Event
}

// Capabilities are what a member offers, as it declared them on joining.
type Capabilities struct {
	Hardware  layers.Hardware
	Region    string
	MaxLayers int // 0: no cap beyond memory
	// Relayed: the member is reachable only through a circuit relay. It
	// is never chosen as a voter.
	Relayed bool
}

// LeaveReason says why a member left.
type LeaveReason uint8

// The reasons.
const (
	// LeftGracefully: the member drained and asked to leave.
	LeftGracefully LeaveReason = 1
	// LeftDead: the member was dead in the peer table past the grace period.
	LeftDead LeaveReason = 2
)

func (r LeaveReason) String() string {
	switch r {
	case LeftGracefully:
		return "graceful"
	case LeftDead:
		return "dead"
	}
	return fmt.Sprintf("LeaveReason(%d)", uint8(r))
}

// NodeJoined: a node joined the swarm (or rejoined, updating what it
// declared). The first join fixes the swarm's model fingerprint.
type NodeJoined struct {
	Node        string
	Caps        Capabilities
	Fingerprint string
	Addrs       []string // multiaddrs, so that every member can dial it
}

// NodeLeft: a member left the swarm.
type NodeLeft struct {
	Node   string
	Reason LeaveReason
}

// NodeDraining: a member announced that it is leaving. The leader moves
// its layers elsewhere before it appends NodeLeft.
type NodeDraining struct {
	Node string
}

// MapProposed: the leader proposed the next map. Members whose range in
// Map is not inside what they serve in the committed map load it while
// they keep serving their old range, then report StageReady. A proposal
// replaces any pending one of the same epoch.
type MapProposed struct {
	Map      layers.LayerMap // epoch: the committed epoch + 1
	Deadline time.Time       // after this the leader may drop laggards
	Reason   string
}

// StageReady: a member loaded its range of the pending map.
type StageReady struct {
	Node  string
	Epoch uint64
	Range layers.Range
}

// MapCommitted: the pending map of this epoch became the committed map.
type MapCommitted struct {
	Epoch uint64
}

// WarmupAbandoned: the pending map of this epoch was dropped; the
// laggards that did not report ready are left out of plans until Until.
type WarmupAbandoned struct {
	Epoch    uint64
	Laggards []string
	Until    time.Time
	Reason   string
}

// Kind implements Event.
func (NodeJoined) Kind() Kind { return KindNodeJoined }

// Kind implements Event.
func (NodeLeft) Kind() Kind { return KindNodeLeft }

// Kind implements Event.
func (NodeDraining) Kind() Kind { return KindNodeDraining }

// Kind implements Event.
func (MapProposed) Kind() Kind { return KindMapProposed }

// Kind implements Event.
func (StageReady) Kind() Kind { return KindStageReady }

// Kind implements Event.
func (MapCommitted) Kind() Kind { return KindMapCommitted }

// Kind implements Event.
func (WarmupAbandoned) Kind() Kind { return KindWarmupAbandoned }

// MarshalRecord encodes a record. Version 1 is:
//
//	u8 version (1), u8 kind, varint At (Unix ns), then the event's fields
//
// with strings and byte strings as a uvarint length and the bytes, numbers
// as canonical uvarints (varints when signed), floats as 8 big-endian
// bytes of their IEEE 754 bits, and a LayerMap as its own binary form in
// a byte string. Nothing may follow. MarshalRecord refuses what
// UnmarshalRecord would refuse.
func MarshalRecord(r Record) ([]byte, error) {
	if r.Event == nil {
		return nil, fmt.Errorf("%w: no event", ErrBadEvent)
	}
	b := []byte{recordVersion, byte(r.Event.Kind())}
	b = binary.AppendVarint(b, unixNano(r.At))
	b = r.Event.appendTo(b)
	// Decoding is the one definition of a valid record.
	if _, err := UnmarshalRecord(b); err != nil {
		return nil, err
	}
	return b, nil
}

// UnmarshalRecord decodes what MarshalRecord wrote. Malformed input gives
// an error wrapping ErrBadEvent, never a panic.
func UnmarshalRecord(b []byte) (Record, error) {
	if len(b) > MaxRecordSize {
		return Record{}, fmt.Errorf("%w: record of %d bytes exceeds %d", ErrBadEvent, len(b), MaxRecordSize)
	}
	d := newDecoder(b, ErrBadEvent)
	if v := d.U8("version"); d.Err() == nil && v != recordVersion {
		return Record{}, fmt.Errorf("%w: version %d (want %d)", ErrBadEvent, v, recordVersion)
	}
	kind := Kind(d.U8("kind"))
	at := d.time("at")
	var ev Event
	switch kind {
	case KindNodeJoined:
		e := NodeJoined{Node: d.id("node")}
		e.Caps = d.caps()
		e.Fingerprint = d.str("fingerprint", MaxFingerprintLen)
		if d.Err() == nil && e.Fingerprint == "" {
			d.Fail("empty fingerprint")
		}
		e.Addrs = d.strs("addrs", MaxAddrs, MaxAddrLen)
		ev = e
	case KindNodeLeft:
		e := NodeLeft{Node: d.id("node"), Reason: LeaveReason(d.U8("reason"))}
		if d.Err() == nil && e.Reason != LeftGracefully && e.Reason != LeftDead {
			d.Fail("leave reason %d", e.Reason)
		}
		ev = e
	case KindNodeDraining:
		ev = NodeDraining{Node: d.id("node")}
	case KindMapProposed:
		e := MapProposed{Map: d.layerMap("map")}
		e.Deadline = d.time("deadline")
		e.Reason = d.str("reason", MaxReasonLen)
		ev = e
	case KindStageReady:
		e := StageReady{Node: d.id("node"), Epoch: d.Uvarint("epoch", math.MaxUint64)}
		e.Range = d.rng("range")
		ev = e
	case KindMapCommitted:
		ev = MapCommitted{Epoch: d.Uvarint("epoch", math.MaxUint64)}
	case KindWarmupAbandoned:
		e := WarmupAbandoned{Epoch: d.Uvarint("epoch", math.MaxUint64)}
		e.Laggards = d.ids("laggards")
		e.Until = d.time("until")
		e.Reason = d.str("reason", MaxReasonLen)
		ev = e
	case KindNodeFaulted:
		ev = decodeNodeFaulted(d)
	case KindManifestPublished:
		ev = decodeManifestPublished(d)
	case KindManifestPart:
		ev = decodeManifestPart(d)
	case KindSwarmConfigSet:
		ev = decodeSwarmConfigSet(d)
	case KindSessionTokensSet:
		ev = decodeSessionTokensSet(d)
	case KindStewardsSet:
		ev = decodeStewardsSet(d)
	default:
		if d.Err() == nil {
			d.Fail("unknown kind %d", kind)
		}
	}
	d.End()
	if d.Err() != nil {
		return Record{}, d.Err()
	}
	return Record{At: at, Event: ev}, nil
}

func (e NodeJoined) appendTo(b []byte) []byte {
	b = appendStr(b, e.Node)
	b = appendCaps(b, e.Caps)
	b = appendStr(b, e.Fingerprint)
	return appendStrs(b, e.Addrs)
}

func (e NodeLeft) appendTo(b []byte) []byte {
	return append(appendStr(b, e.Node), byte(e.Reason))
}

func (e NodeDraining) appendTo(b []byte) []byte { return appendStr(b, e.Node) }

func (e MapProposed) appendTo(b []byte) []byte {
	mb, err := e.Map.MarshalBinary()
	if err != nil {
		mb = nil // an empty map fails to decode: MarshalRecord reports it
	}
	b = appendBytes(b, mb)
	b = binary.AppendVarint(b, unixNano(e.Deadline))
	return appendStr(b, e.Reason)
}

func (e StageReady) appendTo(b []byte) []byte {
	b = appendStr(b, e.Node)
	b = binary.AppendUvarint(b, e.Epoch)
	return appendRange(b, e.Range)
}

func (e MapCommitted) appendTo(b []byte) []byte { return binary.AppendUvarint(b, e.Epoch) }

func (e WarmupAbandoned) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, e.Epoch)
	b = appendStrs(b, e.Laggards)
	b = binary.AppendVarint(b, unixNano(e.Until))
	return appendStr(b, e.Reason)
}

// unixNano maps the zero time to 0, so that it round-trips.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendStrs(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendStr(b, s)
	}
	return b
}

func appendF64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(b, math.Float64bits(f))
}

func appendRange(b []byte, r layers.Range) []byte {
	b = binary.AppendUvarint(b, uint64(max(r.Start, 0)))
	return binary.AppendUvarint(b, uint64(max(r.End, 0)))
}

func appendCaps(b []byte, c Capabilities) []byte {
	b = appendStr(b, c.Hardware.Name)
	b = appendF64(b, c.Hardware.MemoryBytes)
	b = appendF64(b, c.Hardware.MemBandwidth)
	b = appendF64(b, c.Hardware.TFLOPS)
	b = appendF64(b, c.Hardware.NetBandwidth)
	b = appendStr(b, c.Region)
	b = binary.AppendUvarint(b, uint64(max(c.MaxLayers, 0)))
	var flags byte
	if c.Relayed {
		flags |= 1
	}
	return append(b, flags)
}

// decoder reads the fields of a record, a snapshot or a control message:
// codec's Reader (big-endian, first failure sticks) with the domain's
// fields on top.
type decoder struct{ *codec.Reader }

func newDecoder(b []byte, sentinel error) decoder {
	return decoder{codec.NewReader(b, binary.BigEndian, sentinel)}
}

func (d decoder) time(what string) time.Time { return fromUnixNano(d.Varint(what)) }

func (d decoder) bytes(what string, limit uint64) []byte {
	n := d.Uvarint(what+" length", limit)
	return d.Take(int(n), what)
}

func (d decoder) str(what string, limit int) string {
	p := d.bytes(what, uint64(limit))
	if d.Err() == nil && !utf8.Valid(p) {
		d.Fail("%s is not UTF-8", what)
		return ""
	}
	return string(p)
}

// id reads a node ID: nonempty, bounded, UTF-8.
func (d decoder) id(what string) string {
	s := d.str(what, MaxIDLen)
	if d.Err() == nil && s == "" {
		d.Fail("empty %s", what)
	}
	return s
}

// count reads a list length, refusing one the rest of the input cannot
// hold at minBytes per element.
func (d decoder) count(what string, limit uint64, minBytes int) int {
	n := d.Uvarint(what+" count", limit)
	if d.Err() == nil && n > uint64(d.Len()/minBytes) {
		d.Fail("%s count %d exceeds input", what, n)
		return 0
	}
	return int(n)
}

func (d decoder) strs(what string, limit, each int) []string {
	n := d.count(what, uint64(limit), 1)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		s := d.str(what, each)
		if d.Err() != nil {
			return nil
		}
		if s == "" {
			d.Fail("empty entry in %s", what)
			return nil
		}
		out = append(out, s)
	}
	return out
}

// ids reads a list of distinct node IDs, in any order.
func (d decoder) ids(what string) []string {
	n := d.count(what, MaxMembers, 2)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		s := d.id(what)
		if d.Err() != nil {
			return nil
		}
		if slices.Contains(out, s) {
			d.Fail("duplicate %q in %s", s, what)
			return nil
		}
		out = append(out, s)
	}
	return out
}

func (d decoder) rng(what string) layers.Range {
	s := d.Uvarint(what+" start", layers.MaxMapLayers)
	e := d.Uvarint(what+" end", layers.MaxMapLayers)
	if d.Err() == nil && s >= e {
		d.Fail("empty %s [%d,%d)", what, s, e)
	}
	return layers.Range{Start: int(s), End: int(e)}
}

func (d decoder) layerMap(what string) layers.LayerMap {
	return d.mapBytes(what, d.bytes(what, MaxRecordSize))
}

// mapBytes unmarshals a map read as bytes; an error is the decoder's.
func (d decoder) mapBytes(what string, p []byte) layers.LayerMap {
	if d.Err() != nil {
		return layers.LayerMap{}
	}
	var m layers.LayerMap
	if err := m.UnmarshalBinary(p); err != nil {
		d.Fail("%s: %v", what, err)
		return layers.LayerMap{}
	}
	return m
}

func (d decoder) caps() Capabilities {
	var c Capabilities
	c.Hardware.Name = d.str("hardware name", MaxHardwareNameLen)
	c.Hardware.MemoryBytes = d.F64("memory")
	c.Hardware.MemBandwidth = d.F64("memory bandwidth")
	c.Hardware.TFLOPS = d.F64("tflops")
	c.Hardware.NetBandwidth = d.F64("net bandwidth")
	c.Region = d.str("region", MaxRegionLen)
	c.MaxLayers = int(d.Uvarint("max layers", layers.MaxMapLayers))
	flags := d.U8("flags")
	if d.Err() != nil {
		return Capabilities{}
	}
	if flags&^1 != 0 {
		d.Fail("unknown capability flags %#x", flags)
		return Capabilities{}
	}
	c.Relayed = flags&1 != 0
	if err := c.Hardware.Validate(); err != nil {
		d.Fail("%v", err)
		return Capabilities{}
	}
	return c
}
