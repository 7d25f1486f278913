//go:build !linux || !(amd64 || arm64)

package engine

// adviseHugePages is a no-op where huge pages are not asked for.
func adviseHugePages([]byte) {}
