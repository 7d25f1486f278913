package node

import (
	"fmt"
	"unicode/utf8"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/swarm"
)

// Engine is a backend that computes the node's layers in place of the
// pure-Go engine, such as engine/ggml (a nested module with cgo, which
// this package cannot import: its binary passes it in with WithEngine).
type Engine struct {
	// Name labels the backend and its device, e.g. "ggml-CUDA0": the
	// capabilities cache keys its measurements by it, the measured
	// hardware carries it, and the node's heartbeats announce it.
	Name string
	// Open loads layers [lo, hi) of the GGUF at path (a whole file or a
	// fetched slice). threads is the node's WithThreads (0: the
	// backend's default).
	Open func(path string, lo, hi, threads int) (engine.Stage, error)
	// Memory is the memory the backend computes in, in bytes (a GPU's
	// VRAM), which the node declares in place of its host's; 0: the
	// host's. WithMemory still caps it.
	Memory int64
	// Ranges: Open's stages can run part of their range on their own
	// weights (a method Sub(lo, hi int) (engine.Stage, error), as
	// engine/ggml's Stage has), so the node loads its whole range as one
	// stage, which such an engine runs as one graph, and a hop over part
	// of it runs through a view. Otherwise the node opens a stage per
	// layer.
	Ranges bool
}

// WithEngine computes the node's layers with e instead of the pure-Go
// engine. Not for a simulated model. The backend need not be
// bit-reproducible: the swarm shows each node's engine (its heartbeats
// carry e.Name) so that a client can tell.
func WithEngine(e Engine) Option {
	return func(c *config) error {
		switch {
		case e.Open == nil:
			return fmt.Errorf("%w: engine %q without an Open", ErrConfig, e.Name)
		case e.Name == "" || len(e.Name) > swarm.MaxEngineLen || !utf8.ValidString(e.Name):
			return fmt.Errorf("%w: engine name %q (1..%d bytes of UTF-8)", ErrConfig, e.Name, swarm.MaxEngineLen)
		case e.Name == engine.EngineGo || e.Name == engine.EngineSim:
			return fmt.Errorf("%w: engine name %q is the built-in engine's", ErrConfig, e.Name)
		case e.Memory < 0:
			return fmt.Errorf("%w: engine %q with negative memory", ErrConfig, e.Name)
		}
		c.engine = &e
		return nil
	}
}

// engineName is the label of what computes model m's layers.
func (m *model) engineName() string {
	switch {
	case m.info.Simulated:
		return engine.EngineSim
	case m.eng != nil:
		return m.eng.Name
	}
	return engine.EngineGo
}
