package node

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"
)

// stageService is the node's stage service: frames in on /strata/act/1,
// decoded and checked here, steps handed to the scheduler, tokens and
// errors to the entry role; and the outbox (outbox.go), which sends what
// the scheduler and the service produce, in order per peer, on senders
// the node joins. It depends on the swarm only for sending frames and on
// the entry only for delivering tokens and errors.
type stageService struct {
	ctx      context.Context // the node's: ends with Close
	self     peer.ID
	info     ModelInfo
	wire     *wirePicker // the dtype of the hidden states sent to each peer
	acts     actSender
	entry    tokenSink
	counters *counters
	clock    clockwork.Clock // stamps steps for the scheduler's expiry
	log      *zap.Logger

	sched *scheduler
	out   *fifoOutbox
}

// actSender sends activation frames (the swarm host).
type actSender interface {
	SendActivation(ctx context.Context, to peer.ID, frame []byte) error
}

// tokenSink takes the tokens and errors addressed to this node's entry
// role.
type tokenSink interface {
	onToken(from peer.ID, t *Token)
	onError(from peer.ID, e *ErrorMsg)
	onReceipt(from peer.ID, r *ReceiptMsg)
}

// sendTimeout bounds one send on the activation protocol.
const sendTimeout = 5 * time.Second

// onFrame is the swarm's activation handler. A frame that does not
// decode resets the stream (the sender is dropped) after a best-effort
// error reply; a frame that decodes but does not fit gets an error reply
// and the stream stays up. Other sessions are never touched.
func (n *stageService) onFrame(from peer.ID, frame []byte) error {
	msg, err := Decode(frame)
	if err != nil {
		c := n.counters.badFrame(from)
		if c <= maxBadReplies {
			n.log.Warn("bad activation frame; dropping the stream", zap.Stringer("peer", from), zap.Uint64("bad_frames", c), zap.Error(err))
			n.out.post(from, &ErrorMsg{Code: CodeBadFrame, Text: err.Error()}, nil)
		}
		return err
	}
	switch m := msg.(type) {
	case *Step:
		return n.onStep(from, m)
	case *Token:
		n.entry.onToken(from, m)
	case *ErrorMsg:
		n.entry.onError(from, m)
	case *Close:
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		defer cancel()
		_ = n.sched.submit(ctx, closeIn{from: from, sid: m.Session})
	case *Audit:
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		defer cancel()
		_ = n.sched.submit(ctx, auditIn{from: from, m: m})
	case *UpAudit:
		ctx, cancel := context.WithTimeout(n.ctx, time.Second)
		defer cancel()
		_ = n.sched.submit(ctx, upAuditIn{from: from, m: m})
	case *ReceiptMsg:
		n.entry.onReceipt(from, m)
	}
	return nil
}

// maxBadReplies bounds the error replies one peer gets for bad frames:
// past it, its streams are just dropped.
const maxBadReplies = 64

func (n *stageService) onStep(from peer.ID, m *Step) error {
	if err := n.checkStep(m); err != nil {
		c := n.counters.badFrame(from)
		n.log.Debug("refused step", zap.Stringer("peer", from), zap.Stringer("session", m.Session), zap.Error(err))
		if c > maxBadReplies {
			return err // drop the stream
		}
		to := m.Entry
		if to == "" || len(m.Hops) == 0 {
			to = from
		}
		n.out.post(to, &ErrorMsg{Session: m.Session, Code: CodeBadFrame, Text: err.Error()}, nil)
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, time.Second)
	defer cancel()
	if err := n.sched.submit(ctx, &stepIn{from: from, m: m, at: n.clock.Now()}); err != nil {
		n.out.post(m.Entry, &ErrorMsg{Session: m.Session, Code: CodeBusy, Text: "scheduler inbox full"}, nil)
	}
	return nil
}

