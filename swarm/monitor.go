package swarm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/internal/proto"
)

// The monitor protocol lets a read-only observer (strata monitor), which
// joins no Raft, sends no heartbeats and holds no swarm key of a public
// swarm, ask a member what it is: one request frame, one response frame
// per stream. The answer is a snapshot signed with the member's identity
// key over a nonce the observer chose, so that a relay or a forwarding
// member can carry it but not forge or replay it.

// ProtocolMonitor is the monitor protocol's ID.
const ProtocolMonitor = proto.Monitor

// SnapshotVersion is the version byte of the snapshot schema.
const SnapshotVersion = 1

// Snapshot schema limits: together they bound an encoded snapshot below
// MaxSnapshotSize.
const (
	MaxSnapshotSize       = 512 << 10 // bytes of a response frame
	MaxSnapshotMap        = 256 << 10 // bytes of the encoded layer map
	MaxSnapshotPeers      = 256       // link reports
	MaxSnapshotAddrs      = 4         // addresses per link report
	MaxSnapshotHeartbeats = 2         // heartbeats (oldest kept, latest)
	MaxSnapshotLabel      = 128       // bytes of the swarm name, model name, fingerprint
	maxAddrLen            = 255
	// SnapshotNonceLen is the size of the observer's nonce.
	SnapshotNonceLen = 16
	// hbHistory is how many of its own heartbeats a host keeps: the
	// oldest and the latest go out, so that an observer derives rates
	// over this many intervals rather than one.
	hbHistory = 10
	// maxMonitorServing bounds the monitor requests a host serves at
	// once; more are refused, not queued.
	maxMonitorServing = 8
	monitorTimeout    = 10 * time.Second
	snapshotDomain    = "strata-monitor-snapshot/1\n"
	monitorOK         = 0
	monitorFailed     = 1
	maxMonitorErr     = 256
)

// Sentinel errors of the monitor protocol.
var (
	// ErrSnapshotSchema: a request or snapshot does not decode.
	ErrSnapshotSchema = errors.New("swarm: snapshot schema violation")
	// ErrSnapshotSignature: a snapshot's signature does not verify under
	// the key of the node it names, or names another node or nonce than
	// asked.
	ErrSnapshotSignature = errors.New("swarm: snapshot signature invalid")
)

// SnapshotInfo is the part of a snapshot the node fills in: the model it
// serves and the layer map it routes on.
type SnapshotInfo struct {
	ModelName   string
	Fingerprint string
	Layers      int
	// Map is the encoded layers.LayerMap the node routes on (opaque
	// here); nil: none (or larger than MaxSnapshotMap).
	Map []byte
}

// LinkReport is one peer as the snapshot's node sees it.
type LinkReport struct {
	Peer     peer.ID
	Link     Link
	Liveness Liveness
	Addrs    []ma.Multiaddr
}

// Snapshot is what a node tells an observer about itself.
type Snapshot struct {
	Node  peer.ID
	Nonce [SnapshotNonceLen]byte
	Time  time.Time
	Swarm string
	SnapshotInfo
	// Reachability is the node's AutoNAT verdict: public, private or
	// unknown.
	Reachability string
	// Heartbeats are the node's own latest heartbeats as gossiped, oldest
	// first (at most MaxSnapshotHeartbeats); each names the node.
	Heartbeats []*Heartbeat
	// Peers are the rows of the node's peer table.
	Peers []LinkReport
	// Charter is the encoded charter of the node's public swarm, signed
	// by its founder (charter.go); nil: none. SnapshotFounder checks it.
	Charter []byte
}

// SnapshotFounder is the founder of the public swarm s's node is in, from
// the charter it carries, checked against the founder's signature for
// the swarm and model the snapshot names; "" and nil without a charter.
func SnapshotFounder(s *Snapshot) (peer.ID, error) {
	if len(s.Charter) == 0 {
		return "", nil
	}
	c, err := DecodeCharter(s.Charter)
	if err != nil {
		return "", err
	}
	if err := c.Verify(s.Swarm, s.Fingerprint); err != nil {
		return "", err
	}
	return c.Founder, nil
}

