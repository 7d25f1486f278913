package engine

// AVX2 integer block sums for the K-quants that Q4_K_M files are mostly
// made of (quant_amd64.s). They return exactly the integers the portable
// kernels form, so the float part, shared in Go, gives the same bits.

//go:noescape
func sumsQ4K(q *byte, x *int8, sc *int16, nb int, out *int32)

//go:noescape
func sumsQ6K(q *byte, x *int8, sc *int16, nb int, out *int32)

// packedRowKernel returns a kernel computing one packed row's dot products
// with every activation row, or nil where only the portable one exists.
func packedRowKernel(t DType) func(out []float32, stride int, row []byte, x *act, cols int, s *packedScratch) {
	if !useSIMD || !hasAVX2 {
		return nil
	}
	switch t {
	case Q4_K:
		return rowQ4KAVX2
	case Q6_K:
		return rowQ6KAVX2
	}
	return nil
}

// packedScratch holds a row's unpacked scales and block sums.
type packedScratch struct {
	sc   []int16
	mins []int32
	sums []int32
}

func (s *packedScratch) grow(nb, per int) {
	if cap(s.sc) < nb*per {
		s.sc = make([]int16, nb*per)
		s.mins = make([]int32, nb*per)
		s.sums = make([]int32, nb)
	}
	s.sc, s.mins, s.sums = s.sc[:nb*per], s.mins[:nb*per], s.sums[:nb]
}

func rowQ4KAVX2(out []float32, stride int, row []byte, x *act, cols int, s *packedScratch) {
	nb := cols / 256
	s.grow(nb, 8)
	for b := 0; b < nb; b++ {
		scales := row[b*144+4 : b*144+16]
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, scales)
			s.sc[8*b+j], s.mins[8*b+j] = int16(sc), m
		}
	}
	for t := 0; t < x.n; t++ {
		xq, xd, bs := x.kq[t*cols:(t+1)*cols], x.kd[t*nb:(t+1)*nb], x.kbsums[t*cols/16:(t+1)*cols/16]
		sumsQ4K(&row[0], &xq[0], &s.sc[0], nb, &s.sums[0])
		acc := float32(0)
		for b := 0; b < nb; b++ {
			summ := int32(0)
			for j := 0; j < 8; j++ {
				summ += s.mins[8*b+j] * (int32(bs[16*b+2*j]) + int32(bs[16*b+2*j+1]))
			}
			blk := row[b*144:]
			acc += combineK(half(blk), half(blk[2:]), xd[b], s.sums[b], summ)
		}
		out[t*stride] = acc
	}
}

func rowQ6KAVX2(out []float32, stride int, row []byte, x *act, cols int, s *packedScratch) {
	nb := cols / 256
	s.grow(nb, 16)
	for b := 0; b < nb; b++ {
		for j := 0; j < 16; j++ {
			s.sc[16*b+j] = int16(int8(row[b*210+192+j]))
		}
	}
	for t := 0; t < x.n; t++ {
		xq, xd, bs := x.kq[t*cols:(t+1)*cols], x.kd[t*nb:(t+1)*nb], x.kbsums[t*cols/16:(t+1)*cols/16]
		sumsQ6K(&row[0], &xq[0], &s.sc[0], nb, &s.sums[0])
		acc := float32(0)
		for b := 0; b < nb; b++ {
			off := int32(0)
			for j := 0; j < 16; j++ {
				off += int32(s.sc[16*b+j]) * int32(bs[16*b+j])
			}
			acc += float32(float32(half(row[b*210+208:])*xd[b]) * float32(s.sums[b]-32*off))
		}
		out[t*stride] = acc
	}
}
