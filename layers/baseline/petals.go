package baseline

import (
	"cmp"
	"context"
	"fmt"
	"math"
	mbits "math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/stratanet/strata/layers"
)

// Petals defaults, from bigscience-workshop/petals.
const (
	// PetalsCacheTokensGQA is the attention cache a server reserves per
	// block for a model with grouped-query attention (server.py:
	// attn_cache_tokens = 32768 if num_key_value_groups > 1 else 8192;
	// older revisions used 16384 and 4096).
	PetalsCacheTokensGQA = 32768
	// PetalsCacheTokensMHA is the same reservation without GQA.
	PetalsCacheTokensMHA = 8192
	// DefaultPetalsBalanceQuality is the move threshold (--balance_quality).
	DefaultPetalsBalanceQuality = 0.75
	// DefaultPetalsEpsilon is the weight that favours staying put
	// (block_selection.py: eps = 1e-3).
	DefaultPetalsEpsilon = 1e-3
	// DefaultPetalsMaxRounds bounds the rebalance rounds and each check's
	// simulation rounds. Petals itself has no bound: its random timers
	// and shuffles make endless cycling unlikely, where a fixed order may
	// cycle for ever.
	DefaultPetalsMaxRounds = 200
)

// PetalsOption configures the Petals baseline.
type PetalsOption func(*petalsConfig) error

type petalsConfig struct {
	order       []string
	cacheTokens int     // 0: PetalsCacheTokensGQA or MHA by the model
	reserve     float64 // bytes; < 0: the fleet's MemoryReserve fraction
	quality     float64
	eps         float64
	seed        uint64
	maxRounds   int
}

// PetalsJoinOrder sets the order in which servers join. Nodes not named
// join afterwards in fleet (ID) order; the default is fleet order.
func PetalsJoinOrder(ids ...string) PetalsOption {
	ids = append([]string(nil), ids...)
	return func(c *petalsConfig) error { c.order = ids; return nil }
}

// PetalsCacheTokens sets the attention cache, in tokens, that a server
// reserves for every block it holds (0: Petals' default for the model).
func PetalsCacheTokens(n int) PetalsOption {
	return func(c *petalsConfig) error {
		if n < 0 {
			return fmt.Errorf("%w: petals cache tokens %d < 0", ErrBadOption, n)
		}
		c.cacheTokens = n
		return nil
	}
}

// PetalsReserve sets the memory, in bytes, a server keeps back before it
// counts blocks. By default it is the fleet's CostParams.MemoryReserve
// share of memory, the same room the cost model leaves to the runtime.
// Petals' own figure is its autograd estimate, 2 GiB·hidden/14336.
func PetalsReserve(bytes float64) PetalsOption {
	return func(c *petalsConfig) error {
		if !(bytes >= 0) || math.IsInf(bytes, 0) {
			return fmt.Errorf("%w: petals reserve %v", ErrBadOption, bytes)
		}
		c.reserve = bytes
		return nil
	}
}

// PetalsBalanceQuality sets the move threshold: a server moves only if
// min t before / min t after < q.
func PetalsBalanceQuality(q float64) PetalsOption {
	return func(c *petalsConfig) error {
		if !(q > 0 && q <= 1) {
			return fmt.Errorf("%w: petals balance quality %v not in (0, 1]", ErrBadOption, q)
		}
		c.quality = q
		return nil
	}
}

// PetalsEpsilon sets ε, the extra weight with which a server removes
// itself before it looks for a better start.
func PetalsEpsilon(eps float64) PetalsOption {
	return func(c *petalsConfig) error {
		if !(eps >= 0 && eps < 0.5) {
			return fmt.Errorf("%w: petals epsilon %v not in [0, 0.5)", ErrBadOption, eps)
		}
		c.eps = eps
		return nil
	}
}

// PetalsSeed replaces Petals' random check timers and shuffles with a
// seeded shuffle of the servers each round. Seed 0 (the default) keeps
// a fixed order: the join order.
func PetalsSeed(seed uint64) PetalsOption {
	return func(c *petalsConfig) error { c.seed = seed; return nil }
}

