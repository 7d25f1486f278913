package swarm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/proto"
)

// Protocol IDs and connection tags, as package proto defines them (the
// one place they are written); swarm names them for its callers.
const (
	ProtocolAct       = proto.Act
	ProtocolCtl       = proto.Ctl
	ProtocolRaft      = proto.Raft
	ProtocolDHTPrefix = proto.DHTPrefix
	TagNeighbour      = proto.TagNeighbour
	TagVoter          = proto.TagVoter
)

// DefaultCallTimeout bounds a control call whose context has no deadline,
// and the time a control handler has to read a request.
const DefaultCallTimeout = 10 * time.Second

// ActHandler receives the frames of the activation protocol, in order per
// stream. frame is valid only until the handler returns. An error resets
// the stream; the sender reopens it on its next send.
type ActHandler func(from peer.ID, frame []byte) error

// CtlHandler answers one control request. An error is sent back to the
// caller as a *RemoteError.
type CtlHandler func(ctx context.Context, from peer.ID, req []byte) ([]byte, error)

// Control response status bytes.
const (
	ctlOK  = 0
	ctlErr = 1
)

// actStream is the persistent activation stream to one neighbour. Its
// mutex serialises frames onto the stream.
type actStream struct {
	mu   sync.Mutex
	s    network.Stream
	gone bool // dropped from the pool; a sender holding it fetches anew
}

// actPool keeps one outgoing activation stream per neighbour.
type actPool struct {
	st      *Streams
	mu      sync.Mutex
	streams map[peer.ID]*actStream
	closed  bool
}

func (p *actPool) get(id peer.ID) (*actStream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	a := p.streams[id]
	if a == nil {
		a = &actStream{}
		p.streams[id] = a
	}
	return a, nil
}

// drop resets and forgets the stream to id, if any. With onlyDead it
// leaves a stream whose connection is still open: the disconnect event
// that calls it arrives late, after a send may already have reopened the
// stream on a new connection, and resetting that one would lose frames
// the sender was told went out.
func (p *actPool) drop(id peer.ID, onlyDead bool) {
	p.mu.Lock()
	a := p.streams[id]
	p.mu.Unlock()
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if onlyDead && a.s != nil && !a.s.Conn().IsClosed() {
		return
	}
	p.st.resetAct(id, a)
	a.gone = true
	p.mu.Lock()
	if p.streams[id] == a {
		delete(p.streams, id)
	}
	p.mu.Unlock()
}

func (p *actPool) closeAll() {
	p.mu.Lock()
	p.closed = true
	all := p.streams
	p.streams = nil
	p.mu.Unlock()
	for id, a := range all {
		a.mu.Lock()
		p.st.resetAct(id, a)
		a.gone = true
		a.mu.Unlock()
	}
}

// resetAct resets a's stream; a.mu must be held.
func (st *Streams) resetAct(id peer.ID, a *actStream) {
	h := st.h
	if a.s != nil {
		a.s.Reset()
		a.s = nil
		h.h.ConnManager().Unprotect(id, proto.TagActStream)
	}
}

// SendActivation writes frame to the persistent activation stream to
// peer to, opening it if needed. A stream that fails is reset and
// reopened once; the frame is then sent whole on the new stream (a frame
// cut off on the old one is discarded by the receiver). Frames to the same
// peer go out in call order. The context bounds opening and writing.
func (st *Streams) SendActivation(ctx context.Context, to peer.ID, frame []byte) error {
	h := st.h
	if len(frame) > h.cfg.maxActFrame {
		return fmt.Errorf("activation to %s: %d bytes (max %d): %w", to, len(frame), h.cfg.maxActFrame, ErrFrameTooLarge)
	}
	a, err := st.lockAct(to)
	if err != nil {
		return err
	}
	defer a.mu.Unlock()
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("activation to %s: %w", to, err)
		}
		if a.s == nil {
			s, err := h.h.NewStream(network.WithAllowLimitedConn(ctx, "activation"), to, ProtocolAct)
			if err != nil {
				if isDialFailure(err) && ctx.Err() == nil {
					return fmt.Errorf("open activation stream to %s: %w: %w", to, ErrUnreachable, err)
				}
				return fmt.Errorf("open activation stream to %s: %w", to, err)
			}
			a.s = s
			h.h.ConnManager().Protect(to, proto.TagActStream)
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = a.s.SetWriteDeadline(dl)
		} else {
			_ = a.s.SetWriteDeadline(time.Time{})
		}
		if last = WriteFrame(a.s, frame, h.cfg.maxActFrame); last == nil {
			return nil
		}
		h.log.Debug("activation stream failed, reopening", zap.Stringer("peer", to), zap.Error(last))
		st.resetAct(to, a)
	}
	return fmt.Errorf("activation to %s: %w", to, last)
}

// lockAct returns the pool's live stream entry for to, locked.
func (st *Streams) lockAct(to peer.ID) (*actStream, error) {
	for {
		a, err := st.acts.get(to)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		if !a.gone {
			return a, nil
		}
		a.mu.Unlock()
	}
}

// CloseActivation closes the activation stream to peer to, if open.
func (st *Streams) CloseActivation(to peer.ID) {
	st.acts.drop(to, false)
}