var linkCodes = []Link{LinkNone, LinkDirect, LinkHolePunched, LinkRelayed}
var reachCodes = []string{"unknown", "public", "private"}

// MarshalBinary encodes s under schema version 1, big-endian:
//
//	u8 version (1)
//	u8 len, bytes   node ID
//	16 bytes        nonce
//	i64             time, Unix ns
//	u8 len, bytes   swarm name; model name; fingerprint (UTF-8, each 0..128)
//	u32             layers
//	u32 len, bytes  layer map (0..MaxSnapshotMap)
//	u8              reachability (0 unknown, 1 public, 2 private)
//	u8 n (0..2), n × (u16 len, bytes heartbeat)
//	u16 n (0..256), n × (u8 len, bytes peer ID; u8 link (0 none, 1 direct,
//	    2 hole-punched, 3 relayed); u8 liveness (0..3);
//	    u8 m (0..4), m × (u8 len, bytes multiaddr))
//	optional: u16 len (1..MaxCharterSize), bytes  the swarm's charter
//
// (A snapshot without a charter ends after the peers, as before charters.)
func (s *Snapshot) MarshalBinary() ([]byte, error) {
	fail := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf(format+": %w", append(args, ErrSnapshotSchema)...)
	}
	id := []byte(s.Node)
	switch {
	case len(id) == 0 || len(id) > maxIDLen:
		return fail("node ID of %d bytes", len(id))
	case len(s.Map) > MaxSnapshotMap:
		return fail("layer map of %d bytes (max %d)", len(s.Map), MaxSnapshotMap)
	case s.Layers < 0 || uint64(s.Layers) > 1<<31:
		return fail("%d layers", s.Layers)
	case len(s.Heartbeats) > MaxSnapshotHeartbeats:
		return fail("%d heartbeats (max %d)", len(s.Heartbeats), MaxSnapshotHeartbeats)
	case len(s.Peers) > MaxSnapshotPeers:
		return fail("%d peers (max %d)", len(s.Peers), MaxSnapshotPeers)
	}
	reach := indexOf(reachCodes, s.Reachability)
	if reach < 0 {
		return fail("reachability %q", s.Reachability)
	}
	b := append([]byte{SnapshotVersion, byte(len(id))}, id...)
	b = append(b, s.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(s.Time.UnixNano()))
	for _, l := range []string{s.Swarm, s.ModelName, s.Fingerprint} {
		if len(l) > MaxSnapshotLabel || !utf8.ValidString(l) {
			return fail("label %q", l)
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(s.Layers))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Map)))
	b = append(b, s.Map...)
	b = append(b, byte(reach), byte(len(s.Heartbeats)))
	for _, hb := range s.Heartbeats {
		if hb.NodeID != s.Node {
			return fail("heartbeat of %s in %s's snapshot", hb.NodeID, s.Node)
		}
		data, err := hb.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("snapshot heartbeat: %w", err)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
		b = append(b, data...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s.Peers)))
	for _, p := range s.Peers {
		pid := []byte(p.Peer)
		link := indexOf(linkCodes, p.Link)
		switch {
		case len(pid) == 0 || len(pid) > maxIDLen:
			return fail("peer ID of %d bytes", len(pid))
		case link < 0:
			return fail("link %q", p.Link)
		case p.Liveness > Dead:
			return fail("liveness %d", p.Liveness)
		case len(p.Addrs) > MaxSnapshotAddrs:
			return fail("%d addresses (max %d)", len(p.Addrs), MaxSnapshotAddrs)
		}
		b = append(b, byte(len(pid)))
		b = append(b, pid...)
		b = append(b, byte(link), byte(p.Liveness), byte(len(p.Addrs)))
		for _, a := range p.Addrs {
			ab := a.Bytes()
			if len(ab) == 0 || len(ab) > maxAddrLen {
				return fail("address of %d bytes", len(ab))
			}
			b = append(b, byte(len(ab)))
			b = append(b, ab...)
		}
	}
	if len(s.Charter) > MaxCharterSize {
		return fail("charter of %d bytes (max %d)", len(s.Charter), MaxCharterSize)
	}
	if len(s.Charter) > 0 {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s.Charter)))
		b = append(b, s.Charter...)
	}
	if len(b) > MaxSnapshotSize-1024 {
		return fail("%d bytes", len(b))
	}
	return b, nil
}

