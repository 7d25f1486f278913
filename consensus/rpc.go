package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/internal/proto"
)

// MaxControlFrame bounds one control request or response.
const MaxControlFrame = 64 << 10

const ctlVersion = 1

// A control request asks the leader to append one event about its
// sender: NodeJoined, StageReady or NodeDraining. Its payload is
//
//	"SC" (magic), u8 version (1), u8 hops (0 or 1), string origin (the
//	asking node when forwarded, else empty), bytes record (MarshalRecord)
//
// and the answer's payload is u8 code (0: done, else an errCodes index),
// string message. Both travel in the swarm's control frames: a u32
// big-endian length and the frame; an answer frame starts with the
// swarm's status byte (0: a payload follows). A member that is not the
// leader forwards a request once; the leader checks that the event is
// about the origin, and that a forwarder is a member or a Raft server.
const ctlMagic = "SC"

// IsControlRequest reports whether a control request is one for
// consensus (HandleControl), so that a shared /strata/ctl/1 mux can route
// it.
func IsControlRequest(req []byte) bool {
	return len(req) >= len(ctlMagic)+1 && string(req[:len(ctlMagic)]) == ctlMagic
}

func encodeRequest(origin string, hops uint8, r Record) ([]byte, error) {
	rb, err := MarshalRecord(r)
	if err != nil {
		return nil, err
	}
	b := append([]byte(ctlMagic), ctlVersion, hops)
	b = appendStr(b, origin)
	b = appendBytes(b, rb)
	if len(b) > MaxControlFrame {
		return nil, fmt.Errorf("%w: request of %d bytes", ErrBadEvent, len(b))
	}
	return b, nil
}

func decodeRequest(b []byte) (origin string, hops uint8, r Record, err error) {
	if !IsControlRequest(b) {
		return "", 0, Record{}, fmt.Errorf("%w: not a consensus control request", ErrBadEvent)
	}
	d := newDecoder(b[len(ctlMagic):], ErrBadEvent)
	if v := d.U8("version"); d.Err() == nil && v != ctlVersion {
		d.Fail("control version %d", v)
	}
	hops = d.U8("hops")
	origin = d.str("origin", MaxIDLen)
	rb := d.bytes("record", MaxControlFrame)
	d.End()
	if d.Err() == nil && (hops > 1 || (hops == 0) != (origin == "")) {
		d.Fail("hops %d with origin %q", hops, origin)
	}
	if d.Err() != nil {
		return "", 0, Record{}, d.Err()
	}
	r, err = UnmarshalRecord(rb)
	return origin, hops, r, err
}

func encodeResponse(err error) []byte {
	if err == nil {
		return []byte{0, 0}
	}
	msg := err.Error()
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return appendStr([]byte{errCode(err)}, msg)
}

func decodeResponse(b []byte) error {
	d := newDecoder(b, ErrRemote)
	code := d.U8("code")
	msg := d.str("message", MaxControlFrame)
	d.End()
	if d.Err() != nil {
		return d.Err()
	}
	if code == 0 {
		return nil
	}
	if int(code) >= len(errCodes) {
		code = 1
	}
	return &RemoteError{Code: code, Msg: msg}
}

// writeFrame and readFrame are the shared framing (internal/codec, as the
// swarm's control protocol frames), with a frame out of bounds reported
// as ErrBadEvent.
func writeFrame(w io.Writer, p []byte) error {
	if err := codec.WriteFrame(w, p, MaxControlFrame+1); err != nil {
		return badFrame(err)
	}
	return nil
}

func readFrame(r io.Reader, limit uint32) ([]byte, error) {
	p, err := codec.ReadFrame(r, int(limit))
	if err != nil {
		return nil, badFrame(err)
	}
	return p, nil
}

func badFrame(err error) error {
	if errors.Is(err, codec.ErrFrameTooLarge) {
		return fmt.Errorf("%w: %w", ErrBadEvent, err)
	}
	return err
}

// HandleControl answers one consensus control request from a peer. It
// fits the swarm's control handler: the answer, refusals included, is
// in the returned payload, and the error is always nil.
func (c *Consensus) HandleControl(ctx context.Context, from peer.ID, req []byte) ([]byte, error) {
	return c.ctl.handle(ctx, from, req), nil
}

// ctl owns the control RPC: it serves the requests peers send this
// member (forwarding them once to the leader) and sends this member's
// own (request), over the swarm's caller or its own streams.
type ctl struct {
	*base         // fields only: base has no methods to promote
	lead  *leader // answers the requests while this member leads
}

// handle answers one request; see HandleControl.
func (c *ctl) handle(ctx context.Context, from peer.ID, req []byte) []byte {
	err := c.serveRequest(ctx, from, req)
	if err != nil {
		c.log.Debugw("control request refused", "peer", from, "error", err)
	}
	return encodeResponse(err)
}

// serveControl is the built-in handler of proto.Ctl.
func (c *ctl) serveControl(s Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(c.cfg.rpcTimeout))
	req, err := readFrame(s, MaxControlFrame)
	if err != nil {
		c.log.Debugw("control request", "peer", s.Peer(), "error", err)
		_ = s.Reset()
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.rpcTimeout)
	defer cancel()
	resp := c.handle(ctx, s.Peer(), req)
	_ = writeFrame(s, append([]byte{0}, resp...))
}

