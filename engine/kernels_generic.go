//go:build !amd64

package engine

var (
	dotRowsF32 = dotRowsF32Portable
	dotRowsQ8  = dotRowsQ8Portable
	useSIMD    = false
)

const simdKernel = "portable Go"
