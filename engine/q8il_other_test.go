//go:build !amd64

package engine

func q8SIMDPaths() []q8Path { return nil }

func hasVNNIKernel() bool { return false }

func setVNNI(bool) {}
