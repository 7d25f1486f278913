package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/consensus"
	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node/stage/sched"
)

// The scheduler's batch: execute checks the ready steps, runBatch has
// the engine run them, and execute hands each result on (the next hop,
// the entry's token, a check session's receipt).

// work is one step in a batch.
type work struct {
	in     *stepIn
	hs     *hopSession
	x      []float32 // hidden states between layers
	logits []float32
	seg    int // the next of hs.segs to run
	failed bool
}

// layerNames names layers [lo, hi) in an error.
func layerNames(lo, hi int) string {
	if hi == lo+1 {
		return fmt.Sprintf("layer %d", lo)
	}
	return fmt.Sprintf("layers [%d, %d)", lo, hi)
}

// execute runs the ready steps as one batch, layer by layer.
func (s *scheduler) execute(ctx context.Context, ready []*stepIn) {
	var ws []*work
	var batch sched.Batch[hopKey]
	lo, hi := len(s.stages.slots), 0
	for _, in := range ready {
		key := hopKey{in.m.Session, in.m.Hops[0].From}
		hs := s.sessions[key]
		if hs == nil {
			continue // closed meanwhile
		}
		if batch.Has(key) {
			s.deferred = append(s.deferred, in) // a session runs once per batch
			continue
		}
		// Only an open step starts past its position (what it resumed
		// from the prefix cache); a step deferred behind another of its
		// session's may now be stale.
		if off := hs.pos - in.m.Pos; off != 0 && (in.m.Open == nil || off < 0 || off >= len(in.m.Tokens)) {
			s.reject(in, CodeBadFrame, "", "session %s: step at position %d, session holds %d", in.m.Session, in.m.Pos, hs.pos)
			continue
		}
		if err := s.checkFrame(in, hs); err != nil {
			if in.m.Open != nil && in.m.Skip > 0 && key.from > 0 {
				// This hop resumed from its prefix cache, whose input chain
				// may be over other rows than the sender's (an upstream on
				// another engine, or one since evicted, fed it): not the
				// sender's fault; the entry replays cold.
				s.cfg.log.Debug("a resumed session's first frame does not verify; replay cold", zap.Stringer("peer", in.from),
					zap.Stringer("session", in.m.Session), zap.Error(err))
				s.reject(in, CodePrefixMiss, "", "session %s: the frame does not continue the %d positions this hop resumed: %v",
					in.m.Session, in.m.Skip, err)
				continue
			}
			// The sender's fault, like a corrupt frame: refused before
			// anything is computed, and reported against it.
			if s.cfg.badFrame != nil {
				s.cfg.badFrame(in.from)
			}
			s.cfg.log.Warn("refused a frame", zap.Stringer("peer", in.from), zap.Stringer("session", in.m.Session), zap.Error(err))
			s.reject(in, CodeBadFrame, in.from, "%v", err)
			continue
		}
		batch.Add(key)
		ws = append(ws, &work{in: in, hs: hs, x: in.m.Hidden})
		lo, hi = min(lo, key.from), max(hi, hs.to)
	}
	if len(ws) == 0 {
		return
	}
	start := time.Now()
	runBatch(ctx, ws, func(w *work, lo, hi int, err error) {
		s.reject(w.in, CodeInternal, "", "%s: %v", layerNames(lo, hi), err)
	})
	elapsed := time.Since(start)
	if s.cfg.batchDone != nil && hi > lo {
		tokens := 0
		for _, w := range ws {
			tokens += len(w.in.m.Tokens)
		}
		s.cfg.batchDone(elapsed, hi-lo, tokens)
	}
	s.batches++
	if len(ws) > 1 {
		s.batched += uint64(len(ws))
	}
	// Every batch counts, prefills included: the figure is what a step
	// arriving now waits behind, and the router compares it with its
	// modelled decode time to see load. Decode batches alone hid prefill
	// work, so routes herded onto the fastest machines (issue 21; sim:
	// volunteer-1000).
	if hi > lo {
		s.ewma = sched.Latency(s.ewma, elapsed.Seconds()/float64(hi-lo))
	}
	now := s.cfg.clock.Now()
	for _, w := range ws {
		hs := w.hs
		if w.failed {
			s.drop(hs, false) // some layers advanced, others not: unusable
			continue
		}
		s.steps++
		m := w.in.m
		skip := hs.pos - m.Pos // positions resumed from the prefix cache
		hs.hist = append(hs.hist, m.Tokens[skip:]...)
		hs.pos = m.Pos + len(m.Tokens)
		hs.last = now
		last := hs.to == s.cfg.model.Layers
		var lie *sentLie
		if s.cfg.fault != nil {
			s.cfg.fault.corrupt(w, last)
			if f, ok := s.cfg.fault.(sendFault); ok && !last {
				lie = f.lieSent(w, hs)
			}
		}
		hs.chain.Add(w.in.m.Tokens, w.in.m.Hidden, skip, w.x, w.logits, last)
		if last && hs.logits {
			hs.chain.SetLogits(consensus.SummarizeLogits(w.logits, consensus.LogitsTop))
		}
		if hs.check && len(hs.rest) == 0 {
			// The check hop of a check session: its receipt is the answer.
			s.sendReceipt(hs)
			s.drop(hs, false)
			continue
		}
		if last {
			logits := w.logits
			if hs.gram != nil {
				var err error
				if logits, err = hs.constrain(w.logits); err != nil {
					s.out.fail(hs.entry, &ErrorMsg{Session: m.Session, Code: CodeGrammar, Text: err.Error()})
					s.drop(hs, false)
					continue
				}
			}
			tok := engine.Sample(logits, hs.sp, hs.pos, hs.hist)
			t := &Token{Session: m.Session, Pos: hs.pos, Token: tok}
			if hs.lp {
				// Of the same logits row Sample drew from, before any
				// penalty or temperature (engine.LogProbs).
				lp, top := engine.LogProbs(w.logits, tok, hs.topLP)
				t.LP = &TokenLP{LogProb: lp, Top: top}
			}
			s.out.token(hs.entry, t)
			continue
		}
		var sig *FrameSig
		if s.signing() {
			sig = s.signFrame(hs, lie)
		}
		sent := w.x
		if lie != nil {
			sent = lie.rows
		}
		s.out.forward(hs.rest[0].Peer, &Step{Session: m.Session, Open: m.Open, Entry: hs.entry, Hops: hs.rest,
			Pos: m.Pos, Tokens: m.Tokens, Skip: skip, Hidden: sent, Cols: s.cfg.model.Hidden, Check: hs.check,
			Logits: m.Logits && m.Open != nil, Sig: sig})
	}
}

