package engine

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block-quantised weight types in the layouts llama.cpp's quantizer writes.
// Weights stay packed in memory (a stage holds about its file bytes); each
// matrix product quantises its activations once, to Q8_0 blocks of 32 for
// the 32-element types and to Q8_K blocks of 256 for the K-quants and
// IQ4_XS, as ggml does.
//
// A dot product of one packed row with one quantised activation is, per
// block, an exact integer sum (its order cannot matter) followed by one or
// two float32 operations, each product rounded before it is added, and the
// blocks are added in order into one float32. That fixes every bit, so a
// SIMD kernel only has to produce the same integer sums.

// quantFormat describes one packed type.
type quantFormat struct {
	block, bytes int
	k            bool // activations as Q8_K (256 per block), else Q8_0
	// dequant unpacks one block into dst (block values), as ggml's
	// dequantize_row_* computes them.
	dequant func(dst []float32, b []byte)
	// dot is the integer part of one block against activations x (block
	// values) with Q8_K sub-sums bsums (K formats) or the block's scaled
	// sum xs (Q8_0 formats, as ggml's Q8_1 keeps it), combined with the
	// scales into the block's float32 contribution given the activation
	// scale dx.
	dot func(b []byte, x []int8, bsums []int16, xs float32, dx float32) float32
}

var quantFormats = map[DType]*quantFormat{
	Q4_0:   {32, 18, false, dequantQ4_0, dotQ4_0},
	Q4_1:   {32, 20, false, dequantQ4_1, dotQ4_1},
	Q5_0:   {32, 22, false, dequantQ5_0, dotQ5_0},
	Q5_1:   {32, 24, false, dequantQ5_1, dotQ5_1},
	IQ4_NL: {32, 18, false, dequantIQ4NL, dotIQ4NL},
	Q4_K:   {256, 144, true, dequantQ4K, dotQ4K},
	Q5_K:   {256, 176, true, dequantQ5K, dotQ5K},
	Q6_K:   {256, 210, true, dequantQ6K, dotQ6K},
	IQ4_XS: {256, 136, true, dequantIQ4XS, dotIQ4XS},
	MXFP4:  {32, 17, false, dequantMXFP4, dotMXFP4},
}

// kvaluesIQ4NL is the non-linear 4-bit grid of IQ4_NL and IQ4_XS.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func half(b []byte) float32 { return f16ToF32(binary.LittleEndian.Uint16(b)) }

// Dequantize unpacks n values of type t from raw, exactly as ggml's
// to_float does for the packed types (and by widening for F32/F16/BF16).
func Dequantize(t DType, raw []byte, n int) ([]float32, error) {
	need, ok := rowBytes(t, uint64(n))
	if !ok || uint64(len(raw)) < need {
		return nil, fmt.Errorf("%w: %d values of %s in %d bytes", ErrShape, n, t, len(raw))
	}
	out := make([]float32, n)
	le := binary.LittleEndian
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = f16ToF32(le.Uint16(raw[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = bf16ToF32(le.Uint16(raw[2*i:]))
		}
	case Q8_0:
		for b := 0; b < n/32; b++ {
			p := raw[34*b:]
			d := half(p)
			for i := 0; i < 32; i++ {
				out[32*b+i] = float32(int8(p[2+i])) * d
			}
		}
	default:
		f := quantFormats[t]
		if f == nil {
			return nil, fmt.Errorf("%w: %s", ErrUnsupportedType, t)
		}
		for b := 0; b < n/f.block; b++ {
			f.dequant(out[b*f.block:(b+1)*f.block], raw[b*f.bytes:(b+1)*f.bytes])
		}
	}
	return out, nil
}

// Quantize packs x in type t with the engine's own quantizers (those
// `strata model gen` writes with): F32, F16, BF16, Q8_0 and every packed
// type. len(x) must be a whole number of t's blocks.
func Quantize(t DType, x []float32) ([]byte, error) {
	if !t.Supported() {
		return nil, fmt.Errorf("%w: quantize to %s", ErrUnsupportedType, t)
	}
	if _, ok := rowBytes(t, uint64(len(x))); !ok {
		return nil, fmt.Errorf("%w: %d values are not whole %s blocks", ErrShape, len(x), t)
	}
	return encodeRow(nil, x, t), nil
}

// DotRow is the engine's dot product of one packed row w (len(x) values
// of type t) with x, x quantised as a matrix product quantises its
// activations, computed by the kernel a decode step uses: what checks
// against other implementations need.
func DotRow(t DType, w []byte, x []float32) (float32, error) {
	f := quantFormats[t]
	if f == nil {
		return 0, fmt.Errorf("%w: DotRow on %s (packed types only)", ErrUnsupportedType, t)
	}
	if need, ok := rowBytes(t, uint64(len(x))); !ok || uint64(len(w)) != need || len(x) == 0 {
		return 0, fmt.Errorf("%w: %d values of %s in %d bytes", ErrShape, len(x), t, len(w))
	}
	m := &matrix{rows: 1, cols: len(x), raw: w, qf: f, typ: t}
	a := newAct(x, 1, len(x))
	a.prepare(m)
	out := make([]float32, 1)
	matmulPacked(out, m, a, 0, 1)
	return out[0], nil
}

// --- 32-element formats, against Q8_0 activations ---

func dequantQ4_0(dst []float32, b []byte) {
	d, qs := half(b), b[2:18]
	for j := 0; j < 16; j++ {
		dst[j] = float32(int32(qs[j]&0xf)-8) * d
		dst[j+16] = float32(int32(qs[j]>>4)-8) * d
	}
}

func dotQ4_0(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	qs := b[2:18:18]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		s += (int32(qs[j]&0xf)-8)*int32(x[j]) + (int32(qs[j]>>4)-8)*int32(x[j+16])
	}
	return float32(float32(half(b)*dx) * float32(s))
}