// PetalsMaxRounds bounds the rebalance rounds and the rounds of each
// check's simulation.
func PetalsMaxRounds(n int) PetalsOption {
	return func(c *petalsConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: petals max rounds %d < 1", ErrBadOption, n)
		}
		c.maxRounds = n
		return nil
	}
}

// PetalsPolicy is the Petals baseline. Build it with NewPetals.
type PetalsPolicy struct {
	cfg petalsConfig
	err error
}

// NewPetals returns the Petals baseline. An invalid option makes Plan and
// Run return its error.
func NewPetals(opts ...PetalsOption) *PetalsPolicy {
	p := &PetalsPolicy{cfg: petalsConfig{
		reserve:   -1,
		quality:   DefaultPetalsBalanceQuality,
		eps:       DefaultPetalsEpsilon,
		maxRounds: DefaultPetalsMaxRounds,
	}}
	for _, o := range opts {
		if err := o(&p.cfg); err != nil && p.err == nil {
			p.err = err
		}
	}
	return p
}

// Name implements Policy.
func (p *PetalsPolicy) Name() string { return "petals" }

// Plan implements Policy.
func (p *PetalsPolicy) Plan(ctx context.Context, f *layers.Fleet) (layers.LayerMap, error) {
	r, err := p.Run(ctx, f)
	return r.Map, err
}

// PetalsResult is a Petals run with its statistics.
type PetalsResult struct {
	Map layers.LayerMap
	// Blocks is each server's block count from the memory formula (0:
	// it cannot hold a block and never joins).
	Blocks map[string]int
	// Skipped lists nodes that did not join: no block fits, or no window
	// fits once the embedding or head is counted.
	Skipped []string
	// Rounds is the number of rebalance rounds run (every server checks
	// once a round); Checks the checks; Reloads the checks that decided to
	// move; Moves the reloads that changed a span (a server may reload
	// onto the same blocks).
	Rounds, Checks, Reloads, Moves int
	// SimCapped counts checks whose simulation hit the round bound.
	SimCapped int
	// Converged is true when a round ended with nothing moved; Cycle when
	// the rebalance came back to an earlier state instead.
	Converged, Cycle bool
}

// Run places the fleet as Petals would and reports how it got there.
func (p *PetalsPolicy) Run(ctx context.Context, f *layers.Fleet) (PetalsResult, error) {
	if p.err != nil {
		return PetalsResult{}, fmt.Errorf("petals: %w", p.err)
	}
	if err := checkFleet(f); err != nil {
		return PetalsResult{}, fmt.Errorf("petals: %w", err)
	}
	order, err := joinOrder(f, p.cfg.order)
	if err != nil {
		return PetalsResult{}, fmt.Errorf("petals: %w", err)
	}
	st := newPetalsState(f, p.cfg)
	res := PetalsResult{Blocks: make(map[string]int, f.Len())}
	for i, s := range st.srv {
		res.Blocks[f.Profiles[i].Node.ID] = s.n
	}

	// Joins, one at a time: every earlier server counts, as a joining
	// server's DHT record does.
	for k, i := range order {
		if k%64 == 0 && ctx.Err() != nil {
			return PetalsResult{}, timedOut(ctx, "petals: joining")
		}
		st.recompute(st.cur)
		st.ord = sortOrder(st.t, st.ord)
		if b := st.bestStart(st.t, st.ord, i, layers.Range{}, 0); b >= 0 {
			st.cur[i] = st.srv[i].place(b, st.L)
		}
	}
	for _, i := range order {
		if st.cur[i].start < 0 {
			res.Skipped = append(res.Skipped, f.Profiles[i].Node.ID)
		}
	}
	if len(res.Skipped) == len(order) {
		return PetalsResult{}, fmt.Errorf("petals: %w: no node can hold a block of %s", ErrNoCapacity, f.Model.Name)
	}

	checkOrder := make([]int, 0, len(order))
	for _, i := range order {
		if st.cur[i].start >= 0 {
			checkOrder = append(checkOrder, i)
		}
	}
	if err := st.rebalance(ctx, checkOrder, &res); err != nil {
		return PetalsResult{}, err
	}

	stages := make([]layers.Stage, 0, len(st.cur))
	for i, c := range st.cur {
		if c.start >= 0 {
			stages = append(stages, layers.Stage{Node: f.Profiles[i].Node.ID, Range: c.r})
		}
	}
	m, err := layers.NewLayerMap(st.L, 0, stages...)
	if err != nil {
		return PetalsResult{}, fmt.Errorf("petals: %w", err)
	}
	res.Map = m
	return res, nil
}

