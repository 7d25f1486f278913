package baseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/stratanet/strata/layers"
)

// Parallax defaults, from GradientHQ/parallax (src/scheduling).
const (
	// DefaultParallaxParamRatio is the share of device memory Parallax
	// gives to weights when it counts a node's layer capacity.
	DefaultParallaxParamRatio = 0.65
	// DefaultParallaxMaxStates bounds the memo of one pipeline count's search
	// (about 35 bytes a state, so some 600 MB). Reaching it is reported as ErrTimedOut,
	// never answered with a cheaper search.
	DefaultParallaxMaxStates = 16 << 20
	// parallaxBisections is the water-filling bisection count; Parallax
	// uses 40, more only makes λ closer to exact.
	parallaxBisections = 64
	// parallaxCheckEvery is how many search steps pass between looks at
	// the context.
	parallaxCheckEvery = 1024
)

// errStateBudget is wrapped into ErrTimedOut when the memo is full.
var errStateBudget = errors.New("state budget exhausted")

// ParallaxOption configures the Parallax baseline.
type ParallaxOption func(*parallaxConfig) error

type parallaxConfig struct {
	order       []string
	ratio       float64
	deviceTable bool
	maxStates   int
}

// ParallaxJoinOrder sets the order in which nodes joined: the allocator
// sorts nodes by capacity, and ties keep this order. Nodes not named
// follow in fleet (ID) order, the default.
func ParallaxJoinOrder(ids ...string) ParallaxOption {
	ids = append([]string(nil), ids...)
	return func(c *parallaxConfig) error { c.order = ids; return nil }
}

// ParallaxParamRatio sets the share of memory for weights (default 0.65).
func ParallaxParamRatio(r float64) ParallaxOption {
	return func(c *parallaxConfig) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("%w: parallax param ratio %v not in (0, 1]", ErrBadOption, r)
		}
		c.ratio = r
		return nil
	}
}

// ParallaxDeviceTable makes water-filling weigh nodes by the TFLOPS that
// Parallax's own detection would report (its table knows the A100, RTX
// 5090 and RTX 4090; any other NVIDIA GPU counts as 50 TFLOPS) instead of
// the datasheet figure in layers.Hardware. See ParallaxTFLOPS.
func ParallaxDeviceTable(on bool) ParallaxOption {
	return func(c *parallaxConfig) error { c.deviceTable = on; return nil }
}

// ParallaxMaxStates bounds the memo of one pipeline count's search.
func ParallaxMaxStates(n int) ParallaxOption {
	return func(c *parallaxConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: parallax max states %d < 1", ErrBadOption, n)
		}
		c.maxStates = n
		return nil
	}
}

// ParallaxPolicy is the Parallax baseline. Build it with NewParallax.
type ParallaxPolicy struct {
	cfg parallaxConfig
	err error
}

// NewParallax returns the Parallax baseline. An invalid option makes Plan
// and Run return its error.
func NewParallax(opts ...ParallaxOption) *ParallaxPolicy {
	p := &ParallaxPolicy{cfg: parallaxConfig{ratio: DefaultParallaxParamRatio, maxStates: DefaultParallaxMaxStates}}
	for _, o := range opts {
		if err := o(&p.cfg); err != nil && p.err == nil {
			p.err = err
		}
	}
	return p
}

// Name implements Policy.
func (p *ParallaxPolicy) Name() string { return "parallax" }

// Plan implements Policy.
func (p *ParallaxPolicy) Plan(ctx context.Context, f *layers.Fleet) (layers.LayerMap, error) {
	r, err := p.Run(ctx, f)
	return r.Map, err
}

// ParallaxResult is a Parallax run with its statistics.
type ParallaxResult struct {
	Map layers.LayerMap
	// Pipelines are the chosen pipelines in the order they closed, each
	// in stage order; a node that water-filling left with no layer is
	// left out.
	Pipelines [][]string
	// K is the chosen pipeline count and Stages s*(K).
	K, Stages int
	// States is the number of memoised search states over all k (and the
	// re-run of the chosen k that recovers its pipelines).
	States int
	// Unused lists nodes in no pipeline.
	Unused []string
}