func indexOf[T comparable](xs []T, x T) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// DecodeSnapshot decodes a version-1 snapshot body. It never panics and
// allocates in proportion to len(data). It checks the schema only, not a
// signature (VerifySnapshot does).
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	if len(data) > MaxSnapshotSize {
		return nil, fmt.Errorf("%d bytes (max %d): %w", len(data), MaxSnapshotSize, ErrSnapshotSchema)
	}
	d := codec.NewReader(data, binary.BigEndian, ErrSnapshotSchema)
	if v := d.U8("version"); d.Err() == nil && v != SnapshotVersion {
		return nil, fmt.Errorf("version %d (want %d): %w", v, SnapshotVersion, ErrSnapshotSchema)
	}
	s := &Snapshot{}
	s.Node = d.PeerID("node ID", maxIDLen, false)
	copy(s.Nonce[:], d.Take(SnapshotNonceLen, "nonce"))
	s.Time = time.Unix(0, int64(d.U64("time")))
	var labels [3]string
	for i, what := range []string{"swarm name", "model name", "fingerprint"} {
		l := d.Take(int(d.U8(what+" length")), what)
		if d.Err() == nil && (len(l) > MaxSnapshotLabel || !utf8.Valid(l)) {
			d.Fail("%s %q", what, l)
		}
		labels[i] = string(l)
	}
	s.Swarm, s.ModelName, s.Fingerprint = labels[0], labels[1], labels[2]
	layers := d.U32("layers")
	if d.Err() == nil && layers > 1<<31 {
		d.Fail("%d layers", layers)
	}
	s.Layers = int(layers)
	n := d.U32("map length")
	if d.Err() == nil && n > MaxSnapshotMap {
		d.Fail("layer map of %d bytes (max %d)", n, MaxSnapshotMap)
	}
	if m := d.Take(int(n), "layer map"); len(m) > 0 {
		s.Map = bytes.Clone(m)
	}
	reach := d.U8("reachability")
	if d.Err() == nil && int(reach) >= len(reachCodes) {
		d.Fail("reachability %d", reach)
	}
	s.Reachability = reachCodes[min(int(reach), len(reachCodes)-1)]
	nhb := d.U8("heartbeat count")
	if d.Err() == nil && nhb > MaxSnapshotHeartbeats {
		d.Fail("%d heartbeats (max %d)", nhb, MaxSnapshotHeartbeats)
	}
	for i := 0; d.Err() == nil && i < int(nhb); i++ {
		raw := d.Take(int(d.U16("heartbeat length")), "heartbeat")
		if d.Err() != nil {
			break
		}
		hb, err := DecodeHeartbeat(raw)
		if err != nil {
			return nil, fmt.Errorf("heartbeat %d: %w: %w", i, ErrSnapshotSchema, err)
		}
		if hb.NodeID != s.Node {
			d.Fail("heartbeat of %s in %s's snapshot", hb.NodeID, s.Node)
		}
		s.Heartbeats = append(s.Heartbeats, hb)
	}
	np := int(d.U16("peer count"))
	if d.Err() == nil && np > MaxSnapshotPeers {
		d.Fail("%d peers (max %d)", np, MaxSnapshotPeers)
	}
	for i := 0; d.Err() == nil && i < np; i++ {
		var p LinkReport
		p.Peer = d.PeerID("peer ID", maxIDLen, false)
		link, live, na := d.U8("link"), d.U8("liveness"), d.U8("address count")
		if d.Err() != nil {
			break
		}
		switch {
		case int(link) >= len(linkCodes):
			d.Fail("link %d", link)
		case Liveness(live) > Dead:
			d.Fail("liveness %d", live)
		case na > MaxSnapshotAddrs:
			d.Fail("%d addresses (max %d)", na, MaxSnapshotAddrs)
		}
		if d.Err() != nil {
			break
		}
		p.Link, p.Liveness = linkCodes[link], Liveness(live)
		for range na {
			ab := d.Take(int(d.U8("address length")), "address")
			if d.Err() != nil {
				break
			}
			a, err := ma.NewMultiaddrBytes(ab)
			if err != nil || len(ab) == 0 {
				d.Fail("address %x: %v", ab, err)
				break
			}
			p.Addrs = append(p.Addrs, a)
		}
		s.Peers = append(s.Peers, p)
	}
	if d.Err() == nil && d.Len() > 0 {
		n := int(d.U16("charter length"))
		if d.Err() == nil && (n == 0 || n > MaxCharterSize) {
			d.Fail("charter of %d bytes", n)
		}
		if c := d.Take(n, "charter"); d.Err() == nil {
			s.Charter = bytes.Clone(c)
		}
	}
	d.End()
	if d.Err() != nil {
		return nil, d.Err()
	}
	return s, nil
}