// rebalance runs rounds of checks, servers in checkOrder (or a seeded
// shuffle of it), until a whole round moves nothing, the placement comes
// back to an earlier one (fixed order only: then it would cycle for
// ever), or the round bound.
func (st *petalsState) rebalance(ctx context.Context, checkOrder []int, res *PetalsResult) error {
	st.checkOrder = checkOrder
	if st.cfg.seed != 0 {
		s := splitmix64(st.cfg.seed)
		st.rng = &s
	}
	seen := map[string]bool{st.key(): true}
	for res.Rounds < st.cfg.maxRounds {
		res.Rounds++
		if st.rng != nil {
			st.rng.shuffle(checkOrder)
		}
		changed := false
		for _, i := range checkOrder {
			if ctx.Err() != nil {
				return timedOut(ctx, fmt.Sprintf("petals: rebalance round %d", res.Rounds))
			}
			res.Checks++
			move, capped := st.shouldMove(ctx, i)
			if capped {
				res.SimCapped++
			}
			if !move {
				continue
			}
			// Break-before-make: the server goes offline, then chooses
			// blocks as a joining server would.
			res.Reloads++
			old := st.cur[i]
			st.cur[i] = ppos{start: -1}
			st.recompute(st.cur)
			st.ord = sortOrder(st.t, st.ord)
			st.cur[i] = st.srv[i].place(st.bestStart(st.t, st.ord, i, layers.Range{}, 0), st.L)
			if st.cur[i].start != old.start {
				res.Moves++
				changed = true
			}
		}
		if ctx.Err() != nil {
			return timedOut(ctx, fmt.Sprintf("petals: rebalance round %d", res.Rounds))
		}
		if !changed {
			res.Converged = true
			return nil
		}
		if st.rng == nil {
			k := st.key()
			if seen[k] {
				res.Cycle = true
				return nil
			}
			seen[k] = true
		}
	}
	return nil
}

// pserver is what a Petals server knows about itself.
type pserver struct {
	n int // blocks, from the memory formula; 0: does not join
	// Placements for a window at the first block, at the last, and
	// anywhere between; see place.
	first, last, mid ppos
}

// ppos is a server's place: the start of its n-block window, the range
// it really holds, and its throughput there. start < 0: not serving.
type ppos struct {
	start int
	r     layers.Range
	thr   float64
}

func newServer(p *layers.Profile, m layers.ModelSpec, cfg petalsConfig, memReserve float64) pserver {
	L := m.Layers
	tokens := cfg.cacheTokens
	if tokens == 0 {
		tokens = PetalsCacheTokensMHA
		if m.KVHeads < m.Heads {
			tokens = PetalsCacheTokensGQA
		}
	}
	hw := p.Node.Hardware
	reserve := cfg.reserve
	if reserve < 0 {
		reserve = memReserve * hw.MemoryBytes
	}
	// Petals' _choose_num_blocks: fill memory with blocks, each with its
	// share of the attention cache.
	perBlock := m.LayerWeightBytes() + float64(tokens)*m.KVBytesPerToken()
	n := 0
	if x := math.Floor((hw.MemoryBytes - reserve) / perBlock); x >= 1 {
		n = int(math.Min(x, float64(L)))
	}
	if p.Node.MaxLayers > 0 {
		n = min(n, p.Node.MaxLayers) // like --num_blocks
	}
	s := pserver{n: n, first: ppos{start: -1}, last: ppos{start: -1}, mid: ppos{start: -1}}
	if n == 0 {
		return s
	}
	s.first = trim(p, 0, n, L)
	s.last = trim(p, L-n, n, L)
	if L-n >= 2 {
		s.mid = trim(p, 1, n, L)
	}
	return s
}

