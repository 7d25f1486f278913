package routing

import (
	"fmt"
	"math"
	"time"

	"github.com/stratanet/strata/layers"
)

// Weights scale the built-in scorers. With every weight 1 a path's cost is
// the estimated time of the request in seconds.
type Weights struct {
	Latency  float64
	Load     float64
	Locality float64 // also scales the round trips between hops
}

// Config holds the router's tunables. The zero value of a field is not a
// default: start from DefaultConfig.
type Config struct {
	Weights Weights

	// Slack is how much costlier than the best a path may be and still be
	// chosen: Route picks at random, weighted towards lower cost, among
	// paths within (1+Slack)·best. Zero always takes the best path, which
	// herds every entry onto it between load updates.
	Slack float64
	// Candidates > 1 makes Route find that many diverse paths (Paths) and
	// pick among them with PickWithin. The default (0) gets the same
	// guarantee from one DP with seeded noise on node costs, which is
	// several times cheaper.
	Candidates int

	// DefaultOutputTokens stands in for a request's MaxTokens when it has
	// none.
	DefaultOutputTokens int

	// StaleAfter is the age past which a node's load figures count as stale;
	// StalePenalty is the fraction added to a stale node's costs. Stale
	// figures are still used: treating them as overload turns a gossip
	// hiccup into refused requests.
	StaleAfter   time.Duration
	StalePenalty float64

	// KVPenalty is charged per pass, in seconds, for a hop on a node whose
	// free KV cache cannot hold the session: such a node cannot admit it
	// until other sessions end, so the charge dwarfs any real per-token
	// latency and the node is used only where nothing else serves.
	KVPenalty float64

	// UnknownRTT is the round trip assumed between two regions with no
	// measured link at all. It must be conservative: a zero estimate would
	// make unmeasured links look free.
	UnknownRTT float64
	// MinRTT floors every round trip between different nodes.
	MinRTT float64
	// MaxRTT caps measured round trips, so that one absurd sample cannot
	// swamp its region's estimate.
	MaxRTT float64
	// HopOverhead is the fixed cost of one crossing per step: framing,
	// scheduling and a stream write on each side.
	HopOverhead float64
	// RelayDelay is added per step to each crossing into or out of a
	// relayed node whose round trips nobody measured (a measured one went
	// through the relay and carries its detour), and RelayBandwidth
	// (bytes/s) carries its activations unless the node's own
	// NodeState.RelayBandwidth was measured: a circuit relay is a
	// volunteer's shared uplink, not a direct path.
	RelayDelay     float64
	RelayBandwidth float64

	// DefaultHardware stands in for a node whose device is unknown.
	DefaultHardware layers.Hardware
}

// DefaultConfig is a 10% slack, 256 output tokens, load figures stale after
// 3 s (six missed heartbeats) and then charged 25% more, 1 s per pass for a
// hop without cache (Petals charges 10 s per request on its per-token
// scale), 100 ms for a round trip nobody measured
// (a transcontinental one), 25 ms and 10 Mbit/s for relays, 0.5 ms per
// crossing, and Parallax's figures for an unknown GPU (600 GB/s, 50 TFLOPS).
func DefaultConfig() Config {
	return Config{
		Weights:             Weights{Latency: 1, Load: 1, Locality: 1},
		Slack:               0.1,
		DefaultOutputTokens: 256,
		StaleAfter:          3 * time.Second,
		StalePenalty:        0.25,
		KVPenalty:           1,
		UnknownRTT:          0.1,
		MinRTT:              50e-6,
		MaxRTT:              10,
		HopOverhead:         0.5e-3,
		RelayDelay:          0.025,
		RelayBandwidth:      10 * layers.Gbit / 1000,
		DefaultHardware: layers.Hardware{Name: "unknown", MemoryBytes: 24 * layers.GiB,
			MemBandwidth: 600 * layers.GB, TFLOPS: 50},
	}
}

