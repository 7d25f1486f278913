// Package kilorder is the column order of the engine's interleaved Q5_K
// and Q6_K layouts (engine/kil.go): where each 64-byte column of a
// super-block's quants goes, in the order the kernels first read them.
// The engine lays the weights out by it and engine/internal/kilgen
// generates the kernels that read them by it, so the two cannot drift.
package kilorder

// Q5K is the place of Q5_K's nibble column c (c < 32: pair c/8, column
// c%8) or fifth-bit column c−32.
func Q5K(c int) int {
	switch {
	case c >= 32:
		return 2*(c-32) + 1
	case c < 8:
		return 2 * c
	}
	return 8 + c
}

// Q6K is the place of Q6_K's column c of ql (c < 32: half c/16, groups
// c/8%2 (+2), column c%8) or of qh (c ≥ 32: half (c−32)/8, column c%8).
func Q6K(c int) int {
	if c >= 32 {
		n, k := (c-32)/8, c%8
		return 24*n + 2*k + 1
	}
	n, h, k := c/16, c/8%2, c%8
	if h == 0 {
		return 24*n + 2*k
	}
	return 24*n + 16 + k
}