func dequantQ4_1(dst []float32, b []byte) {
	d, m, qs := half(b), half(b[2:]), b[4:20]
	for j := 0; j < 16; j++ {
		dst[j] = float32(float32(qs[j]&0xf)*d) + m
		dst[j+16] = float32(float32(qs[j]>>4)*d) + m
	}
}

func dotQ4_1(b []byte, x []int8, _ []int16, xs float32, dx float32) float32 {
	qs := b[4:20:20]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		s += int32(qs[j]&0xf)*int32(x[j]) + int32(qs[j]>>4)*int32(x[j+16])
	}
	return float32(float32(half(b)*dx)*float32(s)) + float32(half(b[2:])*xs)
}

// q5 returns the 5-bit values j and j+16 of a Q5_0/Q5_1 block.
func q5(qh uint32, q byte, j int) (int32, int32) {
	return int32(q&0xf) | int32((qh>>j)<<4&0x10), int32(q>>4) | int32((qh>>(j+12))&0x10)
}

func dequantQ5_0(dst []float32, b []byte) {
	d, qh, qs := half(b), binary.LittleEndian.Uint32(b[2:]), b[6:22]
	for j := 0; j < 16; j++ {
		x0, x1 := q5(qh, qs[j], j)
		dst[j] = float32(x0-16) * d
		dst[j+16] = float32(x1-16) * d
	}
}

func dotQ5_0(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	qh, qs := binary.LittleEndian.Uint32(b[2:]), b[6:22:22]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		x0, x1 := q5(qh, qs[j], j)
		s += (x0-16)*int32(x[j]) + (x1-16)*int32(x[j+16])
	}
	return float32(float32(half(b)*dx) * float32(s))
}

func dequantQ5_1(dst []float32, b []byte) {
	d, m, qh, qs := half(b), half(b[2:]), binary.LittleEndian.Uint32(b[4:]), b[8:24]
	for j := 0; j < 16; j++ {
		x0, x1 := q5(qh, qs[j], j)
		dst[j] = float32(float32(x0)*d) + m
		dst[j+16] = float32(float32(x1)*d) + m
	}
}

func dotQ5_1(b []byte, x []int8, _ []int16, xs float32, dx float32) float32 {
	qh, qs := binary.LittleEndian.Uint32(b[4:]), b[8:24:24]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		x0, x1 := q5(qh, qs[j], j)
		s += x0*int32(x[j]) + x1*int32(x[j+16])
	}
	return float32(float32(half(b)*dx)*float32(s)) + float32(half(b[2:])*xs)
}

