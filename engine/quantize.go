package engine

import (
	"encoding/binary"
	"math"
)

// Our own quantizers for the packed types, used by `strata model gen` to
// write real-shaped files. They write llama.cpp's block layouts with a
// plain round-to-nearest per block (no search for the best scales, no
// importance matrix), which is all random weights need; files to check the
// arithmetic against come from ggml's own quantizer (engine/internal/refcheck).

// quantizeBlock appends the encoding of one block of x in type t.
func quantizeBlock(dst []byte, x []float32, t DType) []byte {
	switch t {
	case Q4_0:
		return quantLegacy(dst, x, 4, false)
	case Q4_1:
		return quantLegacy(dst, x, 4, true)
	case Q5_0:
		return quantLegacy(dst, x, 5, false)
	case Q5_1:
		return quantLegacy(dst, x, 5, true)
	case IQ4_NL:
		d := signedMax(x) / -127
		dst = binary.LittleEndian.AppendUint16(dst, f32ToF16(d))
		var qs [16]byte
		d = f16ToF32(f32ToF16(d))
		for j := 0; j < 16; j++ {
			qs[j] = nearestIQ4(x[j], d) | nearestIQ4(x[j+16], d)<<4
		}
		return append(dst, qs[:]...)
	case Q4_K, Q5_K:
		return quantK45(dst, x, t == Q5_K)
	case Q6_K:
		return quantQ6K(dst, x)
	case IQ4_XS:
		return quantIQ4XS(dst, x)
	case MXFP4:
		return quantMXFP4(dst, x)
	}
	panic("quantizeBlock: " + t.String())
}

// signedMax is the value of largest magnitude, with its sign.
func signedMax(x []float32) float32 {
	m := float32(0)
	for _, v := range x {
		if abs32(v) > abs32(m) {
			m = v
		}
	}
	return m
}

func abs32(v float32) float32 { return float32(math.Abs(float64(v))) }

func clampRound(v float32, lo, hi int32) int32 {
	r := int32(math.Round(float64(v)))
	return max(lo, min(hi, r))
}

// quantLegacy writes Q4_0/Q4_1/Q5_0/Q5_1: symmetric with an offset of half
// the range, or with a min.
func quantLegacy(dst []byte, x []float32, bits int, withMin bool) []byte {
	levels := int32(1)<<bits - 1
	var d, m float32
	if withMin {
		lo, hi := x[0], x[0]
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		d, m = (hi-lo)/float32(levels), lo
	} else {
		d = signedMax(x) / -float32(levels/2+1)
	}
	le := binary.LittleEndian
	dst = le.AppendUint16(dst, f32ToF16(d))
	if withMin {
		dst = le.AppendUint16(dst, f32ToF16(m))
	}
	d, m = f16ToF32(f32ToF16(d)), f16ToF32(f32ToF16(m))
	id := float32(0)
	if d != 0 {
		id = 1 / d
	}
	q := make([]int32, 32)
	for i, v := range x {
		if withMin {
			q[i] = clampRound((v-m)*id, 0, levels)
		} else {
			q[i] = clampRound(v*id, -(levels/2+1), levels/2) + levels/2 + 1
		}
	}
	if bits == 5 {
		qh := uint32(0)
		for j := 0; j < 16; j++ {
			qh |= uint32(q[j]>>4&1)<<j | uint32(q[j+16]>>4&1)<<(j+16)
		}
		dst = le.AppendUint32(dst, qh)
	}
	for j := 0; j < 16; j++ {
		dst = append(dst, byte(q[j]&0xf)|byte(q[j+16]&0xf)<<4)
	}
	return dst
}

func nearestIQ4(v, d float32) byte {
	if d == 0 {
		return 8 // the value closest to 0
	}
	t, best, bi := v/d, float32(math.Inf(1)), 0
	for i, k := range kvaluesIQ4NL {
		if e := abs32(t - float32(k)); e < best {
			best, bi = e, i
		}
	}
	return byte(bi)
}

