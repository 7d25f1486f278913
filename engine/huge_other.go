//go:build !linux

package engine

// weightBytes allocates n bytes for weights (see huge_linux.go).
func weightBytes(n int) []byte { return make([]byte, n) }
