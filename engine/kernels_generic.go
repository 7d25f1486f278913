//go:build !amd64

package engine

// Without amd64's assembly every product takes the portable kernels, and
// no matrix takes an interleaved K-quant layout: the same bits, slower.

var (
	dotRowsF32 = dotRowsF32Portable
	useSIMD    = false
	hasAVX     = false
	hasFMA     = false
	useAVX512  = false
	// useKILKernels is the amd64 tests' switch; nothing reads it here.
	useKILKernels = false
)

const simdKernel = "f32 portable Go, q8_0 portable Go"

func dotStridedF32(out, w, x []float32, stride int) {
	c := len(x)
	for i := range out {
		out[i] = dotF32(w[i*stride:i*stride+c], x)
	}
}

func dotRowsHalf(out, w, x []float32) {
	c := len(x)
	for i := range out {
		out[i] = dotFused(w[i*c:(i+1)*c], x)
	}
}

func useKIL(DType) bool { return false }

var kilPrefetch = false

func useHIL() bool { return false }

func matmulHIL([]float32, *matrix, *act, int, int) { panic("engine: interleaved kernels need amd64") }

func kilKernel(DType, int, *byte, int, *int8, int, *float32, *byte, *float32, int) {
	panic("engine: interleaved kernels need amd64")
}

func widenRows(dst []float32, raw []byte, t DType) { widenRow(dst, raw, t) }

func halfDecode([]float32, *matrix, []float32, int, int) bool { return false }

func gemmTiles(_ []float32, _ *matrix, _ *act, r0, _ int) (int, int) { return r0, 0 }

func attnAV(out, v []float32, stride int, p []float32) { attnAVPortable(out, v, stride, p) }

func softmax(s []float32) { softmaxPortable(s) }

func scale(s []float32, f float32) { scalePortable(s, f) }

func siluMul(g, u []float32) { siluMulPortable(g, u) }

func softmaxSink(s []float32, sink float32) { softmaxSinkPortable(s, sink) }

func softmaxRows(s []float32, n int, sinks []float32) { softmaxRowsPortable(s, n, sinks) }

// q8ilTile is q8ilPortable where there are no assembly kernels.
func q8ilTile(out []float32, ostride int, q *q8il, g, groups int, a *act, t0, T int) {
	q8ilPortable(out, ostride, q, g, groups, a, t0, T)
}

func quantizeQ8SIMD(x []float32, q []int8, d []float32) bool { return false }

func quantizeQ8KSIMD(x []float32, q []int8, d []float32, bsums []int16) int { return 0 }

func useAMXFor(DType) bool { return false }

func expandQ4KAMX(*byte, int, *byte) { panic("engine: no AMX kernel on this architecture") }

func expandQ6KAMX(*byte, int, *byte) { panic("engine: no AMX kernel on this architecture") }

func gemmQ4K16AMX(*byte, *byte, int, *int8, int, *float32, *byte, *float32, int, *byte, int) {
	panic("engine: no AMX kernel on this architecture")
}

func gemmQ6K16AMX(*byte, *byte, int, *int8, int, *float32, *byte, *float32, int, *byte, int) {
	panic("engine: no AMX kernel on this architecture")
}
