package swarm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/peerlimit"
)

// HeartbeatTopic is the swarm's heartbeat topic.
func HeartbeatTopic(swarm string) string { return "strata/" + swarm + "/heartbeat/1" }

// MapTopic is the swarm's map-notice topic.
func MapTopic(swarm string) string { return "strata/" + swarm + "/map/1" }

// MapHandler receives map notices. data belongs to the handler.
type MapHandler func(from peer.ID, data []byte)

// CheckHeartbeat is the heartbeat validator's verdict on data signed by
// origin and received at now: the decoded heartbeat, or an error wrapping
// ErrHeartbeatSize, ErrHeartbeatSchema, ErrHeartbeatSender or
// ErrHeartbeatClock.
func CheckHeartbeat(origin peer.ID, data []byte, now time.Time, maxSkew time.Duration) (*Heartbeat, error) {
	hb, err := DecodeHeartbeat(data)
	if err != nil {
		return nil, err
	}
	if hb.NodeID != origin {
		return nil, fmt.Errorf("heartbeat for %s signed by %s: %w", hb.NodeID, origin, ErrHeartbeatSender)
	}
	if skew := hb.Timestamp.Sub(now); skew > maxSkew || skew < -maxSkew {
		return nil, fmt.Errorf("heartbeat timestamp %v off by %v (max %v): %w",
			hb.Timestamp.UTC(), skew, maxSkew, ErrHeartbeatClock)
	}
	return hb, nil
}

func reasonOf(err error) rejectReason {
	switch {
	case errors.Is(err, ErrHeartbeatSize):
		return rejectOversize
	case errors.Is(err, ErrHeartbeatSender):
		return rejectSender
	case errors.Is(err, ErrHeartbeatClock):
		return rejectClock
	}
	return rejectSchema
}

// gossip runs the two GossipSub topics. Messages are signed by their
// origin (strict signing, so pubsub drops unsigned and badly signed ones
// before our validators see them) and validated before delivery.
type gossip struct {
	h        *Host
	ps       *pubsub.PubSub
	hb, mp   *pubsub.Topic
	hbSub    *pubsub.Subscription
	mpSub    *pubsub.Subscription
	onMap    atomic.Pointer[MapHandler]
	rotation int
	// hbLimit holds each origin to heartbeatBurst heartbeats at once and
	// heartbeatRate per interval after: an honest node sends one per
	// interval, so only a flood is held back, and its heartbeats past
	// the rate are ignored (not rejected: the peers that forwarded them
	// did nothing wrong, and pubsub would score them down for it).
	hbLimit *peerlimit.Limiter
}

// heartbeatRate is how many heartbeats an origin may send per heartbeat
// interval (ours: the swarm's nodes run one setting), heartbeatBurst how
// many at once: room for jitter and a restart, little for a flood.
const (
	heartbeatRate  = 2
	heartbeatBurst = 5
)

func newGossip(ctx context.Context, h *Host) (*gossip, error) {
	maxMsg := max(h.cfg.maxMapNotice, MaxHeartbeatSize) + 4096
	ps, err := pubsub.NewGossipSub(ctx, h.h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMaxMessageSize(maxMsg),
	)
	if err != nil {
		return nil, fmt.Errorf("gossipsub: %w", err)
	}
	g := &gossip{h: h, ps: ps,
		hbLimit: peerlimit.New(heartbeatRate/h.cfg.hbInterval.Seconds(), heartbeatBurst, maxRejectPeers)}
	hbName, mpName := HeartbeatTopic(h.cfg.swarmName), MapTopic(h.cfg.swarmName)
	if err := ps.RegisterTopicValidator(hbName, pubsub.ValidatorEx(g.validateHeartbeat), pubsub.WithValidatorInline(true)); err != nil {
		return nil, fmt.Errorf("heartbeat validator: %w", err)
	}
	if err := ps.RegisterTopicValidator(mpName, pubsub.ValidatorEx(g.validateMap), pubsub.WithValidatorInline(true)); err != nil {
		return nil, fmt.Errorf("map validator: %w", err)
	}
	if g.hb, err = ps.Join(hbName); err != nil {
		return nil, fmt.Errorf("join %s: %w", hbName, err)
	}
	if g.mp, err = ps.Join(mpName); err != nil {
		return nil, fmt.Errorf("join %s: %w", mpName, err)
	}
	if g.hbSub, err = g.hb.Subscribe(); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", hbName, err)
	}
	if g.mpSub, err = g.mp.Subscribe(); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", mpName, err)
	}
	return g, nil
}

