package node

import (
	"fmt"
	"slices"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
	"github.com/stratanet/strata/node/weights"
)

// ModelInfo describes the model a node serves.
type ModelInfo struct {
	// Name is the model's name; a simulated model's ends in
	// engine.SimSuffix, so that nothing it serves passes for real output.
	Name        string
	Fingerprint string
	Layers      int
	Hidden      int
	Vocab       int
	Context     int // positions a session may hold
	Simulated   bool
	// ChatTemplate: the file carries its own chat template
	// (tokenizer.chat_template). Without one a chat request is rendered
	// in the engine's built-in format, which a model not tuned for chat
	// (a base model such as stories260K) never saw: clients then offer
	// plain completion. A simulated model has none.
	ChatTemplate bool
	// ChatSyntax is the output syntax the chat template renders: the
	// family's tool-call format and reasoning markers, which the API
	// parses out of a chat's output.
	ChatSyntax engine.ChatSyntax
}

// model opens the layers of the node's model: a GGUF file, or a
// simulated model on a declared device. Each layer is its own engine
// stage, so that a hop may run any sub-range of what the node holds (the
// router's turning points) and warmup and release work layer by layer.
type model struct {
	info    ModelInfo
	spec    layers.ModelSpec
	hash    uint64
	tok     *engine.Tokenizer
	path    string          // real
	hw      layers.Hardware // simulated
	threads int
	eng     *Engine // nil: the pure-Go engine

	// manifest is the encoded chunk manifest of the file (nil: a
	// simulated model, or a file node that does not serve chunks).
	manifest []byte
	// fetch: the node holds no file and fetches slices from peers.
	fetch *weights.Remote
}

// prompt is req's prompt as tokens: its text, its chat rendered by the
// model's template, or its token IDs.
func (m *model) prompt(req Request) ([]int32, error) {
	var prompt []int32
	switch {
	case req.Prompt != "":
		prompt = m.tok.Encode(req.Prompt, true, false)
	case len(req.Messages) > 0:
		var err error
		if prompt, err = m.tok.EncodeChatVars(req.Messages, req.Tools, req.ChatVars); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
	default:
		prompt = slices.Clone(req.Tokens)
		for _, t := range prompt {
			if t < 0 || int(t) >= m.info.Vocab {
				return nil, fmt.Errorf("%w: token %d outside the vocabulary of %d", ErrBadRequest, t, m.info.Vocab)
			}
		}
	}
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: the prompt has no tokens", ErrBadRequest)
	}
	return prompt, nil
}

func openModel(path, simName string, simHW layers.Hardware, threads int) (*model, error) {
	switch {
	case path != "" && simName != "":
		return nil, fmt.Errorf("%w: both a model file and a simulated model", ErrConfig)
	case path != "":
		f, fh, err := engine.OpenFile(path)
		if err != nil {
			return nil, fmt.Errorf("%w: model %w", ErrConfig, err) // it names the file
		}
		defer fh.Close()
		hp, err := engine.ReadHParams(f)
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: %w", ErrConfig, path, err)
		}
		spec, err := f.ModelSpec()
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: %w", ErrConfig, path, err)
		}
		fp, err := f.Fingerprint()
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: %w", ErrConfig, path, err)
		}
		tok, err := engine.NewTokenizer(f)
		if err != nil {
			return nil, fmt.Errorf("%w: model %s: %w", ErrConfig, path, err)
		}
		return &model{path: path, spec: spec, tok: tok, hash: ModelHash(fp), threads: threads,
			info: ModelInfo{Name: hp.Name, Fingerprint: fp, Layers: hp.Layers, Hidden: hp.Dim, Vocab: hp.Vocab, Context: hp.Context,
				ChatTemplate: tok.HasChatTemplate(), ChatSyntax: tok.ChatSyntax()}}, nil
	case simName != "":
		spec, err := layers.Model(simName)
		if err != nil {
			return nil, fmt.Errorf("%w: simulated model: %w", ErrConfig, err)
		}
		if err := simHW.Validate(); err != nil {
			return nil, fmt.Errorf("%w: simulated device: %w", ErrConfig, err)
		}
		probe, err := engine.NewSimStage(spec, simHW, engine.WithRange(0, 1))
		if err != nil {
			return nil, fmt.Errorf("%w: simulated model: %w", ErrConfig, err)
		}
		in := probe.Info()
		probe.Close()
		tok, err := engine.SimTokenizer(spec.Vocab)
		if err != nil {
			return nil, fmt.Errorf("%w: simulated tokenizer: %w", ErrConfig, err)
		}
		return &model{spec: spec, hw: simHW, tok: tok, hash: ModelHash(in.Fingerprint), threads: threads,
			info: ModelInfo{Name: in.Name, Fingerprint: in.Fingerprint, Layers: spec.Layers, Hidden: spec.Hidden,
				Vocab: spec.Vocab, Context: min(in.Context, 1<<16), Simulated: true}}, nil
	}
	return nil, fmt.Errorf("%w: no model (WithModelFile or WithSimModel)", ErrConfig)
}

// openLayer loads layer l as its own stage.
func (m *model) openLayer(l int) (engine.Stage, error) {
	if l < 0 || l >= m.info.Layers {
		return nil, fmt.Errorf("%w: layer %d of %d", ErrNotServing, l, m.info.Layers)
	}
	if m.info.Simulated {
		return engine.NewSimStage(m.spec, m.hw, engine.WithRange(l, l+1))
	}
	if m.fetch != nil {
		return nil, fmt.Errorf("%w: layer %d: no file (a fetched slice holds it)", ErrNotServing, l)
	}
	return m.openFrom(m.path, l)
}

// openFrom loads layer l from the file (or slice) at path.
func (m *model) openFrom(path string, l int) (engine.Stage, error) {
	if m.eng != nil {
		return m.eng.Open(path, l, l+1, m.threads)
	}
	return engine.Open(path, engine.WithRange(l, l+1), engine.WithThreads(m.threads))
}

// rangeStages: the node loads its range as one stage rather than a stage
// per layer. An engine that can (Engine.Ranges: ggml) does: it runs a
// stage's range as one graph with the KV cache in device memory, so a
// hop's hidden states cross to the host only at its ends (per layer, on
// a GPU, each token would make a round trip per layer). The pure-Go
// engine stays per layer: its prefix cache copies sessions per layer
// (engine.PrefixStage), and a stage per layer costs it nothing, as it
// computes on the host anyway.
func (m *model) rangeStages() bool { return m.eng != nil && m.eng.Ranges && !m.info.Simulated }

// openRange loads layers [lo, hi) as one stage from the file (or slice)
// at path: a hop over part of it runs through a view (engine/ggml's
// Stage.Sub).
func (m *model) openRange(path string, lo, hi int) (engine.Stage, error) {
	if lo < 0 || hi > m.info.Layers || lo >= hi {
		return nil, fmt.Errorf("%w: layers [%d, %d) of %d", ErrNotServing, lo, hi, m.info.Layers)
	}
	st, err := m.eng.Open(path, lo, hi, m.threads)
	if err != nil {
		return nil, err
	}
	if _, ok := st.(subStage); !ok && hi-lo > 1 {
		st.Close()
		return nil, fmt.Errorf("%w: engine %s cannot run part of a range stage", ErrConfig, m.eng.Name)
	}
	return st, nil
}