// ParallaxCapacity is Parallax's layer capacity of a node:
// ⌊(memory·ratio − end bytes)/layer bytes⌋, where the end bytes are the
// embedding on a first stage and the head on a last one (once if the two
// are tied and on the same node). A node's MaxLayers caps it.
func ParallaxCapacity(m layers.ModelSpec, n layers.Node, ratio float64, e layers.Ends) int {
	avail := math.Floor(n.Hardware.MemoryBytes * ratio)
	if e&layers.EndEmbed != 0 {
		avail -= m.EmbeddingBytes()
	}
	if e&layers.EndHead != 0 && !(e&layers.EndEmbed != 0 && m.TiedEmbedding) {
		avail -= m.HeadBytes()
	}
	c := math.Floor(avail / m.LayerWeightBytes())
	if !(c > 0) {
		return 0
	}
	c = math.Min(c, 1<<30)
	if n.MaxLayers > 0 {
		c = math.Min(c, float64(n.MaxLayers))
	}
	return int(c)
}

// Parallax's detection tables (src/parallax/server/server_info.py):
// NVIDIA by name substring, Apple silicon by chip name.
var (
	parallaxNVIDIA = []struct {
		sub    string
		tflops float64
	}{{"a100", 312}, {"rtx5090", 104.8}, {"rtx4090", 82.6}}
	parallaxApple = map[string]float64{
		"m1": 4.58, "m1pro": 10.6, "m1max": 21.2,
		"m2": 7.1, "m2pro": 11.36, "m2max": 26.98, "m2ultra": 53.96,
		"m3": 7.1, "m3pro": 9.94, "m3max": 28.4,
		"m4": 8.52, "m4pro": 17.04, "m4max": 34.08, "m5": 10.27,
	}
)

// ParallaxUnknownTFLOPS is what Parallax assumes for an NVIDIA GPU that
// is not in its table.
const ParallaxUnknownTFLOPS = 50

// ParallaxTFLOPS is the FP16 TFLOPS Parallax's detection reports for a
// device name: its table's figure, or ParallaxUnknownTFLOPS. Names are
// matched without case, spaces, '-' or '_', so "rtx4090" and
// "NVIDIA GeForce RTX 4090" agree.
func ParallaxTFLOPS(name string) float64 {
	n := strings.NewReplacer(" ", "", "-", "", "_", "").Replace(strings.ToLower(name))
	if v, ok := parallaxApple[strings.TrimPrefix(n, "apple")]; ok {
		return v
	}
	for _, d := range parallaxNVIDIA {
		if strings.Contains(n, d.sub) {
			return d.tflops
		}
	}
	return ParallaxUnknownTFLOPS
}

// pxNode is one node as the allocator sees it.
type pxNode struct {
	id              string
	cap, capE, capH int // plain, with the embedding, with the head
	tflops          float64
}