// runBatch runs ws through their stages, stage by stage from the lowest
// layer (sched.Plan): the steps whose next segment is the same stage at
// the same layer run together, one ForwardBatch per stage (a layer of
// the pure-Go engine, a range stage or its view). A step the engine
// refuses is marked failed, and fail hears why; the others go on.
func runBatch(ctx context.Context, ws []*work, fail func(w *work, lo, hi int, err error)) {
	steps := make([]engine.Step, 0, len(ws))
	idx := make([]*work, 0, len(ws))
	var stages []engine.Stage
	plan := make([][]sched.Seg, len(ws))
	for i, w := range ws {
		for _, g := range w.hs.segs {
			id := slices.Index(stages, g.st)
			if id < 0 {
				id = len(stages)
				stages = append(stages, g.st)
			}
			plan[i] = append(plan[i], sched.Seg{Lo: g.lo, Stage: id})
		}
	}
	for _, grp := range sched.Plan(plan) {
		stage := stages[grp.Stage]
		steps, idx = steps[:0], idx[:0]
		for _, i := range grp.Steps {
			w := ws[i]
			if w.failed {
				continue
			}
			st := engine.Step{Session: w.hs.sess[w.seg], Pos: w.hs.pos}
			if grp.Lo == 0 {
				// Past what the session resumed from the prefix cache.
				st.Tokens = w.in.m.Tokens[w.hs.pos-w.in.m.Pos:]
			} else {
				st.Hidden = w.x
			}
			steps = append(steps, st)
			idx = append(idx, w)
		}
		if len(steps) == 0 {
			continue
		}
		in := stage.Info()
		outs, err := stage.ForwardBatch(ctx, steps)
		if err != nil {
			// Find the culprit: one step at a time. ForwardBatch checks
			// every step before it computes, so a refused batch changed
			// nothing.
			outs = make([]engine.Output, len(steps))
			for i := range steps {
				o, err := stage.Forward(ctx, steps[i])
				if err != nil {
					idx[i].failed = true
					fail(idx[i], in.Lo, in.Hi, err)
					continue
				}
				outs[i] = o
			}
		}
		for i, w := range idx {
			w.seg++
			if w.failed {
				continue
			}
			if outs[i].Logits != nil {
				w.logits = outs[i].Logits
			} else {
				w.x = outs[i].Hidden
			}
		}
	}
}