// HandleActivations sets the receiver of activation frames (nil: refuse
// the protocol's streams).
func (st *Streams) HandleActivations(fn ActHandler) {
	if fn == nil {
		st.actHandler.Store(nil)
		return
	}
	st.actHandler.Store(&fn)
}

// HandleControl sets the answerer of control calls (nil: answer every
// call with an error).
func (st *Streams) HandleControl(fn CtlHandler) {
	if fn == nil {
		st.ctlHandler.Store(nil)
		return
	}
	st.ctlHandler.Store(&fn)
}

func (st *Streams) serveAct(s network.Stream) {
	h := st.h
	from := s.Conn().RemotePeer()
	fn := st.actHandler.Load()
	if fn == nil {
		s.Reset()
		return
	}
	fr := NewFrameReader(s, h.cfg.maxActFrame)
	for {
		frame, err := fr.Next()
		if err != nil {
			if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrShortFrame) {
				h.table.reject(from, rejectFrame)
				h.log.Warn("bad activation frame", zap.Stringer("peer", from), zap.Error(err))
			}
			if errors.Is(err, io.EOF) {
				s.Close()
			} else {
				s.Reset()
			}
			return
		}
		if fn = st.actHandler.Load(); fn == nil {
			s.Reset()
			return
		}
		if err := st.callAct(*fn, from, frame); err != nil {
			h.log.Debug("activation handler failed", zap.Stringer("peer", from), zap.Error(err))
			s.Reset()
			return
		}
	}
}

// callAct runs the handler and turns a panic into an error: no peer input
// may take the node down.
func (st *Streams) callAct(fn ActHandler, from peer.ID, frame []byte) (err error) {
	h := st.h
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("activation handler panic: %v", r)
			h.log.Error("activation handler panic", zap.Stringer("peer", from), zap.Any("panic", r))
		}
	}()
	return fn(from, frame)
}

// Call sends req to peer to on the control protocol and returns the
// response. The context's deadline (DefaultCallTimeout if it has none)
// bounds the whole call. A handler error comes back as a *RemoteError.
func (st *Streams) Call(ctx context.Context, to peer.ID, req []byte) ([]byte, error) {
	h := st.h
	if len(req) > h.cfg.maxCtlFrame {
		return nil, fmt.Errorf("call %s: %d bytes (max %d): %w", to, len(req), h.cfg.maxCtlFrame, ErrFrameTooLarge)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultCallTimeout)
		defer cancel()
	}
	s, err := h.h.NewStream(network.WithAllowLimitedConn(ctx, "control"), to, ProtocolCtl)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", to, err)
	}
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := WriteFrame(s, req, h.cfg.maxCtlFrame); err != nil {
		s.Reset()
		return nil, fmt.Errorf("call %s: write: %w", to, ctxErr(ctx, err))
	}
	if err := s.CloseWrite(); err != nil {
		s.Reset()
		return nil, fmt.Errorf("call %s: %w", to, ctxErr(ctx, err))
	}
	resp, err := ReadFrame(s, h.cfg.maxCtlFrame+1)
	if err != nil {
		s.Reset()
		return nil, fmt.Errorf("call %s: read: %w", to, ctxErr(ctx, err))
	}
	s.Close()
	if len(resp) == 0 {
		return nil, fmt.Errorf("call %s: empty response: %w", to, ErrShortFrame)
	}
	switch resp[0] {
	case ctlOK:
		return resp[1:], nil
	case ctlErr:
		return nil, fmt.Errorf("call %s: %w", to, &RemoteError{Msg: string(resp[1:])})
	}
	return nil, fmt.Errorf("call %s: response status %d: %w", to, resp[0], ErrRemote)
}

// ctxErr reports a failure caused by the context as the context's error:
// the stream deadline set from the context can fire a moment before the
// context itself is marked done.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}

func (st *Streams) serveCtl(s network.Stream) {
	h := st.h
	from := s.Conn().RemotePeer()
	ctx, cancel := context.WithTimeout(h.ctx, DefaultCallTimeout)
	defer cancel()
	_ = s.SetDeadline(time.Now().Add(DefaultCallTimeout))
	req, err := ReadFrame(s, h.cfg.maxCtlFrame)
	if err != nil {
		if errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrShortFrame) {
			h.table.reject(from, rejectFrame)
			h.log.Warn("bad control frame", zap.Stringer("peer", from), zap.Error(err))
		}
		s.Reset()
		return
	}
	var resp []byte
	if fn := st.ctlHandler.Load(); fn == nil {
		resp = append([]byte{ctlErr}, ErrNoHandler.Error()...)
	} else if out, err := st.callCtl(ctx, *fn, from, req); err != nil {
		resp = append([]byte{ctlErr}, err.Error()...)
	} else {
		resp = append(append(make([]byte, 0, 1+len(out)), ctlOK), out...)
	}
	if err := WriteFrame(s, resp, h.cfg.maxCtlFrame+1); err != nil {
		h.log.Debug("control response failed", zap.Stringer("peer", from), zap.Error(err))
		s.Reset()
		return
	}
	s.Close()
}

func (st *Streams) callCtl(ctx context.Context, fn CtlHandler, from peer.ID, req []byte) (out []byte, err error) {
	h := st.h
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("control handler panic: %v", r)
			h.log.Error("control handler panic", zap.Stringer("peer", from), zap.Any("panic", r))
		}
	}()
	return fn(ctx, from, req)
}