func (c Config) validate() error {
	finite := func(name string, v float64, positive bool) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (positive && v == 0) || v > maxSeconds {
			return fmt.Errorf("%w: %s = %v", ErrConfig, name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"weights.latency", c.Weights.Latency, false},
		{"weights.load", c.Weights.Load, false},
		{"weights.locality", c.Weights.Locality, false},
		{"slack", c.Slack, false},
		{"stale_penalty", c.StalePenalty, false},
		{"kv_penalty", c.KVPenalty, false},
		{"unknown_rtt", c.UnknownRTT, true},
		{"min_rtt", c.MinRTT, true},
		{"max_rtt", c.MaxRTT, true},
		{"hop_overhead", c.HopOverhead, false},
		{"relay_delay", c.RelayDelay, false},
	} {
		if err := finite(f.name, f.v, f.positive); err != nil {
			return err
		}
	}
	switch {
	case !(c.RelayBandwidth > 0) || math.IsInf(c.RelayBandwidth, 0):
		return fmt.Errorf("%w: relay_bandwidth = %v", ErrConfig, c.RelayBandwidth)
	case c.MinRTT > c.MaxRTT || c.UnknownRTT < c.MinRTT:
		return fmt.Errorf("%w: need min_rtt ≤ unknown_rtt and min_rtt ≤ max_rtt", ErrConfig)
	case c.DefaultOutputTokens < 0 || c.DefaultOutputTokens > maxTokens:
		return fmt.Errorf("%w: default_output_tokens = %d", ErrConfig, c.DefaultOutputTokens)
	case c.Candidates < 0 || c.Candidates > 64:
		return fmt.Errorf("%w: candidates = %d (0..64)", ErrConfig, c.Candidates)
	case c.StaleAfter < 0:
		return fmt.Errorf("%w: stale_after = %v", ErrConfig, c.StaleAfter)
	}
	if err := c.DefaultHardware.Validate(); err != nil {
		return fmt.Errorf("%w: default hardware: %w", ErrConfig, err)
	}
	return nil
}

// Option configures a Router.
type Option func(*Router) error

// WithModel sets the model whose layers are routed. A router needs a model,
// from this option or WithFleet.
func WithModel(m layers.ModelSpec) Option {
	return func(r *Router) error {
		if m.Layers <= 0 {
			return fmt.Errorf("%w: model has no layers", ErrConfig)
		}
		r.model = m
		return nil
	}
}

// WithCostParams sets the cost model's workload assumptions (context per
// session, batch cap). The default is layers.DefaultCostParams.
func WithCostParams(p layers.CostParams) Option {
	return func(r *Router) error {
		r.params = p
		return nil
	}
}

// WithFleet takes the model and cost parameters from a fleet, and each
// member's profile stands in for a node state that does not say its device
// (it also gives the node's batch slots for its range).
func WithFleet(f *layers.Fleet) Option {
	return func(r *Router) error {
		if f == nil {
			return fmt.Errorf("%w: nil fleet", ErrConfig)
		}
		r.fleet = f
		r.model = f.Model
		r.params = f.Params
		return nil
	}
}

// WithConfig replaces the whole configuration.
func WithConfig(c Config) Option {
	return func(r *Router) error {
		r.cfg = c
		return nil
	}
}

// WithWeights sets the built-in scorers' weights.
func WithWeights(w Weights) Option {
	return func(r *Router) error {
		r.cfg.Weights = w
		return nil
	}
}

// WithSlack sets Config.Slack.
func WithSlack(s float64) Option {
	return func(r *Router) error {
		r.cfg.Slack = s
		return nil
	}
}

// WithFilters replaces the filters (DefaultFilters unless set).
func WithFilters(fs ...Filter) Option {
	return func(r *Router) error {
		for _, f := range fs {
			if f == nil {
				return fmt.Errorf("%w: nil filter", ErrConfig)
			}
		}
		r.filters = append([]Filter(nil), fs...)
		return nil
	}
}

// WithScorer adds a scorer with its weight to the built-in ones; its costs
// show in Breakdown.Other.
func WithScorer(s Scorer, weight float64) Option {
	return func(r *Router) error {
		if s == nil || math.IsNaN(weight) || math.IsInf(weight, 0) || weight < 0 {
			return fmt.Errorf("%w: scorer with weight %v", ErrConfig, weight)
		}
		r.extra = append(r.extra, weighted{s: s, w: weight, kind: kindOther})
		return nil
	}
}
