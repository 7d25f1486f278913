package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/routing"
)

// Why a node has no committed map to route on, as a caller is told. While
// a map may still come (the node starting or joining, the leader planning
// the first map, the first map warming up) the error wraps
// routing.ErrNoPath and a request waits in the entry's queue. When the
// members a plan may place cannot hold every layer between them, no map
// can come until more nodes join: the error is an *uncoveredError
// (ErrUncovered, ErrNoCapacity), which the queue does not wait on, so a
// request is refused at once, naming the layers served by no node.

// uncoveredRetry is the Retry-After of an ErrUncovered refusal: a node
// joining takes seconds to be placed and load its layers.
const uncoveredRetry = 5 * time.Second

// uncoveredError is ErrUncovered with what the members can hold, and,
// for a committed map whose holders left, the layers they left.
type uncoveredError struct {
	sf   layers.Shortfall
	gaps []layers.Range // nil: no map committed (sf.Gap says which)
}

func (e *uncoveredError) Error() string {
	if len(e.gaps) > 0 {
		gs := make([]string, len(e.gaps))
		for i, g := range e.gaps {
			gs[i] = g.String()
		}
		return fmt.Sprintf("%s: layers %s are served by no node, since their holders left the swarm and the members cannot take them over; %s",
			ErrUncovered.Error(), strings.Join(gs, ", "), waitText(e.sf))
	}
	return ErrUncovered.Error() + ": " + shortfallText(e.sf)
}

func (e *uncoveredError) Unwrap() []error { return []error{ErrUncovered, ErrNoCapacity} }

// shortfallText says which layers no node serves, why, and what to do.
func shortfallText(sf layers.Shortfall) string {
	if len(sf.Caps) > 0 && slices.Max(sf.Caps) == 0 {
		return fmt.Sprintf("layers %v are served by no node, since no node can hold even one layer of the model "+
			"(a layer takes %s with one session's KV cache; the largest node offers %s); "+
			"the swarm waits for a node with more memory: give the node more --memory, or start one on a larger machine",
			sf.Gap, store.HumanBytes(int64(sf.LayerBytes)), store.HumanBytes(int64(sf.MaxMemory)))
	}
	return fmt.Sprintf("layers %v are served by no node; %s", sf.Gap, waitText(sf))
}

// waitText says what the swarm waits for and what to do.
func waitText(sf layers.Shortfall) string {
	return fmt.Sprintf("the swarm waits for more nodes (%s; the model has %d): "+
		"start another node with --bootstrap (an address a node of this swarm printed at its start), or let the nodes hold more layers (--max-layers, --memory)",
		capsText(sf.Caps), sf.Layers)
}

// capsText is "1 node, max 3 layers each", or "3 nodes, max 4+2+2 layers"
// when they differ.
func capsText(caps []int) string {
	switch {
	case len(caps) == 0:
		return "no node may hold layers now: each is draining, dead or left out after missing a warmup"
	case len(caps) == 1:
		return fmt.Sprintf("1 node, max %d layers each", caps[0])
	}
	c := slices.Clone(caps)
	slices.SortFunc(c, func(a, b int) int { return b - a })
	if c[0] == c[len(c)-1] {
		return fmt.Sprintf("%d nodes, max %d layers each", len(c), c[0])
	}
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = strconv.Itoa(v)
	}
	return fmt.Sprintf("%d nodes, max %s layers", len(c), strings.Join(parts, "+"))
}

// coverage knows whether the members can hold every layer: it says why
// the path finder has no map to route on (noMap), refuses at once a
// committed map whose holders left for good (uncoveredMap), and logs
// when the swarm cannot serve for want of nodes (watch). It reads the
// consensus replica, changes nothing, and knows nothing of routing.
type coverage struct {
	self  peer.ID
	cons  *atomic.Pointer[consensus.Consensus] // nil inside: static map, or starting
	ready func() error                         // the node's readiness (SwarmSnapshot.RouteErr), which watch logs the verdict of
	clock clockwork.Clock
	log   *zap.Logger
}

// noMap says why there is no committed map (see above).
func (v *coverage) noMap() error {
	const none = "no layer map committed yet"
	c := v.cons.Load()
	if c == nil {
		return fmt.Errorf("%w: %s: the node is starting", routing.ErrNoPath, none)
	}
	s := c.State()
	if p, ok := s.Pending(); ok {
		return fmt.Errorf("%w: %s: the first map (epoch %d) is warming up, %d node(s) still loading their layers",
			routing.ErrNoPath, none, p.Map.Epoch, len(p.Waiting()))
	}
	if !s.IsMember(v.self.String()) {
		return fmt.Errorf("%w: %s: this node has not joined the swarm yet", routing.ErrNoPath, none)
	}
	if sf, err := c.Shortfall(); err == nil && sf.Short() {
		return &retryAfter{err: &uncoveredError{sf: sf}, after: uncoveredRetry}
	}
	if _, ok := c.Leader(); !ok {
		return fmt.Errorf("%w: %s: no leader elected yet", routing.ErrNoPath, none)
	}
	return fmt.Errorf("%w: %s: the leader is planning the first one", routing.ErrNoPath, none)
}

// uncoveredMap is the ErrUncovered refusal for committed map m when the
// stages of its current members leave layers without a node and the
// members cannot hold every layer between them: the holders left, and no
// repair can close the gap until more nodes join. nil otherwise (a
// holder only dead or suspect may come back; a repair may be warming up).
func (v *coverage) uncoveredMap(m layers.LayerMap) error {
	c := v.cons.Load()
	if c == nil || m.Layers == 0 {
		return nil
	}
	s := c.State()
	if _, ok := s.Pending(); ok {
		return nil
	}
	kept := m
	for _, id := range m.Nodes() {
		if !s.IsMember(id) {
			kept = kept.Without(id)
		}
	}
	if kept.Covers() {
		return nil
	}
	sf, err := c.Shortfall()
	if err != nil || !sf.Short() {
		return nil
	}
	return &retryAfter{err: &uncoveredError{sf: sf, gaps: kept.Gaps()}, after: uncoveredRetry}
}

// watch logs, once per change, that the swarm cannot serve for
// want of nodes (ErrUncovered, with the layers no node holds and what to
// do), and that it has enough again: a user watching a node's log sees
// why it waits, where nothing else would say so.
func (v *coverage) watch(ctx context.Context, every time.Duration) {
	t := v.clock.NewTicker(every)
	defer t.Stop()
	last := ""
	for {
		why := ""
		if err := v.ready(); errors.Is(err, ErrUncovered) {
			why = strings.TrimPrefix(err.Error(), "node: ")
		}
		switch {
		case why == last:
		case why != "":
			v.log.Warn("the swarm cannot serve yet", zap.String("why", why))
		default:
			v.log.Info("the swarm's nodes can hold every layer now")
		}
		last = why
		select {
		case <-ctx.Done():
			return
		case <-t.Chan():
		}
	}
}
