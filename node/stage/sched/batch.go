package sched

// Batching. The loop takes every step that is ready, up to its batch
// size, and runs them as one batch, layer by layer: a session runs once
// per batch (a second step of it waits for the next, as it continues the
// first), and at each stage the steps whose next segment starts there go
// to the engine in one call, whatever session or hop range they belong to.

// Batch builds one batch: Take says whether a session's step joins it,
// or waits for the next batch because a step of the session already runs.
type Batch[K comparable] struct {
	seen map[K]bool
}

// Has reports whether a step of session k already runs in the batch.
func (b *Batch[K]) Has(k K) bool { return b.seen[k] }

// Add puts session k's step in the batch.
func (b *Batch[K]) Add(k K) {
	if b.seen == nil {
		b.seen = map[K]bool{}
	}
	b.seen[k] = true
}

// Seg is one stage a step's hop runs through: Stage (the caller's id of
// the engine stage) from layer Lo.
type Seg struct {
	Lo    int
	Stage int
}

// Group is one engine call of a batch: stage Stage, at layer Lo, runs the
// steps Steps (indices into Plan's argument), in batch order.
type Group struct {
	Lo, Stage int
	Steps     []int
}

// Plan orders a batch's engine calls: stage by stage from the lowest
// layer, each step's segments in order. At each layer, the stages in the
// order the batch's steps first name them, each with every step whose
// next segment it is. A step that fails is skipped in its later groups by
// the caller: the others' order does not depend on it.
func Plan(segs [][]Seg) []Group {
	next := make([]int, len(segs))
	var out []Group
	for {
		at := -1
		for i, ss := range segs {
			if next[i] < len(ss) && (at < 0 || ss[next[i]].Lo < at) {
				at = ss[next[i]].Lo
			}
		}
		if at < 0 {
			return out
		}
		first := len(out)
		for i, ss := range segs {
			if next[i] >= len(ss) || ss[next[i]].Lo != at {
				continue
			}
			st := ss[next[i]].Stage
			g := -1
			for j := first; j < len(out); j++ {
				if out[j].Stage == st {
					g = j
					break
				}
			}
			if g < 0 {
				out = append(out, Group{Lo: at, Stage: st})
				g = len(out) - 1
			}
			out[g].Steps = append(out[g].Steps, i)
		}
		for j := first; j < len(out); j++ {
			for _, i := range out[j].Steps {
				next[i]++
			}
		}
	}
}

// Latency folds a batch's seconds per layer into the running figure the
// node reports (an exponentially weighted mean, weight 0.2). Every batch
// counts, prefills included: the figure is what a step arriving now waits
// behind (issue 21).
func Latency(prev, sample float64) float64 {
	if prev == 0 {
		return sample
	}
	return prev + 0.2*(sample-prev)
}