func (c *ctl) serveRequest(ctx context.Context, from peer.ID, req []byte) error {
	origin, hops, r, err := decodeRequest(req)
	if err != nil {
		return err
	}
	node := from.String()
	if hops > 0 {
		// Only a member (or a Raft server not yet joined) may speak for
		// another node. Another may become one: the asker retries.
		if !c.fsm.current().IsMember(node) && !c.inConfig(from) {
			return fmt.Errorf("%w: %s forwards but is not a member yet", ErrNoLeader, from)
		}
		node = origin
	}
	var about string
	switch e := r.Event.(type) {
	case NodeJoined:
		about = e.Node
	case StageReady:
		about = e.Node
	case NodeDraining:
		about = e.Node
	case NodeFaulted:
		about = e.Accuser // a member accuses another in its own name
	case StewardsSet:
		about = e.Signer // the founder or a steward, for its own signature
	default:
		return fmt.Errorf("%w: %s is not a request", ErrForbidden, r.Event.Kind())
	}
	if about != node {
		return fmt.Errorf("%w: %s from %s is about %s", ErrForbidden, r.Event.Kind(), node, about)
	}
	return c.submit(ctx, node, r.Event, hops)
}

// submit hands a request to the leader: itself, or forwarded once.
func (c *ctl) submit(ctx context.Context, origin string, ev Event, hops uint8) error {
	if c.rn.isLeader() {
		return c.lead.request(ctx, ev)
	}
	if hops > 0 {
		return ErrNotLeader
	}
	leader, ok := c.rn.leader()
	if !ok || leader == c.id || !c.inConfig(c.id) {
		return ErrNoLeader
	}
	return c.call(ctx, leader, origin, 1, ev)
}

// inConfig reports whether p is a server in the latest Raft configuration.
func (c *ctl) inConfig(p peer.ID) bool {
	in, _ := c.rn.suffrage(p)
	return in
}

// call sends one control request to p and returns its answer.
func (c *ctl) call(ctx context.Context, p peer.ID, origin string, hops uint8, ev Event) error {
	if origin == c.id.String() {
		origin = ""
	}
	if hops > 0 && origin == "" {
		hops = 0
	}
	req, err := encodeRequest(origin, hops, Record{Event: ev})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.rpcTimeout)
	defer cancel()
	var resp []byte
	if c.cfg.caller != nil {
		resp, err = c.cfg.caller.Call(ctx, p, req)
	} else {
		resp, err = c.callStream(ctx, p, req)
	}
	if err != nil {
		return fmt.Errorf("consensus: control call to %s: %w", p, err)
	}
	return decodeResponse(resp)
}

// callStream is the built-in control client: one stream per call.
func (c *ctl) callStream(ctx context.Context, p peer.ID, req []byte) ([]byte, error) {
	s, err := c.h.Open(ctx, p, proto.Ctl)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := writeFrame(s, req); err != nil {
		_ = s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	resp, err := readFrame(s, MaxControlFrame+1)
	if err != nil {
		_ = s.Reset()
		return nil, err
	}
	switch {
	case len(resp) == 0:
		return nil, fmt.Errorf("%w: empty answer", ErrRemote)
	case resp[0] != 0:
		return nil, &RemoteError{Code: 1, Msg: string(resp[1:])}
	}
	return resp[1:], nil
}

// retryable reports whether a request may succeed if sent again later.
func retryable(err error) bool {
	for _, final := range []error{ErrFingerprint, ErrForbidden, ErrBadEvent, ErrRejected, ErrStale, ErrUnknownMember, ErrClosed,
		ErrBanned, ErrBadEvidence, ErrBadStewards} {
		if errors.Is(err, final) {
			return false
		}
	}
	return true
}

// request sends ev to the leader until it is appended, refused for good,
// or ctx ends. It tries the leader when one is known, else the bootstrap
// peers and the members in turn.
func (c *ctl) request(ctx context.Context, ev Event) error {
	var last error
	for attempt := 0; ; attempt++ {
		var err error
		if c.rn.isLeader() {
			err = c.lead.request(ctx, ev)
		} else if leader, ok := c.rn.leader(); ok && leader != c.id {
			err = c.call(ctx, leader, "", 0, ev)
		} else if targets := c.contacts(); len(targets) > 0 {
			err = c.call(ctx, targets[attempt%len(targets)], "", 0, ev)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !retryable(err) {
			return err
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("consensus: %s: %w (last: %w)", ev.Kind(), ctx.Err(), last)
		case <-c.ctx.Done():
			return ErrClosed
		case <-time.After(min(c.cfg.tick*time.Duration(1+attempt), 20*c.cfg.tick)):
		}
	}
}

// contacts are the peers a request may go to when no leader is known.
func (c *ctl) contacts() []peer.ID {
	var out []peer.ID
	for _, b := range c.cfg.bootstrap {
		if b.ID != c.id {
			out = append(out, b.ID)
		}
	}
	for _, m := range c.fsm.current().Members() {
		if id, err := peer.Decode(m.ID); err == nil && id != c.id {
			out = append(out, id)
		}
	}
	return out
}
