package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Pipeline chains in-process stages whose ranges cover [0, L) in order:
// what `strata generate --stages` runs, and the single-process reference
// that a swarm's tokens are compared with.
type Pipeline struct {
	Stages []Stage
}

// NewPipeline checks that the stages chain over the whole model.
func NewPipeline(stages ...Stage) (*Pipeline, error) {
	if len(stages) == 0 {
		return nil, fmt.Errorf("%w: no stages", ErrRange)
	}
	next := 0
	for i, s := range stages {
		in := s.Info()
		if in.Lo != next || in.Layers != stages[0].Info().Layers || in.Fingerprint != stages[0].Info().Fingerprint {
			return nil, fmt.Errorf("%w: stage %d [%d, %d) does not follow layer %d of the same model", ErrRange, i, in.Lo, in.Hi, next)
		}
		next = in.Hi
	}
	if next != stages[0].Info().Layers {
		return nil, fmt.Errorf("%w: stages end at layer %d of %d", ErrRange, next, stages[0].Info().Layers)
	}
	return &Pipeline{Stages: stages}, nil
}

// OpenPipeline opens the model at path as stages cut at cuts (for example
// [0, 4, 8] for two stages of an 8-layer model; nil for one stage).
func OpenPipeline(path string, cuts []int, opts ...Option) (*Pipeline, error) {
	if len(cuts) == 0 {
		s, err := Open(path, opts...)
		if err != nil {
			return nil, err
		}
		return NewPipeline(s)
	}
	var stages []Stage
	for i := 0; i+1 < len(cuts); i++ {
		s, err := Open(path, append(opts[:len(opts):len(opts)], WithRange(cuts[i], cuts[i+1]))...)
		if err != nil {
			for _, s := range stages {
				s.Close()
			}
			return nil, err
		}
		stages = append(stages, s)
	}
	p, err := NewPipeline(stages...)
	if err != nil {
		for _, s := range stages {
			s.Close()
		}
	}
	return p, err
}

// ParseStages parses "0:4,4:8" into cuts [0, 4, 8]; the ranges must be
// contiguous.
func ParseStages(s string) ([]int, error) {
	var cuts []int
	for i, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(part), ":")
		lo, err1 := strconv.Atoi(a)
		hi, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || lo >= hi || (i > 0 && lo != cuts[len(cuts)-1]) || (i == 0 && lo != 0) {
			return nil, fmt.Errorf("%w: stages %q: want contiguous lo:hi ranges from 0, such as 0:4,4:8", ErrRange, s)
		}
		if i == 0 {
			cuts = append(cuts, lo)
		}
		cuts = append(cuts, hi)
	}
	return cuts, nil
}

// Close closes every stage.
func (p *Pipeline) Close() error {
	for _, s := range p.Stages {
		s.Close()
	}
	return nil
}

// PipelineSession is one sequence's sessions on every stage.
type PipelineSession struct {
	p    *Pipeline
	sess []Session
}

// NewSession opens a session of maxTokens positions on every stage.
func (p *Pipeline) NewSession(maxTokens int) (*PipelineSession, error) {
	ps := &PipelineSession{p: p}
	for _, s := range p.Stages {
		ss, err := s.NewSession(maxTokens)
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps.sess = append(ps.sess, ss)
	}
	return ps, nil
}

// Len is the positions the session holds.
func (ps *PipelineSession) Len() int { return ps.sess[0].Len() }

// Close frees the session on every stage.
func (ps *PipelineSession) Close() error {
	for _, s := range ps.sess {
		s.Close()
	}
	return nil
}

// Step feeds tokens through every stage and returns the logits of the last.
func (ps *PipelineSession) Step(ctx context.Context, tokens []int32) ([]float32, error) {
	in := Step{Tokens: tokens}
	for i, s := range ps.p.Stages {
		in.Session, in.Pos = ps.sess[i], ps.sess[i].Len()
		out, err := s.Forward(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("stage %d: %w", i, err)
		}
		if out.Logits != nil {
			return out.Logits, nil
		}
		in = Step{Hidden: out.Hidden}
	}
	return nil, fmt.Errorf("%w: the last stage gave no logits", ErrRange)
}

// Generate prefills prompt, then samples up to maxTokens tokens, stopping
// after a token for which stop returns true (nil: never). onToken, if not
// nil, sees each token as it is sampled.
func (ps *PipelineSession) Generate(ctx context.Context, prompt []int32, maxTokens int, sp SamplingParams,
	stop func(int32) bool, onToken func(int32)) ([]int32, error) {
	hist := append([]int32(nil), prompt...)
	logits, err := ps.Step(ctx, prompt)
	if err != nil {
		return nil, err
	}
	var out []int32
	for len(out) < maxTokens {
		tok := Sample(logits, sp, len(hist), hist)
		hist = append(hist, tok)
		out = append(out, tok)
		if onToken != nil {
			onToken(tok)
		}
		if (stop != nil && stop(tok)) || len(out) == maxTokens {
			break
		}
		if logits, err = ps.Step(ctx, []int32{tok}); err != nil {
			return out, err
		}
	}
	return out, nil
}
