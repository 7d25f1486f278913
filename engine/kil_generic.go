//go:build !amd64

package engine

// Without amd64's VNNI kernels no matrix takes the interleaved layout.
func useKIL(DType) bool { return false }

func kilKernel(DType, int, *byte, int, *int8, int, *float32, *byte, *float32, int) {
	panic("engine: interleaved kernels need amd64")
}

func widenRows(dst []float32, raw []byte, t DType) { widenRow(dst, raw, t) }

func halfDecode([]float32, *matrix, []float32, int, int) bool { return false }

func gemmTiles(_ []float32, _ *matrix, _ *act, r0, _ int) (int, int) { return r0, 0 }
