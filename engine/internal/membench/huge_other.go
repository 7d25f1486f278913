//go:build !linux || !(amd64 || arm64)

package membench

func adviseHugePages([]uint64) {}
