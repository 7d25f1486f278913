//go:build !linux

package routing

func threadCPU() int64 { return -1 }
