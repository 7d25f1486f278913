package consensus

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/stratanet/strata/layers"
)

// MaxSnapshotSize bounds an encoded state.
const MaxSnapshotSize = 64 << 20

// snapshotMagic is written; snapshotMagicV1 (no ban list) is still read.
const (
	snapshotMagic   = "SCS2"
	snapshotMagicV1 = "SCS1"
)

// MarshalBinary encodes the state deterministically: equal states give
// equal bytes. Version 1 is the magic "SCS1", then the fingerprint, the
// applied count, the last At, the members in ID order, the committed map
// (an empty byte string when none), and a flag byte followed by the
// pending map, its times, reason and the nodes that load with their
// readiness, in ID order, then (since "SCS2") the bans in ID order, the
// manifest section: absent, the manifest as a byte string, or the parts of
// one under way (manifest.go), or an empty byte string when neither but
// sections follow, then the trailing sections, such as the swarm's
// configuration (swarmconfig.go). Fields are encoded as in MarshalRecord.
func (s State) MarshalBinary() ([]byte, error) {
	b := []byte(snapshotMagic)
	b = appendStr(b, s.fingerprint)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendVarint(b, unixNano(s.last))
	ids := slices.Sorted(maps.Keys(s.members))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		m := s.members[id]
		b = appendStr(b, m.ID)
		b = appendCaps(b, m.Caps)
		b = appendStrs(b, m.Addrs)
		b = binary.AppendVarint(b, unixNano(m.JoinedAt))
		b = binary.AppendVarint(b, unixNano(m.LaggardUntil))
		var flags byte
		if m.Draining {
			flags |= 1
		}
		b = append(b, flags)
	}
	var err error
	if b, err = appendMap(b, s.committed); err != nil {
		return nil, err
	}
	if s.pending == nil {
		b = append(b, 0)
	} else {
		p := s.pending
		b = append(b, 1)
		if b, err = appendMap(b, p.Map); err != nil {
			return nil, err
		}
		b = binary.AppendVarint(b, unixNano(p.Since))
		b = binary.AppendVarint(b, unixNano(p.Deadline))
		b = appendStr(b, p.Reason)
		loads := slices.Sorted(maps.Keys(p.loads))
		b = binary.AppendUvarint(b, uint64(len(loads)))
		for _, id := range loads {
			b = appendStr(b, id)
			if p.loads[id] {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	}
	b = appendBans(b, s.bans)
	b = appendManifest(b, s)
	b = appendSections(b, s)
	if len(b) > MaxSnapshotSize {
		return nil, fmt.Errorf("%w: state of %d bytes exceeds %d", ErrBadSnapshot, len(b), MaxSnapshotSize)
	}
	return b, nil
}

func appendMap(b []byte, m layers.LayerMap) ([]byte, error) {
	if m.Layers == 0 && len(m.Stages) == 0 && m.Epoch == 0 {
		return appendBytes(b, nil), nil
	}
	mb, err := m.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	return appendBytes(b, mb), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote. Malformed input gives
// an error wrapping ErrBadSnapshot, never a panic, and leaves s as it was.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) > MaxSnapshotSize {
		return fmt.Errorf("%w: %d bytes exceeds %d", ErrBadSnapshot, len(b), MaxSnapshotSize)
	}
	if len(b) < len(snapshotMagic) || (string(b[:len(snapshotMagic)]) != snapshotMagic && string(b[:len(snapshotMagic)]) != snapshotMagicV1) {
		return fmt.Errorf("%w: bad magic", ErrBadSnapshot)
	}
	v1 := string(b[:len(snapshotMagic)]) == snapshotMagicV1
	d := newDecoder(b[len(snapshotMagic):], ErrBadSnapshot)
	var out State
	out.fingerprint = d.str("fingerprint", MaxFingerprintLen)
	out.applied = d.Uvarint("applied", math.MaxUint64)
	out.last = d.time("last")
	n := d.count("members", MaxMembers, 8)
	out.members = make(map[string]Member, n)
	prev := ""
	for range n {
		m := Member{ID: d.id("member")}
		m.Caps = d.caps()
		m.Addrs = d.strs("addrs", MaxAddrs, MaxAddrLen)
		m.JoinedAt = d.time("joined")
		m.LaggardUntil = d.time("laggard until")
		flags := d.U8("member flags")
		if d.Err() != nil {
			return d.Err()
		}
		if flags&^1 != 0 {
			d.Fail("unknown member flags %#x", flags)
			return d.Err()
		}
		if m.ID <= prev {
			d.Fail("members out of order at %q", m.ID)
			return d.Err()
		}
		prev = m.ID
		m.Draining = flags&1 != 0
		out.members[m.ID] = m
	}
	if n > 0 && out.fingerprint == "" {
		d.Fail("members without a fingerprint")
	}
	out.committed = d.optMap("committed map")
	switch d.U8("pending flag") {
	case 0:
	case 1:
		p := &Pending{Map: d.optMap("pending map")}
		p.Since = d.time("since")
		p.Deadline = d.time("deadline")
		p.Reason = d.str("reason", MaxReasonLen)
		k := d.count("loads", MaxMembers, 3)
		p.loads = make(map[string]bool, k)
		prev := ""
		for range k {
			id := d.id("loading node")
			ready := d.U8("ready")
			if d.Err() != nil {
				break
			}
			if id <= prev || ready > 1 {
				d.Fail("bad load entry %q", id)
				break
			}
			if _, ok := p.Map.Range(id); !ok {
				d.Fail("loading node %q not in the pending map", id)
				break
			}
			prev = id
			p.loads[id] = ready == 1
		}
		if d.Err() == nil && p.Map.Layers == 0 {
			d.Fail("empty pending map")
		}
		out.pending = p
	default:
		d.Fail("bad pending flag")
	}
	if !v1 {
		out.bans = d.bans()
		decodeManifest(d, &out)
		decodeSections(d, &out)
	}
	d.End()
	if d.Err() != nil {
		return d.Err()
	}
	*s = out
	return nil
}

func (d decoder) optMap(what string) layers.LayerMap {
	p := d.bytes(what, MaxSnapshotSize)
	if len(p) == 0 {
		return layers.LayerMap{} // none
	}
	return d.mapBytes(what, p)
}