func dequantIQ4NL(dst []float32, b []byte) {
	d, qs := half(b), b[2:18]
	for j := 0; j < 16; j++ {
		dst[j] = d * float32(kvaluesIQ4NL[qs[j]&0xf])
		dst[j+16] = d * float32(kvaluesIQ4NL[qs[j]>>4])
	}
}

func dotIQ4NL(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	qs := b[2:18:18]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		s += int32(kvaluesIQ4NL[qs[j]&0xf])*int32(x[j]) + int32(kvaluesIQ4NL[qs[j]>>4])*int32(x[j+16])
	}
	return float32(float32(half(b)*dx) * float32(s))
}

// MXFP4 (the OCP microscaling FP4 of gpt-oss's experts): per 32 values an
// E8M0 exponent byte and 16 bytes of E2M1 nibbles, low nibbles the first
// 16 values. ggml keeps the E2M1 values doubled as integers (kvaluesMXFP4)
// and halves the scale instead (e8m0Half), so that a block's dot product
// with Q8_0 activations is an integer sum, like IQ4_NL's.
var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half is 2^(e−128): half the E8M0 scale e, as ggml's
// GGML_E8M0_TO_FP32_HALF computes it (subnormal for e < 2).
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// e8m0HalfTable is e8m0Half of every byte, for the SIMD kernels.
var e8m0HalfTable = func() *[256]float32 {
	var t [256]float32
	for i := range t {
		t[i] = e8m0Half(byte(i))
	}
	return &t
}()

func dequantMXFP4(dst []float32, b []byte) {
	d, qs := e8m0Half(b[0]), b[1:17]
	for j := 0; j < 16; j++ {
		dst[j] = float32(kvaluesMXFP4[qs[j]&0xf]) * d
		dst[j+16] = float32(kvaluesMXFP4[qs[j]>>4]) * d
	}
}

func dotMXFP4(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	qs := b[1:17:17]
	x = x[:32:32]
	s := int32(0)
	for j := 0; j < 16; j++ {
		s += int32(kvaluesMXFP4[qs[j]&0xf])*int32(x[j]) + int32(kvaluesMXFP4[qs[j]>>4])*int32(x[j+16])
	}
	return float32(float32(e8m0Half(b[0])*dx) * float32(s))
}

// --- 256-element formats, against Q8_K activations ---

// scaleMinK4 is the j-th 6-bit scale and min of a Q4_K/Q5_K block.
func scaleMinK4(j int, q []byte) (sc, m int32) {
	if j < 4 {
		return int32(q[j] & 63), int32(q[j+4] & 63)
	}
	return int32(q[j+4]&0xf | (q[j-4]>>6)<<4), int32(q[j+4]>>4 | (q[j]>>6)<<4)
}

func dequantQ4K(dst []float32, b []byte) {
	d, dmin, scales, q := half(b), half(b[2:]), b[4:16], b[16:144]
	for g := 0; g < 4; g++ {
		sc, m := scaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		y := dst[64*g : 64*g+64]
		for l := 0; l < 32; l++ {
			y[l] = float32(d1*float32(q[32*g+l]&0xf)) - m1
			y[l+32] = float32(d2*float32(q[32*g+l]>>4)) - m2
		}
	}
}

// combineK is a K block's float part: d·dx·sumi − dmin·dx·summ.
func combineK(d, dmin, dx float32, sumi, summ int32) float32 {
	return float32(float32(d*dx)*float32(sumi)) - float32(float32(dmin*dx)*float32(summ))
}

func dotQ4K(b []byte, x []int8, bsums []int16, _ float32, dx float32) float32 {
	scales, q := b[4:16:16], b[16:144:144]
	x = x[:256:256]
	bsums = bsums[:16:16]
	sumi, summ := int32(0), int32(0)
	for g := 0; g < 4; g++ {
		s0, s1 := int32(0), int32(0)
		for l := 0; l < 32; l++ {
			s0 += int32(q[32*g+l]&0xf) * int32(x[64*g+l])
			s1 += int32(q[32*g+l]>>4) * int32(x[64*g+32+l])
		}
		sc0, m0 := scaleMinK4(2*g, scales)
		sc1, m1 := scaleMinK4(2*g+1, scales)
		sumi += sc0*s0 + sc1*s1
		summ += m0*(int32(bsums[4*g])+int32(bsums[4*g+1])) + m1*(int32(bsums[4*g+2])+int32(bsums[4*g+3]))
	}
	return combineK(half(b), half(b[2:]), dx, sumi, summ)
}