// Run places the fleet as Parallax's DP allocator would.
func (p *ParallaxPolicy) Run(ctx context.Context, f *layers.Fleet) (ParallaxResult, error) {
	if p.err != nil {
		return ParallaxResult{}, fmt.Errorf("parallax: %w", p.err)
	}
	if err := checkFleet(f); err != nil {
		return ParallaxResult{}, fmt.Errorf("parallax: %w", err)
	}
	order, err := joinOrder(f, p.cfg.order)
	if err != nil {
		return ParallaxResult{}, fmt.Errorf("parallax: %w", err)
	}
	L := f.Model.Layers
	nodes := make([]pxNode, len(order))
	total := 0
	for k, i := range order {
		n := f.Profiles[i].Node
		x := pxNode{id: n.ID,
			cap:  ParallaxCapacity(f.Model, n, p.cfg.ratio, 0),
			capE: ParallaxCapacity(f.Model, n, p.cfg.ratio, layers.EndEmbed),
			capH: ParallaxCapacity(f.Model, n, p.cfg.ratio, layers.EndHead),
		}
		x.tflops = n.Hardware.TFLOPS
		if p.cfg.deviceTable {
			x.tflops = ParallaxTFLOPS(n.Hardware.Name)
		}
		nodes[k] = x
		total += x.cap
	}
	// The allocator keeps nodes sorted by capacity, largest first; the
	// sort is stable, so ties stay in join order.
	sort.SliceStable(nodes, func(a, b int) bool { return nodes[a].cap > nodes[b].cap })
	if total < L {
		return ParallaxResult{}, fmt.Errorf("parallax: %w: total layer capacity %d < %d layers of %s",
			ErrNoCapacity, total, L, f.Model.Name)
	}

	d := &pxDP{ctx: ctx, L: L, maxStates: p.cfg.maxStates, n: len(nodes)}
	d.cap, d.capE, d.capH = make([]int, len(nodes)), make([]int, len(nodes)), make([]int, len(nodes))
	d.suffix = make([]int, len(nodes)+1)
	for i := len(nodes) - 1; i >= 0; i-- {
		d.cap[i], d.capE[i], d.capH[i] = nodes[i].cap, nodes[i].capE, nodes[i].capH
		d.suffix[i] = d.suffix[i+1] + nodes[i].cap
	}
	res := ParallaxResult{}
	bestK, bestS := 0, 0
	maxK := min(len(nodes), d.suffix[0]/L)
	for k := 1; k <= maxK; k++ {
		s, err := d.run(k)
		res.States += d.states()
		if err != nil {
			return ParallaxResult{}, fmt.Errorf("parallax: k=%d of %d: %w", k, maxK, err)
		}
		// Z(k) = k²/s*(k), compared exactly; ties keep the smaller k.
		if s < pxInf && (bestK == 0 || k*k*bestS > bestK*bestK*s) {
			bestK, bestS = k, s
		}
	}
	if bestK == 0 {
		return ParallaxResult{}, fmt.Errorf("parallax: %w: no pipeline fits %s", ErrNoCapacity, f.Model.Name)
	}
	if d.k != bestK {
		// The memo holds the last k searched: search the chosen one again.
		if _, err := d.run(bestK); err != nil {
			return ParallaxResult{}, fmt.Errorf("parallax: k=%d again: %w", bestK, err)
		}
		res.States += d.states()
	}
	pipes, err := d.backtrack(bestK)
	if err != nil {
		return ParallaxResult{}, fmt.Errorf("parallax: k=%d backtrack: %w", bestK, err)
	}
	res.K, res.Stages = bestK, bestS

	used := make([]bool, len(nodes))
	var stages []layers.Stage
	for _, pipe := range pipes {
		caps := make([]int, len(pipe))
		power := make([]float64, len(pipe))
		// Stage order: capacity, largest first (stable).
		sort.SliceStable(pipe, func(a, b int) bool { return nodes[pipe[a]].cap > nodes[pipe[b]].cap })
		for j, v := range pipe {
			used[v] = true
			switch {
			case j == 0:
				caps[j] = nodes[v].capE // one node alone also counts only the embedding, as Parallax does
			case j == len(pipe)-1:
				caps[j] = nodes[v].capH
			default:
				caps[j] = nodes[v].cap
			}
			power[j] = nodes[v].tflops
		}
		counts, err := WaterFill(caps, power, L)
		if err != nil {
			return ParallaxResult{}, fmt.Errorf("parallax: pipeline %d: %w", len(res.Pipelines), err)
		}
		var ids []string
		start := 0
		for j, c := range counts {
			if c == 0 {
				continue
			}
			id := nodes[pipe[j]].id
			ids = append(ids, id)
			stages = append(stages, layers.Stage{Node: id, Range: layers.Range{Start: start, End: start + c}})
			start += c
		}
		res.Pipelines = append(res.Pipelines, ids)
	}
	for k, x := range nodes {
		if !used[k] {
			res.Unused = append(res.Unused, x.id)
		}
	}
	sort.Strings(res.Unused)
	m, err := layers.NewLayerMap(L, 0, stages...)
	if err != nil {
		return ParallaxResult{}, fmt.Errorf("parallax: %w", err)
	}
	res.Map = m
	return res, nil
}

// WaterFill splits L layers over one pipeline's stages in proportion to
// power, capped by caps: it finds λ by bisection so that
// Σ min(cap_i, λ·power_i) = L, rounds every share down and hands the
// remaining layers out one each by largest fractional part (ties to the
// earlier stage), skipping stages at their cap. Like Parallax it fails
// when a cap is not positive or the caps cannot hold L.
func WaterFill(caps []int, power []float64, L int) ([]int, error) {
	n := len(caps)
	if n == 0 || len(power) != n || L <= 0 {
		return nil, fmt.Errorf("water-filling: %d caps, %d powers, %d layers", n, len(power), L)
	}
	sum, hi := 0, 0.0
	for i, c := range caps {
		if c <= 0 {
			return nil, fmt.Errorf("water-filling: stage %d has non-positive capacity %d", i, c)
		}
		if !(power[i] > 0) || math.IsInf(power[i], 0) {
			return nil, fmt.Errorf("water-filling: stage %d has power %v", i, power[i])
		}
		sum += c
		hi = math.Max(hi, float64(c)/power[i])
	}
	if sum < L {
		return nil, fmt.Errorf("water-filling: capacity %d < %d layers", sum, L)
	}
	at := func(lam float64) float64 {
		s := 0.0
		for i, c := range caps {
			s += math.Min(float64(c), lam*power[i])
		}
		return s
	}
	lo := 0.0
	for range parallaxBisections {
		mid := (lo + hi) / 2
		if at(mid) >= float64(L) {
			hi = mid
		} else {
			lo = mid
		}
	}
	target := make([]float64, n)
	counts := make([]int, n)
	left := L
	for i, c := range caps {
		target[i] = math.Min(float64(c), hi*power[i])
		counts[i] = min(c, int(math.Floor(target[i])))
		left -= counts[i]
	}
	if left < 0 {
		return nil, fmt.Errorf("water-filling: %d layers over", -left)
	}
	byFrac := make([]int, n)
	for i := range byFrac {
		byFrac[i] = i
	}
	sort.SliceStable(byFrac, func(a, b int) bool {
		return target[byFrac[a]]-float64(counts[byFrac[a]]) > target[byFrac[b]]-float64(counts[byFrac[b]])
	})
	for _, i := range byFrac {
		if left == 0 {
			break
		}
		if counts[i] < caps[i] {
			counts[i]++
			left--
		}
	}
	if left != 0 {
		return nil, fmt.Errorf("water-filling: %d layers left over", left)
	}
	return counts, nil
}

