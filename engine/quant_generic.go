//go:build !amd64

package engine

type packedScratch struct{}

func packedRowKernel(DType) func(out []float32, stride int, row []byte, x *act, cols int, s *packedScratch) {
	return nil
}
