//go:build !amd64

package engine

func packedRowKernel(DType) func(out []float32, stride int, row []byte, x *act, cols int) {
	return nil
}
