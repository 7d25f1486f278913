package consensus

import (
	"context"
	"fmt"
)

// The swarm's configuration in the replicated state: settings every
// member follows, so that one node's flags cannot quietly differ from the
// swarm's. Today it holds the spot-check rate (docs/trust.md). The leader
// appends its own configured value while the state has none (the
// founder's, in practice), and an operator may change it later through
// the leader (SetVerifyRate).

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

// VerifyRate is the swarm's spot-check rate; false when none was set.
func (s State) VerifyRate() (float64, bool) { return s.verifyRate, s.hasConfig }

func (s *State) swarmConfigSet(e SwarmConfigSet) error {
	switch {
	case !validRate(e.VerifyRate):
		return fmt.Errorf("%w: verify rate %v outside [0, 1]", ErrRejected, e.VerifyRate)
	case s.hasConfig && s.verifyRate == e.VerifyRate:
		return fmt.Errorf("%w: verify rate is already %v", ErrStale, e.VerifyRate)
	}
	s.verifyRate, s.hasConfig = e.VerifyRate, true
	return nil
}

// Snapshot sections after the manifest: a tag byte, then the section's
// fields; tags in increasing order, each once. A snapshot with sections
// and no manifest holds an empty byte string where the manifest goes, so
// that the two cannot be confused; one written before sections existed
// ends after the manifest (or without one), and still reads.
const sectionConfig = 1

// appendSections ends a snapshot with its trailing sections.
func appendSections(b []byte, s State) []byte {
	if !s.hasConfig {
		return b
	}
	b = append(b, sectionConfig)
	return appendF64(b, s.verifyRate)
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
			s.verifyRate, s.hasConfig = r, true
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
	if cur, ok := c.fsm.current().VerifyRate(); ok && cur == r {
		return nil
	}
	return c.apply(SwarmConfigSet{VerifyRate: r})
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