// SignSnapshot encodes s and signs it with sk: the response frame's body,
// u16 signature length, signature, then the encoded snapshot.
func SignSnapshot(s *Snapshot, sk crypto.PrivKey) ([]byte, error) {
	body, err := s.MarshalBinary()
	if err != nil {
		return nil, err
	}
	sig, err := sk.Sign(append([]byte(snapshotDomain), body...))
	if err != nil {
		return nil, fmt.Errorf("sign snapshot: %w", err)
	}
	if len(sig) > 1024 {
		return nil, fmt.Errorf("signature of %d bytes: %w", len(sig), ErrSnapshotSchema)
	}
	out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(sig)+len(body)), uint16(len(sig)))
	out = append(out, sig...)
	return append(out, body...), nil
}

// VerifySnapshot decodes a signed snapshot and checks that it is from
// want (when set), answers nonce, and is signed by the key of the node it
// names. It returns the snapshot decoded even when only the signature
// fails (with an error wrapping ErrSnapshotSignature), so that an
// observer can show what a forger claimed, marked as such.
func VerifySnapshot(signed []byte, want peer.ID, nonce [SnapshotNonceLen]byte) (*Snapshot, error) {
	if len(signed) < 2 {
		return nil, fmt.Errorf("%d bytes: %w", len(signed), ErrSnapshotSchema)
	}
	n := int(binary.BigEndian.Uint16(signed))
	if len(signed) < 2+n {
		return nil, fmt.Errorf("signature of %d bytes in %d: %w", n, len(signed), ErrSnapshotSchema)
	}
	sig, body := signed[2:2+n], signed[2+n:]
	s, err := DecodeSnapshot(body)
	if err != nil {
		return nil, err
	}
	switch {
	case want != "" && s.Node != want:
		return s, fmt.Errorf("asked %s, answered for %s: %w", want, s.Node, ErrSnapshotSignature)
	case s.Nonce != nonce:
		return s, fmt.Errorf("answers another nonce (a replay): %w", ErrSnapshotSignature)
	}
	pk, err := s.Node.ExtractPublicKey()
	if err != nil {
		return s, fmt.Errorf("no public key in %s: %w: %w", s.Node, ErrSnapshotSignature, err)
	}
	ok, err := pk.Verify(append([]byte(snapshotDomain), body...), sig)
	if err != nil || !ok {
		return s, fmt.Errorf("signature of %s does not verify: %w", s.Node, ErrSnapshotSignature)
	}
	return s, nil
}

// monitorRequest is u8 version, the nonce, u8 len and the ID of the peer
// asked about (0: the node answering); a node forwards a request about a
// peer it is connected to once, without its target.
func encodeMonitorRequest(nonce [SnapshotNonceLen]byte, target peer.ID) []byte {
	b := append([]byte{SnapshotVersion}, nonce[:]...)
	b = append(b, byte(len(target)))
	return append(b, target...)
}

