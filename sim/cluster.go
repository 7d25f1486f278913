package sim

import (
	"errors"
	"fmt"
)

// ErrBadCluster reports a cluster the engine cannot run.
var ErrBadCluster = errors.New("sim: bad cluster")

// Source and Sink are the coordinator's two ends in link endpoints.
const (
	Source = -1
	Sink   = -2
)

// Caps are a node's batch limits, the rules of Helix's execution policy:
// prefill requests join while their count and summed tokens stay within
// the caps, decode requests while their count and summed context do.
type Caps struct {
	PromptMaxRequests int
	PromptMaxTokens   int
	DecodeMaxTokens   int
	DecodeMaxContext  int
}

// LayerTimer gives the wall time in seconds of one transformer layer for a
// batch of prompt tokens and decode sequences.
type LayerTimer interface {
	LayerTime(promptTokens, decodeTokens int) float64
}

// NodeSpec is one serving node of a simulated cluster.
type NodeSpec struct {
	Name       string
	GPU        string
	First, End int // layers [First, End)
	Timer      LayerTimer
	Caps       Caps
	KVCapacity int64   // token×layer units
	NICIn      float64 // bytes/s
	NICOut     float64 // bytes/s
}

// LinkSpec is a directed link; From and To are node indices, Source or Sink.
type LinkSpec struct {
	From, To  int
	Bandwidth float64 // bytes/s
	Latency   float64 // s
	Jitter    float64 // s, uniform extra delay per transmission
}

// ModelWire is what a model puts on the wire.
type ModelWire struct {
	Layers          int
	TokenBytes      float64 // per token on coordinator links
	ActivationBytes float64 // per token between nodes, on top of TokenBytes
}

// Cluster is the static part of a simulation.
type Cluster struct {
	Model ModelWire
	Nodes []NodeSpec
	Links []LinkSpec
}

// Validate checks that the cluster's indices and ranges make sense.
func (c Cluster) Validate() error {
	if c.Model.Layers <= 0 {
		return fmt.Errorf("%w: model has %d layers", ErrBadCluster, c.Model.Layers)
	}
	for i, n := range c.Nodes {
		if n.First < 0 || n.End > c.Model.Layers || n.First >= n.End {
			return fmt.Errorf("%w: node %s holds [%d,%d) of %d layers", ErrBadCluster, n.Name, n.First, n.End, c.Model.Layers)
		}
		if n.Timer == nil {
			return fmt.Errorf("%w: node %d has no layer timer", ErrBadCluster, i)
		}
	}
	for _, l := range c.Links {
		for _, e := range []int{l.From, l.To} {
			if e != Source && e != Sink && (e < 0 || e >= len(c.Nodes)) {
				return fmt.Errorf("%w: link %d→%d names no node", ErrBadCluster, l.From, l.To)
			}
		}
		if l.Bandwidth <= 0 || l.Latency < 0 || l.From == Sink || l.To == Source {
			return fmt.Errorf("%w: link %d→%d: bandwidth %g, latency %g", ErrBadCluster, l.From, l.To, l.Bandwidth, l.Latency)
		}
	}
	return nil
}
