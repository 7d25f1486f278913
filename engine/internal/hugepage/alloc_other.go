//go:build !linux

package hugepage

// Alloc allocates n bytes (huge pages are asked for on Linux only).
func Alloc(n int) []byte { return make([]byte, n) }
