//go:build !amd64

package membench

func readPart(p []uint64) uint64 { return readPortable(p) }