const pxInf = math.MaxInt32 / 2

// pxDP is the memoised search for s*(k): nodes are taken in order, and
// each is skipped, added to an open pipeline or used to open a new one.
// A state is (next node, open pipelines' remaining layers as a sorted
// multiset, closed pipelines).
type pxDP struct {
	ctx              context.Context
	L, n, k          int
	cap, capE, capH  []int
	suffix           []int                // Σ cap of nodes i.. (for pruning)
	small            []map[[16]byte]int32 // by node index
	memo             []map[string]int32
	count            int
	bufs             [][]int // per-level scratch for the next open multiset
	maxStates, steps int
	err              error
	key              []byte
}

func (d *pxDP) states() int { return d.count }

func (d *pxDP) run(k int) (int, error) {
	d.k, d.err, d.count = k, nil, 0
	// One memo per node index: the depth-first search works on a few
	// neighbouring levels at a time, so small per-level tables stay in
	// cache where one big table would miss on every probe.
	d.small, d.memo = make([]map[[16]byte]int32, d.n), make([]map[string]int32, d.n)
	if len(d.bufs) != d.n {
		d.bufs = make([][]int, d.n)
	}
	s := d.solve(0, nil, 0)
	if d.err != nil {
		return 0, d.err
	}
	return s, nil
}

// smallKey packs a state of level i into 16 bytes when it fits: closed
// pipelines (1 byte), then the residuals, one byte each when L < 256
// (else two), zero-padded; residuals are at least 1, so the padding is
// unambiguous. Other states go to a string-keyed memo.
func (d *pxDP) smallKey(open []int, fin int) (key [16]byte, ok bool) {
	width := 1
	if d.L >= 256 {
		width = 2
	}
	if fin >= 1<<8 || 1+width*len(open) > len(key) {
		return key, false
	}
	key[0] = byte(fin)
	for j, r := range open {
		if width == 1 {
			key[1+j] = byte(r)
		} else {
			key[1+2*j], key[2+2*j] = byte(r), byte(r>>8)
		}
	}
	return key, true
}

func (d *pxDP) encode(open []int, fin int) []byte {
	b := binary.AppendUvarint(d.key[:0], uint64(fin))
	for _, r := range open {
		b = binary.AppendUvarint(b, uint64(r))
	}
	d.key = b
	return b
}

// move is one choice for node i: add it to open pipeline j, or open a
// new one (j = -1). It yields the next open multiset, in level i's
// scratch buffer (valid until the next move at that level), and how many
// pipelines it closes.
func (d *pxDP) move(i int, open []int, j int) (next []int, closed int) {
	if j == -1 {
		r := d.L - d.capE[i]
		if r <= 0 {
			return open, 1
		}
		return d.insert(i, open, -1, r), 0
	}
	r := open[j] - d.cap[i]
	if r <= 0 {
		// It would cover the rest: it closes the pipeline if it also has
		// room for the head, else it takes what fits beside the head.
		r = open[j] - d.capH[i]
		if r <= 0 {
			out := d.bufs[i][:0]
			out = append(append(out, open[:j]...), open[j+1:]...)
			d.bufs[i] = out
			return out, 1
		}
	}
	return d.insert(i, open, j, r), 0
}

// insert returns open with element drop removed (-1: none) and r
// inserted in order, in level i's scratch buffer.
func (d *pxDP) insert(i int, open []int, drop, r int) []int {
	out := d.bufs[i][:0]
	done := false
	for j, v := range open {
		if j == drop {
			continue
		}
		if !done && r < v {
			out = append(out, r)
			done = true
		}
		out = append(out, v)
	}
	if !done {
		out = append(out, r)
	}
	d.bufs[i] = out
	return out
}