func decodeMonitorRequest(data []byte) (nonce [SnapshotNonceLen]byte, target peer.ID, err error) {
	d := codec.NewReader(data, binary.BigEndian, ErrSnapshotSchema)
	if v := d.U8("version"); d.Err() == nil && v != SnapshotVersion {
		d.Fail("request version %d", v)
	}
	copy(nonce[:], d.Take(SnapshotNonceLen, "nonce"))
	target = d.PeerID("target", maxIDLen, true)
	d.End()
	return nonce, target, d.Err()
}

// SetSnapshotSource sets what the node adds to the snapshots it gives
// observers; nil: the model and map are left empty.
func (bt *Beats) SetSnapshotSource(fn func() SnapshotInfo) {
	if fn == nil {
		bt.snapSource.Store(nil)
		return
	}
	bt.snapSource.Store(&fn)
}

// keepHeartbeat records a heartbeat this host published.
func (bt *Beats) keepHeartbeat(hb *Heartbeat) {
	bt.beatsMu.Lock()
	defer bt.beatsMu.Unlock()
	if len(bt.beats) >= hbHistory {
		bt.beats = append(bt.beats[:0], bt.beats[1:]...)
	}
	bt.beats = append(bt.beats, hb)
}

// Snapshot is what this host tells an observer that sent nonce.
func (bt *Beats) Snapshot(nonce [SnapshotNonceLen]byte) *Snapshot {
	s := bt.h
	snap := &Snapshot{Node: s.h.ID(), Nonce: nonce, Time: s.cfg.clock.Now(), Swarm: s.cfg.swarmName,
		Reachability: s.links.NAT().Reachability}
	if fn := bt.snapSource.Load(); fn != nil {
		snap.SnapshotInfo = (*fn)()
		if len(snap.Map) > MaxSnapshotMap {
			snap.Map = nil
		}
		clip := func(l string) string {
			for len(l) > MaxSnapshotLabel || !utf8.ValidString(l) {
				l = l[:min(len(l)-1, MaxSnapshotLabel)]
			}
			return l
		}
		snap.ModelName, snap.Fingerprint = clip(snap.ModelName), clip(snap.Fingerprint)
	}
	if c := s.Charter(); c != nil {
		snap.Charter, _ = c.MarshalBinary() // nil on error: the monitor shows no founder
		if snap.Fingerprint == "" {
			snap.Fingerprint = c.Fingerprint // a host serving no model: the one its swarm is for
		}
	}
	bt.beatsMu.Lock()
	if n := len(bt.beats); n > 0 {
		if n > 1 {
			snap.Heartbeats = append(snap.Heartbeats, bt.beats[0])
		}
		snap.Heartbeats = append(snap.Heartbeats, bt.beats[n-1])
	}
	bt.beatsMu.Unlock()
	for _, p := range s.table.Snapshot() {
		if len(snap.Peers) == MaxSnapshotPeers {
			break
		}
		r := LinkReport{Peer: p.ID, Link: p.Link, Liveness: p.Liveness}
		// The table's addresses come from discovery; identify's, in the
		// peerstore, cover peers met otherwise. Direct ones first: an
		// observer cannot use a relay's.
		addrs := append(slices.Clone(p.Addrs), s.h.Peerstore().Addrs(p.ID)...)
		slices.SortStableFunc(addrs, func(a, b ma.Multiaddr) int { return cmp.Compare(btoi(IsRelayAddr(a)), btoi(IsRelayAddr(b))) })
		for _, a := range addrs {
			if len(r.Addrs) < MaxSnapshotAddrs && len(a.Bytes()) <= maxAddrLen && !slices.ContainsFunc(r.Addrs, a.Equal) {
				r.Addrs = append(r.Addrs, a)
			}
		}
		snap.Peers = append(snap.Peers, r)
	}
	return snap
}