func dequantQ5K(dst []float32, b []byte) {
	d, dmin, scales, qh, ql := half(b), half(b[2:]), b[4:16], b[16:48], b[48:176]
	for g := 0; g < 4; g++ {
		sc, m := scaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		u1, u2 := byte(1)<<(2*g), byte(2)<<(2*g)
		y := dst[64*g : 64*g+64]
		for l := 0; l < 32; l++ {
			v0, v1 := int32(ql[32*g+l]&0xf), int32(ql[32*g+l]>>4)
			if qh[l]&u1 != 0 {
				v0 += 16
			}
			if qh[l]&u2 != 0 {
				v1 += 16
			}
			y[l] = float32(d1*float32(v0)) - m1
			y[l+32] = float32(d2*float32(v1)) - m2
		}
	}
}

func dotQ5K(b []byte, x []int8, bsums []int16, _ float32, dx float32) float32 {
	scales, qh, ql := b[4:16:16], b[16:48:48], b[48:176:176]
	x = x[:256:256]
	bsums = bsums[:16:16]
	sumi, summ := int32(0), int32(0)
	for g := 0; g < 4; g++ {
		s0, s1 := int32(0), int32(0)
		for l := 0; l < 32; l++ {
			v0 := int32(ql[32*g+l]&0xf) | int32(qh[l]>>(2*g)&1)<<4
			v1 := int32(ql[32*g+l]>>4) | int32(qh[l]>>(2*g+1)&1)<<4
			s0 += v0 * int32(x[64*g+l])
			s1 += v1 * int32(x[64*g+32+l])
		}
		sc0, m0 := scaleMinK4(2*g, scales)
		sc1, m1 := scaleMinK4(2*g+1, scales)
		sumi += sc0*s0 + sc1*s1
		summ += m0*(int32(bsums[4*g])+int32(bsums[4*g+1])) + m1*(int32(bsums[4*g+2])+int32(bsums[4*g+3]))
	}
	return combineK(half(b), half(b[2:]), dx, sumi, summ)
}

// q6 returns the four 6-bit values (minus 32) at l of a Q6_K half block.
func q6(ql, qh []byte, l int) (q1, q2, q3, q4 int32) {
	q1 = int32(ql[l]&0xf|(qh[l]&3)<<4) - 32
	q2 = int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
	q3 = int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
	q4 = int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
	return
}