// checkStep checks a step against the model and this node: everything
// that does not depend on session state (the scheduler checks that).
func (n *stageService) checkStep(m *Step) error {
	in := n.info
	if m.Hops[0].Peer != n.self {
		return fmt.Errorf("%w: step for %s delivered to %s", ErrBadFrame, m.Hops[0].Peer, n.self)
	}
	for i, h := range m.Hops {
		if h.To > in.Layers {
			return fmt.Errorf("%w: hop %d [%d, %d) beyond %d layers", ErrBadFrame, i, h.From, h.To, in.Layers)
		}
		if i > 0 && (m.Hops[i-1].To != h.From || m.Hops[i-1].Peer == h.Peer) {
			return fmt.Errorf("%w: hops %d and %d do not chain", ErrBadFrame, i-1, i)
		}
	}
	if m.Hops[len(m.Hops)-1].To != in.Layers && !m.Check {
		return fmt.Errorf("%w: the path ends at layer %d of %d", ErrBadFrame, m.Hops[len(m.Hops)-1].To, in.Layers)
	}
	if m.Pos+len(m.Tokens) > in.Context {
		return fmt.Errorf("%w: positions %d + %d beyond the context of %d", ErrBadFrame, m.Pos, len(m.Tokens), in.Context)
	}
	for _, t := range m.Tokens {
		if t < 0 || int(t) >= in.Vocab {
			return fmt.Errorf("%w: token %d outside the vocabulary of %d", ErrBadFrame, t, in.Vocab)
		}
	}
	if m.Skip < 0 || m.Skip >= len(m.Tokens) || (m.Skip > 0 && (m.Open == nil || m.Hops[0].From == 0)) {
		return fmt.Errorf("%w: skip %d of %d tokens", ErrBadFrame, m.Skip, len(m.Tokens))
	}
	if m.Hops[0].From == 0 {
		if m.Hidden != nil {
			return fmt.Errorf("%w: hidden states for the first layer, which takes tokens", ErrBadFrame)
		}
		return nil
	}
	if m.Hidden == nil {
		return fmt.Errorf("%w: no hidden states for layer %d", ErrBadFrame, m.Hops[0].From)
	}
	if m.Cols != in.Hidden || len(m.Hidden) != (len(m.Tokens)-m.Skip)*in.Hidden {
		return fmt.Errorf("%w: hidden states of shape %d × %d, want %d × %d", ErrBadFrame,
			len(m.Hidden)/max(m.Cols, 1), m.Cols, len(m.Tokens)-m.Skip, in.Hidden)
	}
	for _, v := range m.Hidden {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: non-finite hidden state", ErrBadFrame)
		}
	}
	return nil
}

// send delivers one message: to ourselves in-process, to others on the
// activation protocol.
func (n *stageService) send(ctx context.Context, to peer.ID, m Message) error {
	if to == n.self {
		switch m := m.(type) {
		case *Step:
			return n.onStep(n.self, m)
		case *Token:
			n.entry.onToken(n.self, m)
		case *ErrorMsg:
			n.entry.onError(n.self, m)
		case *Close:
			return n.sched.submit(ctx, closeIn{from: n.self, sid: m.Session})
		case *Audit:
			return n.sched.submit(ctx, auditIn{from: n.self, m: m})
		case *UpAudit:
			return n.sched.submit(ctx, upAuditIn{from: n.self, m: m})
		case *ReceiptMsg:
			n.entry.onReceipt(n.self, m)
		}
		return nil
	}
	if s, ok := m.(*Step); ok && s.Hidden != nil {
		// Rounded rows are not what the sender's chains cover: they go
		// unsigned, as f16 always has (sigframe.go). A row q8 cannot
		// carry (NaN, infinities) goes as float32, as a f32 link would.
		if dt := n.wire.pick(to); dt != DTypeF32 && (dt != DTypeQ8 || q8Check(s.Hidden) == nil) {
			c := *s
			c.DType, c.Sig = dt, nil
			m = &c
		}
	}
	b, err := Encode(make([]byte, 0, frameSize(m)), m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return n.acts.SendActivation(ctx, to, b)
}

func frameSize(m Message) int {
	if s, ok := m.(*Step); ok {
		return 64 + len(s.Hops)*48 + 4*len(s.Tokens) + 4*len(s.Hidden) + 64
	}
	return 64
}
