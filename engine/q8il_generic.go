//go:build !amd64

package engine

// q8ilTile is q8ilPortable where there are no assembly kernels.
func q8ilTile(out []float32, ostride int, q *q8il, g, groups int, a *act, t0, T int) {
	q8ilPortable(out, ostride, q, g, groups, a, t0, T)
}

func quantizeQ8SIMD(x []float32, q []int8, d []float32) bool { return false }