func (g *gossip) validateHeartbeat(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	origin := msg.GetFrom()
	// The rate first: a flood costs a map lookup, not a decode.
	if !g.hbLimit.Allow(origin, g.h.cfg.clock.Now()) {
		g.h.table.reject(origin, rejectRate)
		return pubsub.ValidationIgnore
	}
	hb, err := CheckHeartbeat(origin, msg.Data, g.h.cfg.clock.Now(), g.h.cfg.maxSkew)
	if err != nil {
		why := reasonOf(err)
		g.h.table.reject(origin, why)
		g.h.log.Debug("heartbeat rejected", zap.Stringer("origin", origin),
			zap.Stringer("via", msg.ReceivedFrom), zap.Stringer("reason", why), zap.Error(err))
		return pubsub.ValidationReject
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

func (g *gossip) validateMap(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	if len(msg.Data) > g.h.cfg.maxMapNotice {
		g.h.table.reject(msg.GetFrom(), rejectOversize)
		return pubsub.ValidationReject
	}
	return pubsub.ValidationAccept
}

// readHeartbeats feeds accepted heartbeats to the peer table.
func (g *gossip) readHeartbeats(ctx context.Context) {
	for {
		msg, err := g.hbSub.Next(ctx)
		if err != nil {
			return
		}
		if msg.Local {
			continue
		}
		if hb, ok := msg.ValidatorData.(*Heartbeat); ok {
			// Before the table: whoever sees the heartbeat there may dial
			// the peer at once (nat.go, dial backoff).
			g.h.ClearDialBackoff(hb.NodeID)
			g.h.table.heard(hb)
		}
	}
}

func (g *gossip) readMaps(ctx context.Context) {
	for {
		msg, err := g.mpSub.Next(ctx)
		if err != nil {
			return
		}
		if msg.Local {
			continue
		}
		if fn := g.onMap.Load(); fn != nil {
			(*fn)(msg.GetFrom(), msg.Data)
		}
	}
}

// publishHeartbeats sends a heartbeat every interval, with ±10% jitter so
// that hosts started together do not beat in lockstep.
func (g *gossip) publishHeartbeats(ctx context.Context) {
	iv := g.h.cfg.hbInterval
	t := g.h.cfg.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
		if err := g.publishHeartbeat(ctx); err != nil && ctx.Err() == nil {
			g.h.log.Warn("heartbeat not sent", zap.Error(err))
		}
		jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(iv))
		t.Reset(iv + jitter)
	}
}

func (g *gossip) heartbeat() *Heartbeat {
	hb := &Heartbeat{NodeID: g.h.h.ID(), Status: g.h.beat.Status(), Timestamp: g.h.cfg.clock.Now()}
	if g.h.links.relayedOnly() {
		hb.Flags |= FlagRelayed
	}
	// Rotate through the measured peers so that, with more than
	// MaxRTTSamples of them, every link is gossiped now and then.
	var samples []RTTSample
	for _, p := range g.h.table.Snapshot() {
		if p.RTT > 0 && (p.Liveness == Alive || p.Liveness == Suspect) {
			samples = append(samples, RTTSample{Peer: p.ID, RTT: p.RTT})
		}
	}
	if n := len(samples); n > MaxRTTSamples {
		g.rotation = (g.rotation + MaxRTTSamples) % n
		samples = append(samples[g.rotation:], samples[:g.rotation]...)[:MaxRTTSamples]
	}
	hb.RTTs = samples
	hb.Vouches = g.h.beat.nextVouches()
	return hb
}

func (g *gossip) publishHeartbeat(ctx context.Context) error {
	hb := g.heartbeat()
	data, err := hb.MarshalBinary()
	if err != nil {
		return err
	}
	if err := g.hb.Publish(ctx, data); err != nil {
		return err
	}
	g.h.beat.keepHeartbeat(hb)
	return nil
}

// PublishMapNotice gossips a map notice (an encoded LayerMap event; the
// swarm does not look inside). Like any first message on a fresh topic
// mesh it may reach nobody right after start, so publishers repeat
// notices until the map is acknowledged by other means.
func (bt *Beats) PublishMapNotice(ctx context.Context, data []byte) error {
	h := bt.h
	if len(data) > h.cfg.maxMapNotice {
		return fmt.Errorf("map notice of %d bytes (max %d): %w", len(data), h.cfg.maxMapNotice, ErrFrameTooLarge)
	}
	if err := h.gossip.mp.Publish(ctx, data); err != nil {
		return fmt.Errorf("publish map notice: %w", err)
	}
	return nil
}

// OnMapNotice sets the receiver of other nodes' map notices.
func (bt *Beats) OnMapNotice(fn MapHandler) {
	h := bt.h
	if fn == nil {
		h.gossip.onMap.Store(nil)
		return
	}
	h.gossip.onMap.Store(&fn)
}