// trim places a server's n-block window at start. In Petals the client
// holds the embedding and the head; in Strata the first and last stage
// do, so a window at either end must fit that too. Where the cost model
// says the window does not fit (TPS 0), the server holds as many layers
// of it as fit, kept at the model's end (or at the window's start in the
// middle); where not even one fits, the window is not an option for it.
func trim(p *layers.Profile, start, n, L int) ppos {
	w := layers.Range{Start: start, End: start + n}
	e := layers.EndsOf(w, L)
	if t := p.TPS(n, e); t > 0 {
		return ppos{start: start, r: w, thr: t}
	}
	var r layers.Range
	switch e {
	case 0:
		r = layers.Range{Start: start, End: start + min(n, p.Capacity(0))}
	case layers.EndEmbed:
		r = layers.Range{Start: 0, End: min(n, p.Capacity(layers.EndEmbed))}
	case layers.EndHead:
		r = layers.Range{Start: L - min(n, p.Capacity(layers.EndHead)), End: L}
	default: // the whole model: keep the embedding end
		r = layers.Range{Start: 0, End: min(L-1, p.Capacity(layers.EndEmbed))}
	}
	if r.Empty() {
		return ppos{start: -1}
	}
	t := p.TPS(r.Len(), layers.EndsOf(r, L))
	if !(t > 0) {
		return ppos{start: -1}
	}
	return ppos{start: start, r: r, thr: t}
}

// place returns the server's place for a window starting at start.
func (s *pserver) place(start, L int) ppos {
	switch {
	case start < 0:
		return ppos{start: -1}
	case start == 0:
		return s.first
	case start == L-s.n:
		return s.last
	}
	p := s.mid
	if p.start < 0 {
		return p
	}
	d := start - p.start
	p.start, p.r.Start, p.r.End = start, p.r.Start+d, p.r.End+d
	return p
}

type petalsState struct {
	cfg petalsConfig
	L   int
	srv []pserver
	cur []ppos
	t   []float64 // per-block throughput of cur
	cnt []int     // per-block server count of cur
	tol float64
	rng *splitmix64
	// checkOrder is the order of checks, and of every simulation pass.
	checkOrder []int

	// scratch
	sim       []ppos
	simT      []float64
	simCnt    []int
	v         []float64
	ord       []int
	simOrd    []int
	ordA      []int
	ordB      []int
	rank      []int
	diff      []int
	bits      []uint64
	evaluated []int
	groups    [4][]int
	merged    []int
	merged2   []int
	order     []int
}

func newPetalsState(f *layers.Fleet, cfg petalsConfig) *petalsState {
	L := f.Model.Layers
	st := &petalsState{cfg: cfg, L: L,
		srv: make([]pserver, f.Len()), cur: make([]ppos, f.Len()),
		t: make([]float64, L), cnt: make([]int, L),
		simT: make([]float64, L), simCnt: make([]int, L),
		v: make([]float64, L), rank: make([]int, L), diff: make([]int, L), bits: make([]uint64, (L+63)/64),
		evaluated: make([]int, f.Len()),
	}
	scale := 0.0
	for i := range f.Profiles {
		st.srv[i] = newServer(&f.Profiles[i], f.Model, cfg, f.Params.MemoryReserve)
		st.cur[i] = ppos{start: -1}
		for _, q := range []ppos{st.srv[i].first, st.srv[i].mid, st.srv[i].last} {
			scale = math.Max(scale, q.thr)
		}
	}
	// Lexicographic comparisons treat values this close as equal, so that
	// rounding in the running sums cannot break the lowest-start rule;
	// the ε weighting is many orders of magnitude larger.
	st.tol = 1e-12 * scale * float64(f.Len())
	return st
}

// recompute rebuilds the per-block sums from scratch, servers in fleet
// order, as Petals' compute_spans does from sorted DHT records.
func (st *petalsState) recompute(pos []ppos) {
	clear(st.t)
	clear(st.cnt)
	for _, p := range pos {
		if p.start < 0 {
			continue
		}
		for b := p.r.Start; b < p.r.End; b++ {
			st.t[b] += p.thr
			st.cnt[b]++
		}
	}
}

func addRange(t []float64, r layers.Range, v float64) {
	for b := r.Start; b < r.End; b++ {
		t[b] += v
	}
}

func minOf(t []float64) float64 {
	m := math.Inf(1)
	for _, v := range t {
		m = math.Min(m, v)
	}
	return m
}

