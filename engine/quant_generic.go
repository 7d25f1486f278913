//go:build !amd64

package engine

func packedRowKernel(DType) func(out []float32, stride int, row []byte, x *act, t0, t1, cols int) {
	return nil
}

func hasAVX512Kernel(DType) bool { return false }

func packedRowsKernel(DType) func(out []float32, rows []byte, x *act, cols int) { return nil }

func packedTokRowsKernel(DType) func(out []float32, rows []byte, x *act, t, cols int) { return nil }
