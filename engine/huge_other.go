//go:build !linux

package engine

// allocWeights allocates n bytes for weights (see huge_linux.go).
func allocWeights(n int) []byte { return make([]byte, n) }
