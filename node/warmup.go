package node

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// warmer is the node's consensus.StageLoader. Load opens the layers of
// a proposed range that the node does not hold yet, one engine stage per
// layer (or, on a non-Go engine, the whole range as one stage unless one
// stage holds exactly that range already: model.rangeStages), off the
// scheduler's goroutine, while the node keeps serving what it holds; the
// scheduler then takes them in. Release marks the layers
// outside the committed range; each is closed once no session uses it.
type warmer struct {
	model     *model
	sched     *scheduler
	maxLayers int
	loadDelay time.Duration // tests: a slow disk
	loading   *atomic.Int32 // loads in progress, for the announced state
	publish   func()        // announce the node's status again
	log       *zap.Logger
}

var _ consensus.StageLoader = (*warmer)(nil)

// Load loads range r for the map of epoch (see consensus.StageLoader).
func (n *warmer) Load(ctx context.Context, epoch uint64, r layers.Range) error {
	if r.Start < 0 || r.End > n.model.info.Layers || r.Empty() {
		return fmt.Errorf("%w: range %v of a %d-layer model", ErrConfig, r, n.model.info.Layers)
	}
	if n.maxLayers > 0 && r.Len() > n.maxLayers {
		return fmt.Errorf("%w: range %v is more than the %d layers this node offers", ErrConfig, r, n.maxLayers)
	}
	st, err := n.sched.sync(ctx)
	if err != nil {
		return err
	}
	held := st.Held
	if n.model.rangeStages() {
		return n.loadRange(ctx, epoch, r, st)
	}
	var todo []int
	keep := 0
	for l := range held {
		switch {
		case r.Contains(l) && !held[l]:
			todo = append(todo, l)
		case !r.Contains(l) && held[l]:
			keep++
		}
	}
	if len(todo) == 0 {
		return nil // held already (a restore after a commit, say)
	}
	if c := n.maxLayers; c > 0 && keep+r.Len() > c {
		n.log.Warn("warmup: serving and loading more layers than this node offers until the commit",
			zap.Int("serving_others", keep), zap.Stringer("loading", r), zap.Int("max_layers", c))
	}
	n.loading.Add(1)
	defer n.loading.Add(-1)
	n.publish()
	defer n.publish()
	start := time.Now()
	n.log.Info("warmup: loading", zap.Uint64("epoch", epoch), zap.Stringer("range", r), zap.Int("to_load", len(todo)),
		zap.Int("already_held", r.Len()-len(todo)))
	var spans []*span
	fail := func(err error) error {
		for _, sp := range spans {
			sp.close()
		}
		return err
	}
	open := n.model.openLayer
	if f := n.model.fetch; f != nil {
		// The range's tensors come from peers, into a slice file first.
		path, err := f.Slice(ctx, r)
		if err != nil {
			return fail(fmt.Errorf("warmup: %w", err))
		}
		defer f.Release(path)
		open = func(l int) (engine.Stage, error) { return n.model.openFrom(path, l) }
	}
	var bytes int64
	for i, l := range todo {
		if err := ctx.Err(); err != nil {
			n.log.Info("warmup: cancelled", zap.Uint64("epoch", epoch), zap.Stringer("range", r))
			return fail(err)
		}
		if d := n.loadDelay; d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return fail(ctx.Err())
			}
		}
		st, err := open(l)
		if err != nil {
			return fail(fmt.Errorf("warmup: layer %d: %w", l, err))
		}
		spans = append(spans, newSpan(st))
		bytes += st.Info().WeightBytes
		n.log.Info("warmup: layer loaded", zap.Int("layer", l), zap.String("progress", fmt.Sprintf("%d/%d", i+1, len(todo))),
			zap.Int64("bytes", bytes), zap.Duration("elapsed", time.Since(start).Round(time.Millisecond)))
	}
	return n.handIn(ctx, epoch, r, spans, start)
}

// handIn gives the loaded stages to the scheduler.
func (n *warmer) handIn(ctx context.Context, epoch uint64, r layers.Range, spans []*span, start time.Time) error {
	done := make(chan struct{})
	if err := n.sched.submit(ctx, loadIn{spans: spans, done: done}); err != nil {
		for _, sp := range spans {
			sp.close()
		}
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err() // the loop owns the stages now
	}
	n.log.Info("warmup: ready", zap.Uint64("epoch", epoch), zap.Stringer("range", r), zap.Duration("took", time.Since(start).Round(time.Millisecond)))
	return nil
}

// loadRange loads range r as one stage, unless one holds exactly r
// already. The stages that hold r's layers now keep serving meanwhile,
// and the sessions on them finish there after the switch; until they
// are released, the layers of both are in memory.
func (n *warmer) loadRange(ctx context.Context, epoch uint64, r layers.Range, st *schedStatus) error {
	if slices.Contains(st.Spans, r) {
		return nil // held already (a restore after a commit, say)
	}
	keep := 0
	for _, h := range st.Held {
		if h {
			keep++
		}
	}
	if c := n.maxLayers; c > 0 && keep+r.Len() > c {
		n.log.Warn("warmup: serving and loading more layers than this node offers until the commit",
			zap.Int("serving", keep), zap.Stringer("loading", r), zap.Int("max_layers", c))
	}
	n.loading.Add(1)
	defer n.loading.Add(-1)
	n.publish()
	defer n.publish()
	start := time.Now()
	n.log.Info("warmup: loading as one stage", zap.Uint64("epoch", epoch), zap.Stringer("range", r), zap.Int("held", keep))
	path := n.model.path
	if f := n.model.fetch; f != nil {
		p, err := f.Slice(ctx, r)
		if err != nil {
			return fmt.Errorf("warmup: %w", err)
		}
		defer f.Release(p)
		path = p
	}
	if d := n.loadDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	stage, err := n.model.openRange(path, r.Start, r.End)
	if err != nil {
		return fmt.Errorf("warmup: layers %v: %w", r, err)
	}
	if err := ctx.Err(); err != nil {
		stage.Close()
		n.log.Info("warmup: cancelled", zap.Uint64("epoch", epoch), zap.Stringer("range", r))
		return err
	}
	n.log.Info("warmup: range loaded", zap.Stringer("range", r), zap.Int64("bytes", stage.Info().WeightBytes),
		zap.Duration("elapsed", time.Since(start).Round(time.Millisecond)))
	return n.handIn(ctx, epoch, r, []*span{newSpan(stage)}, start)
}

// Release keeps only range keep from the map of epoch on; other layers
// go once their sessions end (see consensus.StageLoader).
func (n *warmer) Release(ctx context.Context, epoch uint64, keep layers.Range) error {
	done := make(chan struct{})
	if err := n.sched.submit(ctx, releaseIn{keep: keep, done: done}); err != nil {
		return err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	n.log.Info("serving", zap.Uint64("epoch", epoch), zap.Stringer("range", keep))
	n.publish()
	if f := n.model.fetch; f != nil && !keep.Empty() {
		f.Prune(keep)
	}
	return nil
}