func dequantQ6K(dst []float32, b []byte) {
	d := half(b[208:])
	for n := 0; n < 2; n++ {
		ql, qh, sc := b[64*n:64*n+64], b[128+32*n:128+32*n+32], b[192+8*n:192+8*n+8]
		y := dst[128*n : 128*n+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1, q2, q3, q4 := q6(ql, qh, l)
			y[l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

func dotQ6K(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	x = x[:256:256]
	sumi := int32(0)
	for n := 0; n < 2; n++ {
		ql, qh, sc := b[64*n:64*n+64:64*n+64], b[128+32*n:128+32*n+32:128+32*n+32], b[192+8*n:192+8*n+8:192+8*n+8]
		xs := x[128*n : 128*n+128 : 128*n+128]
		var sub [8]int32
		for l := 0; l < 32; l++ {
			is := l / 16
			q1, q2, q3, q4 := q6(ql, qh, l)
			sub[is] += q1 * int32(xs[l])
			sub[is+2] += q2 * int32(xs[l+32])
			sub[is+4] += q3 * int32(xs[l+64])
			sub[is+6] += q4 * int32(xs[l+96])
		}
		for k := 0; k < 8; k++ {
			sumi += int32(int8(sc[k])) * sub[k]
		}
	}
	return float32(float32(half(b[208:])*dx) * float32(sumi))
}

// iq4xsScale is the signed 6-bit scale of sub-block ib of an IQ4_XS block.
func iq4xsScale(b []byte, ib int) int32 {
	h := binary.LittleEndian.Uint16(b[2:])
	ls := int32(b[4+ib/2]>>(4*(ib%2))&0xf) | int32(h>>(2*ib)&3)<<4
	return ls - 32
}

func dequantIQ4XS(dst []float32, b []byte) {
	d, qs := half(b), b[8:136]
	for ib := 0; ib < 8; ib++ {
		dl := d * float32(iq4xsScale(b, ib))
		for j := 0; j < 16; j++ {
			dst[32*ib+j] = dl * float32(kvaluesIQ4NL[qs[16*ib+j]&0xf])
			dst[32*ib+j+16] = dl * float32(kvaluesIQ4NL[qs[16*ib+j]>>4])
		}
	}
}

func dotIQ4XS(b []byte, x []int8, _ []int16, _ float32, dx float32) float32 {
	qs := b[8:136:136]
	x = x[:256:256]
	sumi := int32(0)
	for ib := 0; ib < 8; ib++ {
		s := int32(0)
		for j := 0; j < 16; j++ {
			s += int32(kvaluesIQ4NL[qs[16*ib+j]&0xf])*int32(x[32*ib+j]) + int32(kvaluesIQ4NL[qs[16*ib+j]>>4])*int32(x[32*ib+j+16])
		}
		sumi += iq4xsScale(b, ib) * s
	}
	return float32(float32(half(b)*dx) * float32(sumi))
}

// --- activations ---

// quantizeQ8K quantises x (a whole number of 256-blocks) as ggml's
// quantize_row_q8_K does: per block, scale max/−127 for the value of
// largest magnitude, values rounded to nearest even, and 16-element sums.
// The blocks the AVX-512 kernel leaves (quantizeQ8KSIMD) take the
// portable form, with the same bits.
func quantizeQ8K(x []float32, q []int8, d []float32, bsums []int16) {
	for b := 0; b < len(d); b++ {
		b += quantizeQ8KSIMD(x[256*b:], q[256*b:], d[b:], bsums[16*b:])
		if b < len(d) {
			quantizeQ8KBlock(x[256*b:256*b+256], q[256*b:256*b+256], &d[b], bsums[16*b:16*b+16])
		}
	}
}

// quantizeQ8KBlock is quantizeQ8K's portable form for one block.
func quantizeQ8KBlock(xb []float32, qb []int8, d *float32, bsums []int16) {
	amax, mx := float32(0), float32(0)
	for _, v := range xb {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	if amax == 0 {
		*d = 0
		clear(qb)
		clear(bsums)
		return
	}
	iscale := -127 / mx
	for i, v := range xb {
		qb[i] = int8(min(127, math.RoundToEven(float64(iscale*v))))
	}
	for j := range 16 {
		s := int16(0)
		for _, v := range qb[16*j : 16*j+16] {
			s += int16(v)
		}
		bsums[j] = s
	}
	*d = 1 / iscale
}

// q8Sums is, per 32-block of Q8_0-quantised activations, d·Σq rounded to
// f16, as ggml's Q8_1 blocks carry it for the types with a min.
func q8Sums(q []int8, d []float32) []float32 {
	s := make([]float32, len(d))
	for b := range s {
		sum := int32(0)
		for _, v := range q[32*b : 32*b+32] {
			sum += int32(v)
		}
		s[b] = f16ToF32(f32ToF16(d[b] * float32(sum)))
	}
	return s
}

// dotRowQuant is one packed row against one quantised activation row.
func dotRowQuant(f *quantFormat, w []byte, xq []int8, xd []float32, aux []int16, sums []float32) float32 {
	acc := float32(0)
	for b := range xd {
		blk := w[b*f.bytes : (b+1)*f.bytes : (b+1)*f.bytes]
		xb := xq[b*f.block : (b+1)*f.block : (b+1)*f.block]
		if f.k {
			acc += f.dot(blk, xb, aux[16*b:16*b+16], 0, xd[b])
		} else {
			acc += f.dot(blk, xb, nil, sums[b], xd[b])
		}
	}
	return acc
}