// quantK45 writes Q4_K or Q5_K: 8 sub-blocks of 32, each with a 6-bit
// scale and min relative to the block's d and dmin.
func quantK45(dst []byte, x []float32, five bool) []byte {
	levels := float32(15)
	if five {
		levels = 31
	}
	var scale, mins [8]float32
	maxScale, maxMin := float32(0), float32(0)
	for j := 0; j < 8; j++ {
		lo, hi := float32(0), x[32*j]
		for _, v := range x[32*j : 32*j+32] {
			lo, hi = min(lo, v), max(hi, v)
		}
		scale[j], mins[j] = (hi-lo)/levels, -lo
		maxScale, maxMin = max(maxScale, scale[j]), max(maxMin, mins[j])
	}
	d, dmin := maxScale/63, maxMin/63
	le := binary.LittleEndian
	dst = le.AppendUint16(dst, f32ToF16(d))
	dst = le.AppendUint16(dst, f32ToF16(dmin))
	d, dmin = f16ToF32(f32ToF16(d)), f16ToF32(f32ToF16(dmin))
	var sc, mn [8]int32
	for j := 0; j < 8; j++ {
		if d > 0 {
			sc[j] = clampRound(scale[j]/d, 0, 63)
		}
		if dmin > 0 {
			mn[j] = clampRound(mins[j]/dmin, 0, 63)
		}
	}
	var s [12]byte
	for j := 0; j < 4; j++ {
		s[j] = byte(sc[j]) | byte(sc[j+4]>>4)<<6
		s[j+4] = byte(mn[j]) | byte(mn[j+4]>>4)<<6
		s[j+8] = byte(sc[j+4]&0xf) | byte(mn[j+4]&0xf)<<4
	}
	dst = append(dst, s[:]...)
	var q [256]int32
	for j := 0; j < 8; j++ {
		ds, dm := d*float32(sc[j]), dmin*float32(mn[j])
		for i := 32 * j; i < 32*j+32; i++ {
			if ds > 0 {
				q[i] = clampRound((x[i]+dm)/ds, 0, int32(levels))
			}
		}
	}
	if five {
		var qh [32]byte
		for g := 0; g < 4; g++ {
			for l := 0; l < 32; l++ {
				qh[l] |= byte(q[64*g+l]>>4&1)<<(2*g) | byte(q[64*g+32+l]>>4&1)<<(2*g+1)
			}
		}
		dst = append(dst, qh[:]...)
	}
	for g := 0; g < 4; g++ {
		for l := 0; l < 32; l++ {
			dst = append(dst, byte(q[64*g+l]&0xf)|byte(q[64*g+32+l]&0xf)<<4)
		}
	}
	return dst
}

// quantQ6K writes Q6_K: 16 sub-blocks of 16 with int8 scales.
func quantQ6K(dst []byte, x []float32) []byte {
	var scale [16]float32
	maxScale := float32(0)
	for j := 0; j < 16; j++ {
		scale[j] = signedMax(x[16*j:16*j+16]) / -32
		if abs32(scale[j]) > abs32(maxScale) {
			maxScale = scale[j]
		}
	}
	d := maxScale / -128
	var sc [16]int8
	if d != 0 {
		for j := range sc {
			sc[j] = int8(clampRound(scale[j]/d, -128, 127))
		}
	}
	dh := f32ToF16(d)
	d = f16ToF32(dh)
	var q [256]int32
	for i := range q {
		ds := d * float32(sc[i/16])
		q[i] = 32
		if ds != 0 {
			q[i] = clampRound(x[i]/ds, -32, 31) + 32
		}
	}
	var ql [128]byte
	var qh [64]byte
	for n := 0; n < 2; n++ {
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := q[128*n+l], q[128*n+l+32], q[128*n+l+64], q[128*n+l+96]
			ql[64*n+l] = byte(q1&0xf) | byte(q3&0xf)<<4
			ql[64*n+l+32] = byte(q2&0xf) | byte(q4&0xf)<<4
			qh[32*n+l] = byte(q1>>4) | byte(q2>>4)<<2 | byte(q3>>4)<<4 | byte(q4>>4)<<6
		}
	}
	dst = append(dst, ql[:]...)
	dst = append(dst, qh[:]...)
	for _, s := range sc {
		dst = append(dst, byte(s))
	}
	return binary.LittleEndian.AppendUint16(dst, dh)
}