// opensGap reports whether some block of r is served by nobody else.
func opensGap(cnt []int, r layers.Range) bool {
	for b := r.Start; b < r.End; b++ {
		if cnt[b] <= 1 {
			return true
		}
	}
	return false
}

// sortOrder fills ord with the blocks in increasing order of t.
func sortOrder(t []float64, ord []int) []int {
	ord = ord[:0]
	for b := range t {
		ord = append(ord, b)
	}
	slices.SortFunc(ord, func(a, b int) int { return cmp.Compare(t[a], t[b]) })
	return ord
}

// reorder updates ord, t's blocks in increasing order, after t fell by
// a on old and rose by b on now. Within each of the four groups (neither,
// old only, new only, both) every block moved by the same amount, and
// rounding is monotone, so each group stays in order: an O(L) merge
// replaces a sort.
func (st *petalsState) reorder(t []float64, ord []int, old, now layers.Range) []int {
	groups := &st.groups
	for g := range groups {
		groups[g] = groups[g][:0]
	}
	for _, b := range ord {
		g := 0
		if old.Contains(b) {
			g |= 1
		}
		if now.Contains(b) {
			g |= 2
		}
		groups[g] = append(groups[g], b)
	}
	merged := append(st.merged[:0], groups[0]...)
	for g := 1; g < 4; g++ {
		if len(groups[g]) == 0 {
			continue
		}
		st.merged2 = mergeBy(t, st.merged2[:0], merged, groups[g])
		merged, st.merged2 = st.merged2, merged
	}
	st.merged = merged
	return append(ord[:0], merged...)
}

// mergeBy appends to out the merge of a and b, both in increasing t.
func mergeBy(t []float64, out, a, b []int) []int {
	x, y := 0, 0
	for x < len(a) && y < len(b) {
		if t[a[x]] <= t[b[y]] {
			out = append(out, a[x])
			x++
		} else {
			out = append(out, b[y])
			y++
		}
	}
	out = append(out, a[x:]...)
	return append(out, b[y:]...)
}

// bestStart is Petals' _choose_best_start for server i, over the blocks'
// throughputs t less delta on r (the server's own share when it weighs
// itself out): the start whose window, sorted ascending, is
// lexicographically smallest, ties to the lowest start. -1 when no window
// fits the server. ord is t's blocks in increasing order.
//
// Two sorted lists of the same length compare at the smallest value that
// one holds more times than the other: the list with more copies is the
// smaller. So the scan keeps, per value rank, the count in the current
// window minus the count in the best one, and a bitset of the ranks where
// they differ: a step of the slide is O(1) and a comparison is a lowest
// set bit. Ranks come from ord by an O(L) merge, since subtracting one
// delta keeps r's blocks in order among themselves. Values within st.tol
// share a rank, so that rounding in the running sums cannot break the
// lowest-start rule.
func (st *petalsState) bestStart(t []float64, ord []int, i int, r layers.Range, delta float64) int {
	s := &st.srv[i]
	n, L := s.n, len(t)
	if n == 0 || n > L {
		return -1
	}
	v := st.v
	copy(v, t)
	for b := r.Start; b < r.End; b++ {
		v[b] = t[b] - delta
	}
	outside, inside := st.ordA[:0], st.ordB[:0]
	for _, b := range ord {
		if r.Contains(b) {
			inside = append(inside, b)
		} else {
			outside = append(outside, b)
		}
	}
	rank := st.rank
	k := 0
	group := 0.0
	for x, y := 0, 0; x < len(outside) || y < len(inside); {
		var b int
		if y == len(inside) || (x < len(outside) && v[outside[x]] <= v[inside[y]]) {
			b, x = outside[x], x+1
		} else {
			b, y = inside[y], y+1
		}
		if k == 0 || v[b] > group+st.tol {
			group = v[b]
			k++
		}
		rank[b] = k - 1
	}
	st.ordA, st.ordB = outside, inside
	diff := st.diff[:k]
	clear(diff)
	bits := st.bits[:(k+63)/64]
	clear(bits)
	bestAt := -1
	for start := 0; start+n <= L; start++ {
		if bestAt >= 0 {
			// Slide: the block leaving counts one less, the one entering
			// one more.
			r := rank[start-1]
			if diff[r]--; diff[r] != 0 {
				bits[r>>6] |= 1 << (r & 63)
			} else {
				bits[r>>6] &^= 1 << (r & 63)
			}
			r = rank[start+n-1]
			if diff[r]++; diff[r] != 0 {
				bits[r>>6] |= 1 << (r & 63)
			} else {
				bits[r>>6] &^= 1 << (r & 63)
			}
		}
		var fits bool
		switch start {
		case 0:
			fits = s.first.start >= 0
		case L - n:
			fits = s.last.start >= 0
		default:
			fits = s.mid.start >= 0
		}
		if !fits {
			continue
		}
		if bestAt < 0 {
			bestAt = start
			continue
		}
		for w, b := range bits {
			if b == 0 {
				continue
			}
			if r := w<<6 + mbits.TrailingZeros64(b); diff[r] > 0 {
				// The window holds more copies of the smallest value
				// where the two differ: it is the smaller.
				bestAt = start
				clear(diff)
				clear(bits)
			}
			break
		}
	}
	return bestAt
}

