package engine

import "errors"

// Sentinel errors; every error the package returns wraps one of them, with
// the tensor or key at fault named in the message.
var (
	// ErrCorrupt reports a malformed or truncated model file, or one that
	// lacks a tensor or key the architecture needs.
	ErrCorrupt = errors.New("engine: corrupt model file")
	// ErrSplitPart reports a part of a split model (name-00001-of-0000N.gguf)
	// that is missing, unreadable, or belongs to another split, naming it.
	ErrSplitPart = errors.New("engine: bad split model part")
	// ErrUnsupportedArch reports a general.architecture we cannot run.
	ErrUnsupportedArch = errors.New("engine: unsupported architecture")
	// ErrUnsupportedType reports a tensor type we cannot compute with.
	ErrUnsupportedType = errors.New("engine: unsupported tensor type")
	// ErrShape reports a tensor or input whose shape does not fit the model.
	ErrShape = errors.New("engine: shape mismatch")
	// ErrRange reports a layer range outside the model.
	ErrRange = errors.New("engine: bad layer range")
	// ErrSession reports a closed or foreign session.
	ErrSession = errors.New("engine: bad session")
	// ErrContextFull reports a step that would exceed a session's capacity.
	ErrContextFull = errors.New("engine: session context full")
	// ErrPosition reports a step whose start position is not the session's length.
	ErrPosition = errors.New("engine: position mismatch")
	// ErrInput reports a bad step input (token out of vocabulary, tokens to a
	// stage that expects hidden states or the reverse).
	ErrInput = errors.New("engine: bad input")
	// ErrClosed reports use of a closed stage.
	ErrClosed = errors.New("engine: stage closed")
)
