package engine

// Until the assembly kernels are wired, amd64 uses the portable ones.
var (
	dotRowsF32 = dotRowsF32Portable
	dotRowsQ8  = dotRowsQ8Portable
)

const simdKernel = "portable Go"
