package consensus

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/stratanet/strata/layers"
)

// The swarm's configuration in the replicated state: settings every
// member follows, so that one node's flags cannot quietly differ from the
// swarm's. It holds the spot-check rate (docs/trust.md, SwarmConfigSet)
// and the planner's mean session length (SessionTokensSet). Each has its
// own event, so that each is set or not on its own, and a log written
// before the second existed reads unchanged. The leader appends its own
// configured values while the state has none (the founder's, in
// practice), and an operator may change them later through the leader
// (SetVerifyRate, SetSessionTokens).

// KindSwarmConfigSet is the kind of SwarmConfigSet. It stands apart from
// the kinds of events.go, as KindManifestPublished does.
const KindSwarmConfigSet Kind = 13

// SwarmConfigSet: the swarm's spot-check rate is now VerifyRate, the
// share of token boundaries at which an entry checks one hop (0 to 1).
type SwarmConfigSet struct {
	VerifyRate float64
}

// Kind implements Event.
func (SwarmConfigSet) Kind() Kind { return KindSwarmConfigSet }

func (e SwarmConfigSet) appendTo(b []byte) []byte { return appendF64(b, e.VerifyRate) }

func decodeSwarmConfigSet(d decoder) SwarmConfigSet {
	e := SwarmConfigSet{VerifyRate: d.F64("verify rate")}
	if d.Err() == nil && !validRate(e.VerifyRate) {
		d.Fail("verify rate %v outside [0, 1]", e.VerifyRate)
	}
	return e
}

// validRate: a share in [0, 1] (NaN is not).
func validRate(r float64) bool { return r >= 0 && r <= 1 }

// SwarmConfig is the swarm's configuration as the replicated state
// holds it: each setting, and whether it was set.
type SwarmConfig struct {
	verifyRate       float64
	hasRate          bool
	sessionTokens    int
	hasSessionTokens bool
}

// SwarmConfig is the swarm's configuration.
func (s State) SwarmConfig() SwarmConfig { return s.config }

// VerifyRate is the swarm's spot-check rate; false when none was set.
func (c SwarmConfig) VerifyRate() (float64, bool) { return c.verifyRate, c.hasRate }

func (f fold) swarmConfigSet(e SwarmConfigSet) error {
	s := f.s
	switch {
	case !validRate(e.VerifyRate):
		return fmt.Errorf("%w: verify rate %v outside [0, 1]", ErrRejected, e.VerifyRate)
	case s.config.hasRate && s.config.verifyRate == e.VerifyRate:
		return fmt.Errorf("%w: verify rate is already %v", ErrStale, e.VerifyRate)
	}
	s.config.verifyRate, s.config.hasRate = e.VerifyRate, true
	return nil
}

// KindSessionTokensSet is the kind of SessionTokensSet.
const KindSessionTokensSet Kind = 15

// MaxSessionTokens bounds SessionTokensSet.Tokens: 1Mi tokens per session
// is beyond any context served today, and keeps the planner's arithmetic
// far from overflow.
const MaxSessionTokens = 1 << 20

// SessionTokensSet: the swarm's planner now assumes sessions of Tokens
// tokens on average, prompt plus output, and caps each node's rate by the
// sessions of that length its KV memory holds
// (layers.CostParams.SessionTokens); 0: no such cap.
type SessionTokensSet struct {
	Tokens int
}

// Kind implements Event.
func (SessionTokensSet) Kind() Kind { return KindSessionTokensSet }

// appendTo writes a negative count as a huge one, which decoding (and so
// MarshalRecord) refuses.
func (e SessionTokensSet) appendTo(b []byte) []byte {
	return binary.AppendUvarint(b, uint64(e.Tokens))
}

func decodeSessionTokensSet(d decoder) SessionTokensSet {
	return SessionTokensSet{Tokens: int(d.Uvarint("session tokens", MaxSessionTokens))}
}

// validSessionTokens: 0 (off) to MaxSessionTokens.
func validSessionTokens(n int) bool { return n >= 0 && n <= MaxSessionTokens }

// SessionTokens is the mean session length the swarm plans with (0: no
// KV cap); false when none was set.
func (c SwarmConfig) SessionTokens() (int, bool) { return c.sessionTokens, c.hasSessionTokens }

// PlanParams is p with the swarm's session length in place of p's, when
// the state has one: what the leader plans with.
func (c SwarmConfig) PlanParams(p layers.CostParams) layers.CostParams {
	if c.hasSessionTokens {
		p.SessionTokens = c.sessionTokens
	}
	return p
}

func (f fold) sessionTokensSet(e SessionTokensSet) error {
	s := f.s
	switch {
	case !validSessionTokens(e.Tokens):
		return fmt.Errorf("%w: session tokens %d outside [0, %d]", ErrRejected, e.Tokens, MaxSessionTokens)
	case s.config.hasSessionTokens && s.config.sessionTokens == e.Tokens:
		return fmt.Errorf("%w: session tokens are already %d", ErrStale, e.Tokens)
	}
	s.config.sessionTokens, s.config.hasSessionTokens = e.Tokens, true
	return nil
}

