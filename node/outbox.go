package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/swarm"
)

// maxPeerQueue bounds the messages waiting for one peer. Past it a message
// fails at once (a forwarded step's entry hears CodeBusy), so a peer that
// stopped reading cannot grow the queue without bound.
const maxPeerQueue = 1024

// errQueueFull fails a message posted to a peer whose queue is full.
var errQueueFull = errors.New("node: send queue full")

// fifoOutbox sends the stage service's messages: one FIFO queue and one
// sender goroutine per peer, so that messages to one peer go out in the
// order they were posted (swarm keeps that order on the stream) and a slow
// peer delays only its own queue. A sender exists only while its queue
// holds messages; close stops taking messages and joins every sender.
// post never blocks, so the scheduler loop may call it.
type fifoOutbox struct {
	ctx  context.Context // ends the senders' sends; closed with the node
	send func(ctx context.Context, to peer.ID, m Message) error
	log  *zap.Logger
	max  int
	// resend: the waits before each resend to an entry (entryResend).
	resend []time.Duration

	mu     sync.Mutex
	queues map[peer.ID][]outMsg // a key is present while its sender runs
	closed bool
	wg     sync.WaitGroup
}

type outMsg struct {
	m      Message
	failed func(error) // nil: log the failure
	sent   func()      // nil: nothing to do once sent
}

func newOutbox(ctx context.Context, send func(context.Context, peer.ID, Message) error, log *zap.Logger) *fifoOutbox {
	return &fifoOutbox{ctx: ctx, send: send, log: log, max: maxPeerQueue, resend: entryResend, queues: map[peer.ID][]outMsg{}}
}

// post queues m for to; failed, if not nil, hears why it could not be
// sent. After close, messages are dropped.
func (o *fifoOutbox) post(to peer.ID, m Message, failed func(error)) {
	o.postMsg(to, outMsg{m: m, failed: failed})
}

func (o *fifoOutbox) postMsg(to peer.ID, msg outMsg) {
	if to == "" {
		return
	}
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	q, running := o.queues[to]
	if len(q) >= o.max {
		o.mu.Unlock()
		o.report(to, msg, fmt.Errorf("%w (%d messages for %s)", errQueueFull, len(q), to))
		return
	}
	o.queues[to] = append(q, msg)
	if !running {
		o.wg.Add(1) // under mu, before close can set closed and Wait
		go o.drain(to)
	}
	o.mu.Unlock()
}

// drain is the sender of one peer: it sends its queue in order and exits
// once the queue is empty. Once the node closes it drops what is left.
func (o *fifoOutbox) drain(to peer.ID) {
	defer o.wg.Done()
	for {
		o.mu.Lock()
		q := o.queues[to]
		if len(q) == 0 {
			delete(o.queues, to)
			o.mu.Unlock()
			return
		}
		next := q[0]
		q[0] = outMsg{}
		o.queues[to] = q[1:]
		o.mu.Unlock()
		if o.ctx.Err() != nil {
			continue
		}
		switch err := o.send(o.ctx, to, next.m); {
		case err != nil && o.ctx.Err() == nil:
			o.report(to, next, err)
		case err == nil && next.sent != nil:
			next.sent()
		}
	}
}

func (o *fifoOutbox) report(to peer.ID, msg outMsg, err error) {
	if msg.failed != nil {
		msg.failed(err)
		return
	}
	o.log.Debug("send failed", zap.Stringer("peer", to), zap.Error(err))
}

// close stops taking messages and waits for every sender to finish. The
// caller ends ctx first, so that senders drop what is still queued.
func (o *fifoOutbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
	o.wg.Wait()
}

// The scheduler's outbox.

// forward sends a step to the next hop. If it cannot be sent, the
// session's entry hears why: the next hop is unreachable, or our own
// frame is at fault.
func (o *fifoOutbox) forward(to peer.ID, s *Step) {
	o.post(to, s, func(err error) {
		o.log.Info("cannot forward to the next hop", zap.Stringer("next", to), zap.Stringer("session", s.Session), zap.Error(err))
		e := &ErrorMsg{Session: s.Session, Code: CodeUnreachable, Peer: to, Text: err.Error()}
		switch {
		case errors.Is(err, swarm.ErrFrameTooLarge) || errors.Is(err, ErrBadFrame):
			e.Code, e.Peer = CodeInternal, "" // our frame, not the next hop, is at fault
		case errors.Is(err, errQueueFull):
			e.Code = CodeBusy
		}
		o.toEntry(s.Entry, e, 0)
	})
}

// entryResend are the waits before resending a token or an error that
// could not be sent to the entry, which waits for it: without a resend
// the entry hears nothing until its step timeout (20 s by default) and
// then replays. The usual cause is passing: a dial refused by a relay
// that has not yet heard a rejoined entry, and go-libp2p's dial backoff
// after it, which the entry's next heartbeat clears (swarm, nat.go).
// About 6 s in all, well inside the step timeout.
var entryResend = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
	800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond}

// toEntry posts m, the try-th time, to the entry to, resending it after
// a failure up to len(o.resend) times.
func (o *fifoOutbox) toEntry(to peer.ID, m Message, try int) {
	msg := outMsg{m: m}
	if try > 0 {
		msg.sent = func() {
			o.log.Info("reached the entry after resending", zap.Stringer("entry", to),
				zap.String("message", fmt.Sprintf("%T", m)), zap.Int("resends", try))
		}
	}
	msg.failed = func(err error) {
		if try >= len(o.resend) || errors.Is(err, errQueueFull) {
			o.log.Info("cannot reach the entry; message dropped", zap.Stringer("entry", to),
				zap.String("message", fmt.Sprintf("%T", m)), zap.Int("tries", try+1), zap.Error(err))
			return
		}
		o.log.Debug("cannot reach the entry; resending", zap.Stringer("entry", to), zap.Int("try", try+1), zap.Error(err))
		time.AfterFunc(o.resend[try], func() {
			if o.ctx.Err() == nil {
				o.toEntry(to, m, try+1)
			}
		})
	}
	o.postMsg(to, msg)
}

func (o *fifoOutbox) token(to peer.ID, t *Token) { o.toEntry(to, t, 0) }

func (o *fifoOutbox) fail(to peer.ID, e *ErrorMsg) { o.toEntry(to, e, 0) }

func (o *fifoOutbox) receipt(to peer.ID, r *ReceiptMsg) { o.post(to, r, nil) }