// shouldMove is Petals' should_choose_other_blocks for server i, with the
// random simulation order replaced by the check order (or a seeded
// shuffle). capped reports a simulation that hit the round bound.
func (st *petalsState) shouldMove(ctx context.Context, i int) (move, capped bool) {
	eps := st.cfg.eps
	st.recompute(st.cur)
	before := math.Max(minOf(st.t), 0)
	me := st.cur[i]
	// Leaving must not open a gap (Petals: it would make the swarm
	// disjoint).
	if opensGap(st.cnt, me.r) {
		return false, false
	}
	st.ord = sortOrder(st.t, st.ord)
	to := st.bestStart(st.t, st.ord, i, me.r, me.thr*(1+eps))
	if to == me.start {
		return false, false
	}

	// Simulate: move there, then let every server (itself included), in
	// the check order, re-choose the same way until nothing moves.
	// Choosing reads t without changing it, so a server that chose to
	// stay would choose so again until some server moves: evaluated[j]
	// remembers the move count when it last stayed.
	t, cnt := st.simT, st.simCnt
	copy(t, st.t)
	copy(cnt, st.cnt)
	sim := append(st.sim[:0], st.cur...)
	st.sim = sim
	moves := 0
	moveTo := func(j, start int) {
		old := sim[j]
		addRange(t, old.r, -old.thr)
		for b := old.r.Start; b < old.r.End; b++ {
			cnt[b]--
		}
		sim[j] = st.srv[j].place(start, st.L)
		addRange(t, sim[j].r, sim[j].thr)
		for b := sim[j].r.Start; b < sim[j].r.End; b++ {
			cnt[b]++
		}
		moves++
		st.simOrd = st.reorder(t, st.simOrd, old.r, sim[j].r)
	}
	st.simOrd = append(st.simOrd[:0], st.ord...)
	moveTo(i, to)

	order := append(st.order[:0], st.checkOrder...)
	st.order = order
	evaluated := st.evaluated
	for j := range evaluated {
		evaluated[j] = -1
	}
	for round := 1; ; round++ {
		if ctx.Err() != nil {
			return false, false // the caller reports the timeout
		}
		if st.rng != nil {
			st.rng.shuffle(order)
		}
		moved := false
		for _, j := range order {
			p := sim[j]
			if evaluated[j] == moves || opensGap(cnt, p.r) {
				continue
			}
			if nj := st.bestStart(t, st.simOrd, j, p.r, p.thr*(1+eps)); nj != p.start {
				moveTo(j, nj)
				moved = true
			} else {
				evaluated[j] = moves
			}
		}
		if !moved {
			break
		}
		if round >= st.cfg.maxRounds {
			capped = true
			break
		}
	}
	after := minOf(t)
	return after > 0 && before/after < st.cfg.quality, capped
}

// key identifies the current placement, to detect cycles.
func (st *petalsState) key() string {
	var b strings.Builder
	for _, p := range st.cur {
		b.WriteString(strconv.Itoa(p.start))
		b.WriteByte(',')
	}
	return b.String()
}