// serveMonitor answers one monitor request: this host's signed snapshot,
// or, for a request about a peer it is connected to, that peer's answer
// as it came.
func (bt *Beats) serveMonitor(st network.Stream) {
	s := bt.h
	defer st.Close()
	select {
	case bt.monitorSem <- struct{}{}:
		defer func() { <-bt.monitorSem }()
	default:
		st.Reset()
		return
	}
	_ = st.SetDeadline(time.Now().Add(monitorTimeout))
	req, err := ReadFrame(st, 64+SnapshotNonceLen+maxIDLen)
	if err != nil {
		st.Reset()
		return
	}
	nonce, target, err := decodeMonitorRequest(req)
	var resp []byte
	switch {
	case err != nil:
		resp = monitorError(err)
	case target == "" || target == s.h.ID():
		sk := s.h.Peerstore().PrivKey(s.h.ID())
		signed, err := SignSnapshot(bt.Snapshot(nonce), sk)
		if err != nil {
			s.log.Warn("monitor snapshot", zap.Error(err))
			resp = monitorError(err)
			break
		}
		resp = append([]byte{monitorOK}, signed...)
	case !slices.Contains([]network.Connectedness{network.Connected, network.Limited}, s.h.Network().Connectedness(target)):
		// Limited: through a relay only, which the forward may use.
		resp = monitorError(fmt.Errorf("not connected to %s", target))
	default:
		ctx, cancel := context.WithTimeout(s.ctx, monitorTimeout)
		resp, err = monitorRoundTrip(network.WithNoDial(ctx, "monitor forward"), s.h, target, encodeMonitorRequest(nonce, ""))
		cancel()
		if err != nil {
			resp = monitorError(err)
		}
	}
	if err := WriteFrame(st, resp, MaxSnapshotSize); err != nil {
		st.Reset()
	}
}

func monitorError(err error) []byte {
	msg := err.Error()
	if len(msg) > maxMonitorErr {
		msg = msg[:maxMonitorErr]
	}
	return append([]byte{monitorFailed}, msg...)
}

// monitorRoundTrip sends req to p and returns the response frame as it
// came.
func monitorRoundTrip(ctx context.Context, h host.Host, p peer.ID, req []byte) ([]byte, error) {
	st, err := h.NewStream(network.WithAllowLimitedConn(ctx, "monitor"), p, ProtocolMonitor)
	if err != nil {
		return nil, fmt.Errorf("monitor stream to %s: %w", p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	if err := WriteFrame(st, req, 0); err != nil {
		st.Reset()
		return nil, fmt.Errorf("monitor request to %s: %w", p, err)
	}
	if err := st.CloseWrite(); err != nil {
		st.Reset()
		return nil, fmt.Errorf("monitor request to %s: %w", p, err)
	}
	resp, err := ReadFrame(st, MaxSnapshotSize)
	if err != nil {
		st.Reset()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: %w", ErrShortFrame, err)
		}
		return nil, fmt.Errorf("monitor response from %s: %w", p, err)
	}
	return resp, nil
}

// FetchSnapshot asks peer via over h for the signed snapshot of target
// (target == "" or via: via's own) under a fresh nonce, and verifies it.
// A snapshot whose signature fails comes back with an error wrapping
// ErrSnapshotSignature, for the caller to show as unverified.
func FetchSnapshot(ctx context.Context, h host.Host, via, target peer.ID, nonce [SnapshotNonceLen]byte) (*Snapshot, error) {
	if target == via {
		target = ""
	}
	resp, err := monitorRoundTrip(ctx, h, via, encodeMonitorRequest(nonce, target))
	if err != nil {
		return nil, err
	}
	if len(resp) == 0 {
		return nil, fmt.Errorf("empty monitor response from %s: %w", via, ErrSnapshotSchema)
	}
	if resp[0] != monitorOK {
		msg := resp[1:]
		if !utf8.Valid(msg) || len(msg) > maxMonitorErr {
			msg = []byte("(unreadable)")
		}
		return nil, fmt.Errorf("monitor request to %s: %w", via, &RemoteError{Msg: string(msg)})
	}
	want := target
	if want == "" {
		want = via
	}
	return VerifySnapshot(resp[1:], want, nonce)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