// quantIQ4XS writes IQ4_XS: 8 sub-blocks of 32 on the IQ4_NL grid, each
// with a signed 6-bit scale.
func quantIQ4XS(dst []byte, x []float32) []byte {
	var scale [8]float32
	maxScale := float32(0)
	for j := 0; j < 8; j++ {
		scale[j] = signedMax(x[32*j:32*j+32]) / -127
		maxScale = max(maxScale, abs32(scale[j]))
	}
	d := maxScale / 31
	dh := f32ToF16(d)
	d = f16ToF32(dh)
	var ls [8]int32
	for j := range ls {
		ls[j] = 32
		if d != 0 {
			ls[j] = clampRound(scale[j]/d, -32, 31) + 32
		}
	}
	le := binary.LittleEndian
	dst = le.AppendUint16(dst, dh)
	h := uint16(0)
	var l [4]byte
	for j := 0; j < 8; j++ {
		h |= uint16(ls[j]>>4) << (2 * j)
		l[j/2] |= byte(ls[j]&0xf) << (4 * (j % 2))
	}
	dst = le.AppendUint16(dst, h)
	dst = append(dst, l[:]...)
	for j := 0; j < 8; j++ {
		dl := d * float32(ls[j]-32)
		for i := 0; i < 16; i++ {
			dst = append(dst, nearestIQ4(x[32*j+i], dl)|nearestIQ4(x[32*j+i+16], dl)<<4)
		}
	}
	return dst
}

// quantMXFP4 writes one MXFP4 block as ggml's quantize_row_mxfp4_ref does,
// bit for bit: the exponent floor(log2f(max|x|)) − 2 (so that the largest
// value, ±6 in E2M1 = ±12 doubled, covers max|x|), and each value the grid
// point nearest to it, the first of equals.
func quantMXFP4(dst []byte, x []float32) []byte {
	amax := float32(0)
	for _, v := range x[:32] {
		// As ggml compares, a NaN never becomes the max.
		if a := abs32(v); amax < a {
			amax = a
		}
	}
	e := byte(0)
	if amax > 0 {
		e = mxfp4Exponent(amax)
	}
	d := e8m0Half(e)
	dst = append(dst, e)
	for j := 0; j < 16; j++ {
		dst = append(dst, nearestMXFP4(x[j], d)|nearestMXFP4(x[j+16], d)<<4)
	}
	return dst
}

// mxfp4Exponent is ggml's (uint8_t)(floorf(log2f(amax)) − 2 + 127). log2f
// is correctly rounded to float32 here (the float64 log rounded), so a
// value just under a power of two whose log rounds up to the power's
// exponent takes that exponent, as in C. Out of range (amax below 2^-125,
// where C's conversion is undefined), x86's truncation to int32 and then
// to the low byte is what ggml's build does, so we do the same.
func mxfp4Exponent(amax float32) byte {
	l := float32(math.Log2(float64(amax)))
	v := float32(math.Floor(float64(l))) - 2 + 127
	return byte(int32(v))
}

// nearestMXFP4 is ggml's best_index_mxfp4: the first grid index of least
// |k·d − v| (k·d is exact: a small integer times a power of two).
func nearestMXFP4(v, d float32) byte {
	best, bi := abs32(float32(float32(kvaluesMXFP4[0])*d)-v), 0
	for i := 1; i < 16; i++ {
		if e := abs32(float32(float32(kvaluesMXFP4[i])*d) - v); e < best {
			best, bi = e, i
		}
	}
	return byte(bi)
}