func (d *pxDP) solve(i int, open []int, fin int) int {
	if d.err != nil {
		return pxInf
	}
	if fin == d.k && len(open) == 0 {
		return 0
	}
	if i == d.n {
		return pxInf
	}
	// Parallax's prunes: too many pipelines, too little capacity left to
	// finish the open ones and open the rest, too few nodes left. They
	// are tested before the memo (Parallax memoises them too): the value
	// is the same, and the memo stays smaller.
	need := d.k - fin - len(open)
	openSum := 0
	for _, r := range open {
		openSum += r
	}
	if need < 0 || d.suffix[i] < openSum+need*d.L || fin+len(open)+d.n-i < d.k {
		return pxInf
	}
	sk, small := d.smallKey(open, fin)
	var lk string
	if small {
		if v, ok := d.small[i][sk]; ok {
			return int(v)
		}
	} else {
		key := d.encode(open, fin)
		if v, ok := d.memo[i][string(key)]; ok {
			return int(v)
		}
		lk = string(key)
	}
	d.steps++
	if d.steps%parallaxCheckEvery == 0 && d.ctx.Err() != nil {
		d.err = timedOut(d.ctx, fmt.Sprintf("%d states", d.states()))
		return pxInf
	}
	if d.states() >= d.maxStates {
		d.err = fmt.Errorf("%w: %w (%d states)", ErrTimedOut, errStateBudget, d.states())
		return pxInf
	}
	best := d.solve(i+1, open, fin)
	for j := range open {
		if j > 0 && open[j] == open[j-1] {
			continue // the same state as j-1, which won any tie
		}
		next, c := d.move(i, open, j)
		if v := 1 + d.solve(i+1, next, fin+c); v < best {
			best = v
		}
	}
	if need > 0 {
		next, c := d.move(i, open, -1)
		if v := 1 + d.solve(i+1, next, fin+c); v < best {
			best = v
		}
	}
	if small {
		if d.small[i] == nil {
			d.small[i] = make(map[[16]byte]int32)
		}
		d.small[i][sk] = int32(best)
	} else {
		if d.memo[i] == nil {
			d.memo[i] = make(map[string]int32)
		}
		d.memo[i][lk] = int32(best)
	}
	d.count++
	return best
}

// backtrack rebuilds the pipelines of s*(k) by replaying the choices in
// the search's order, on the memo of run(k). Pipelines come out in the
// order they close, each with its nodes in processing order.
func (d *pxDP) backtrack(k int) ([][]int, error) {
	if d.k != k || d.small == nil {
		return nil, fmt.Errorf("backtrack(%d) on the memo of k=%d", k, d.k)
	}
	type pipe struct {
		r     int
		nodes []int
	}
	var open []pipe
	var done [][]int
	fin := 0
	for i := 0; i < d.n && fin < k; i++ {
		// The open multiset in order; equal residuals keep their age.
		sort.SliceStable(open, func(a, b int) bool { return open[a].r < open[b].r })
		vals := make([]int, len(open))
		for j := range open {
			vals[j] = open[j].r
		}
		best, act := d.solve(i+1, vals, fin), -2
		need := k - fin - len(open)
		for j := range vals {
			if j > 0 && vals[j] == vals[j-1] {
				continue
			}
			next, c := d.move(i, vals, j)
			if v := 1 + d.solve(i+1, next, fin+c); v < best {
				best, act = v, j
			}
		}
		if need > 0 {
			next, c := d.move(i, vals, -1)
			if v := 1 + d.solve(i+1, next, fin+c); v < best {
				act = -1
			}
		}
		if d.err != nil {
			return nil, d.err
		}
		switch {
		case act == -2:
			continue
		case act == -1:
			r := d.L - d.capE[i]
			if r <= 0 {
				done = append(done, []int{i})
				fin++
			} else {
				open = append(open, pipe{r: r, nodes: []int{i}})
			}
		default:
			p := &open[act]
			p.nodes = append(p.nodes, i)
			r := p.r - d.cap[i]
			if r <= 0 {
				r = p.r - d.capH[i]
			}
			if r <= 0 {
				done = append(done, p.nodes)
				open = append(open[:act], open[act+1:]...)
				fin++
			} else {
				p.r = r
			}
		}
	}
	if fin != k || len(open) != 0 {
		return nil, fmt.Errorf("backtrack built %d of %d pipelines", fin, k)
	}
	return done, nil
}