// Snapshot sections after the manifest: a tag byte, then the section's
// fields; tags in increasing order, each once. A snapshot with sections
// and no manifest holds an empty byte string where the manifest goes, so
// that the two cannot be confused; one written before sections existed
// ends after the manifest (or without one), and still reads.
const (
	sectionConfig        = 1 // the verify rate
	sectionSessionTokens = 2
	sectionStewards      = 3 // stewards.go
)

// hasSections: the snapshot ends with trailing sections.
func hasSections(s State) bool {
	return s.config.hasRate || s.config.hasSessionTokens || !s.stewards.Empty()
}

// appendSections ends a snapshot with its trailing sections.
func appendSections(b []byte, s State) []byte {
	if s.config.hasRate {
		b = append(b, sectionConfig)
		b = appendF64(b, s.config.verifyRate)
	}
	if s.config.hasSessionTokens {
		b = append(b, sectionSessionTokens)
		b = binary.AppendUvarint(b, uint64(s.config.sessionTokens))
	}
	if !s.Stewards().Empty() {
		b = append(b, sectionStewards)
		b = appendStewardsSection(b, s)
	}
	return b
}

// decodeSections reads the sections after the manifest.
func decodeSections(d decoder, s *State) {
	last := 0
	for d.Err() == nil && d.Len() > 0 {
		tag := int(d.U8("section"))
		if d.Err() != nil {
			return
		}
		if tag <= last {
			d.Fail("section %d after %d", tag, last)
			return
		}
		last = tag
		switch tag {
		case sectionConfig:
			r := d.F64("verify rate")
			if d.Err() == nil && !validRate(r) {
				d.Fail("verify rate %v outside [0, 1]", r)
				return
			}
			s.config.verifyRate, s.config.hasRate = r, true
		case sectionSessionTokens:
			n := int(d.Uvarint("session tokens", MaxSessionTokens))
			if d.Err() != nil {
				return
			}
			s.config.sessionTokens, s.config.hasSessionTokens = n, true
		case sectionStewards:
			decodeStewardsSection(d, s)
		default:
			d.Fail("unknown section %d", tag)
			return
		}
	}
}

// SetVerifyRate sets the swarm's spot-check rate. Only the leader
// appends it (ErrNotLeader elsewhere): the rate is the swarm operator's
// choice, not a request any member may make. Setting the rate it already
// has is not an error.
func (c *Consensus) SetVerifyRate(ctx context.Context, r float64) error {
	if !validRate(r) {
		return fmt.Errorf("%w: verify rate %v outside [0, 1]", ErrRejected, r)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !c.IsLeader() {
		return ErrNotLeader
	}
	if cur, ok := c.fsm.current().SwarmConfig().VerifyRate(); ok && cur == r {
		return nil
	}
	return c.rn.apply(SwarmConfigSet{VerifyRate: r})
}

// WithVerifyRate is the spot-check rate this node gives the swarm while
// it leads one whose state has none: the founder's sets the swarm's
// first rate. Without it the node sets none.
func WithVerifyRate(r float64) Option {
	return func(c *config) error {
		if !validRate(r) {
			return fmt.Errorf("%w: verify rate %v outside [0, 1]", ErrConfig, r)
		}
		c.verifyRate, c.hasVerifyRate = r, true
		return nil
	}
}

// SetSessionTokens sets the mean session length (prompt plus output
// tokens) the swarm's planner caps each node's KV memory by; 0 turns the
// cap off. As with SetVerifyRate, only the leader appends it
// (ErrNotLeader elsewhere), and setting the value it already has is not
// an error. The leader plans with it from the next decision on; the map
// changes when a rebalance or a repair says a new one pays.
func (c *Consensus) SetSessionTokens(ctx context.Context, n int) error {
	if !validSessionTokens(n) {
		return fmt.Errorf("%w: session tokens %d outside [0, %d]", ErrRejected, n, MaxSessionTokens)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !c.IsLeader() {
		return ErrNotLeader
	}
	if cur, ok := c.fsm.current().SwarmConfig().SessionTokens(); ok && cur == n {
		return nil
	}
	if err := c.rn.apply(SessionTokensSet{Tokens: n}); err != nil {
		return err
	}
	kick(c.kickL)
	return nil
}

// WithPlanSessionTokens is the mean session length this node gives the
// swarm's planner while it leads one whose state has none: the founder's
// sets the swarm's first. 0 (the default) sets none, and the leader plans
// with its own cost parameters (WithPlanner), which by default have no KV
// cap.
func WithPlanSessionTokens(n int) Option {
	return func(c *config) error {
		if !validSessionTokens(n) {
			return fmt.Errorf("%w: session tokens %d outside [0, %d]", ErrConfig, n, MaxSessionTokens)
		}
		c.sessionTokens = n
		return nil
	}
}
