package sim

// maxFlow solves a max flow by Edmonds–Karp (shortest augmenting paths,
// adjacency in insertion order, so the result is deterministic). Helix
// routes by the flow on each link; max flows are not unique, so ours may
// split differently from networkx's while having the same value.
type flowGraph struct {
	n    int
	head [][]int // vertex → edge indices
	to   []int
	cap  []float64
	flow []float64
}

func newFlowGraph(n int) *flowGraph { return &flowGraph{n: n, head: make([][]int, n)} }

// add inserts u→v with capacity c and its residual twin; it returns the
// forward edge's index.
func (g *flowGraph) add(u, v int, c float64) int {
	e := len(g.to)
	g.to = append(g.to, v, u)
	g.cap = append(g.cap, c, 0)
	g.flow = append(g.flow, 0, 0)
	g.head[u] = append(g.head[u], e)
	g.head[v] = append(g.head[v], e+1)
	return e
}

const flowEps = 1e-9

func (g *flowGraph) solve(s, t int) float64 {
	total := 0.0
	prev := make([]int, g.n)
	for {
		for i := range prev {
			prev[i] = -1
		}
		prev[s] = -2
		queue := []int{s}
		for len(queue) > 0 && prev[t] == -1 {
			u := queue[0]
			queue = queue[1:]
			for _, e := range g.head[u] {
				v := g.to[e]
				if prev[v] == -1 && g.cap[e]-g.flow[e] > flowEps {
					prev[v] = e
					queue = append(queue, v)
				}
			}
		}
		if prev[t] == -1 {
			return total
		}
		aug := -1.0
		for v := t; v != s; v = g.to[prev[v]^1] {
			e := prev[v]
			if r := g.cap[e] - g.flow[e]; aug < 0 || r < aug {
				aug = r
			}
		}
		for v := t; v != s; v = g.to[prev[v]^1] {
			e := prev[v]
			g.flow[e] += aug
			g.flow[e^1] -= aug
		}
		total += aug
	}
}
