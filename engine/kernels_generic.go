//go:build !amd64

package engine

var (
	dotRowsF32 = dotRowsF32Portable
	useSIMD    = false
	hasAVX     = false
	useAVX512  = false
)

const simdKernel = "f32 portable Go, q8_0 portable Go"

func dotStridedF32(out, w, x []float32, stride int) {
	c := len(x)
	for i := range out {
		out[i] = dotF32(w[i*stride:i*stride+c], x)
	}
}
