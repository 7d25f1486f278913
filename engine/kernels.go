package engine

import "math"

// The portable kernels define the arithmetic order; the assembly kernels
// (kernels_amd64.s) follow it exactly and are tested to give the same bits.
//
// An F32 dot product keeps 16 strided lanes (element i goes to lane i%16;
// a tail shorter than 16 goes to lanes 0..tail-1), each adding products
// already rounded to float32, then sums the lanes as a fixed tree:
// l[j]+l[j+8], then +4, +2, +1. This is exactly what two 8-wide AVX
// registers and a horizontal reduction compute, with no FMA. An F16 or
// BF16 row's dot product (its values widened exactly) is the same but for
// its adds: fused multiply-adds, one rounding each (dotFused).

// dotF32 is the reference F32 dot product.
func dotF32(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		x := a[i : i+16 : i+16]
		y := b[i : i+16 : i+16]
		s[0] += float32(x[0] * y[0])
		s[1] += float32(x[1] * y[1])
		s[2] += float32(x[2] * y[2])
		s[3] += float32(x[3] * y[3])
		s[4] += float32(x[4] * y[4])
		s[5] += float32(x[5] * y[5])
		s[6] += float32(x[6] * y[6])
		s[7] += float32(x[7] * y[7])
		s[8] += float32(x[8] * y[8])
		s[9] += float32(x[9] * y[9])
		s[10] += float32(x[10] * y[10])
		s[11] += float32(x[11] * y[11])
		s[12] += float32(x[12] * y[12])
		s[13] += float32(x[13] * y[13])
		s[14] += float32(x[14] * y[14])
		s[15] += float32(x[15] * y[15])
	}
	for j := 0; i < n; i, j = i+1, j+1 {
		s[j] += float32(a[i] * b[i])
	}
	return reduce16(&s)
}

// dotFused is dotF32 with each product added by fma32: the F16 and BF16
// rows' dot product, as dot4FMA, the 4×4 F16 and BF16 tiles and the F16
// and BF16 decode kernels compute it.
func dotFused(a, b []float32) float32 {
	b = b[:len(a)]
	var s [16]float32
	for i, v := range a {
		s[i%16] = fma32(v, b[i], s[i%16])
	}
	return reduce16(&s)
}

func reduce16(s *[16]float32) float32 {
	for j := 0; j < 8; j++ {
		s[j] += s[j+8]
	}
	for j := 0; j < 4; j++ {
		s[j] += s[j+4]
	}
	s[0] += s[2]
	s[1] += s[3]
	return s[0] + s[1]
}

// A Q8_0 dot product works on blocks of 32: per block, the exact int32
// sum of the 32 products of int8 weights and int8-quantised activations,
// converted to float32, times the block's scale product float32(dw·dx)
// (rounded), is added to one float32 accumulator, blocks in order (no
// lanes, no tree), as the packed types combine blocks (dotRowQuant). An
// integer sum is exact in any order, so a kernel can compute 16 rows
// against several tokens at once (q8il.go) and still give these bits.

// dotQ8 is the reference Q8_0 dot product of one weight row (wq, wd) with
// one quantised activation (xq, xd).
func dotQ8(wq []int8, wd []float32, xq []int8, xd []float32) float32 {
	acc := float32(0)
	nb := len(wd)
	xd = xd[:nb]
	wq = wq[:nb*32]
	xq = xq[:nb*32]
	for b := 0; b < nb; b++ {
		w := wq[b*32 : b*32+32 : b*32+32]
		x := xq[b*32 : b*32+32 : b*32+32]
		isum := int32(0)
		for i, v := range w {
			isum += int32(v) * int32(x[i])
		}
		s := float32(wd[b] * xd[b])
		acc += float32(float32(isum) * s)
	}
	return acc
}

// quantizeQ8 quantises x (a whole number of 32-blocks) as ggml quantises
// activations for a Q8_0 matrix product: per block, scale max|x|/127
// rounded to f16, values rounded to nearest (halves away from zero); by
// AVX-512F where the CPU has it (quantizeQ8SIMD), with the same bits.
func quantizeQ8(x []float32, q []int8, d []float32) {
	if quantizeQ8SIMD(x, q, d) {
		return
	}
	for b := range d {
		d[b] = f16ToF32(quantizeQ8Block(x[b*32:b*32+32], q[b*32:b*32+32]))
	}
}

// fma32 is w·x + acc rounded once to float32 (to nearest, ties to even),
// as the kernels' VFMADD231PS computes it, NaNs included: the first NaN
// of x, w, acc, quieted (the multiplicands before the addend, as the
// hardware picks). The product is exact in float64 and the sum rounded
// once there. Only a float64 sum exactly halfway between two float32
// values, where the exact sum was not, would round a second time the
// wrong way; the sum's error, exact by TwoSum, says which way to go.
func fma32(w, x, acc float32) float32 {
	switch {
	case x != x:
		return quiet32(x)
	case w != w:
		return quiet32(w)
	case acc != acc:
		return quiet32(acc)
	}
	p := float64(w) * float64(x)
	s := p + float64(acc)
	f := float32(s)
	// A float32 midpoint in the normal range is a float64 whose low 29
	// bits are 1 and 28 zeros (infinities and NaNs are not).
	if math.Float64bits(s)&(1<<29-1) != 1<<28 && math.Abs(s) >= 0x1p-126 {
		return f
	}
	if s != s || math.IsInf(s, 0) { // an infinite operand: no rounding
		return f
	}
	bv := s - p
	e := (p - (s - bv)) + (float64(acc) - bv) // p + acc = s + e exactly
	if e == 0 || float64(f) == s {
		return f
	}
	if math.IsInf(float64(f), 0) {
		// s is at or past the threshold to infinity, MaxFloat32 and half
		// its ulp; exactly at it with the exact sum short of it, the
		// sum rounds to MaxFloat32.
		if math.Abs(s) == math.MaxFloat32+0x1p103 && (e > 0) != (s > 0) {
			return float32(math.Copysign(math.MaxFloat32, s))
		}
		return f
	}
	toward := float32(math.Inf(1))
	if s < float64(f) {
		toward = float32(math.Inf(-1))
	}
	next := math.Nextafter32(f, toward)
	if 2*(s-float64(f)) != float64(next)-float64(f) {
		return f // not halfway: one rounding's result
	}
	if (e > 0) == (s > float64(f)) { // the exact sum is past halfway
		return next
	}
	return f
}

// quiet32 is NaN v with its quiet bit set.
func quiet32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) | 1<<22) }

// expf is e^x in float32, our own so that every machine gives the same
// bits (the math package's Exp uses FMA where the CPU has it). Cephes'
// expf: x = k·ln2 + r, a degree-5 polynomial for e^r, then scaling by 2^k,
// every product rounded to float32 before it is added.
func expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72283:
		return float32(math.Inf(1))
	case x < -103.97208:
		return 0
	}
	k := float32(math.Floor(float64(float32(x*1.44269504088896341)) + 0.5))
	r := x - float32(k*0.693359375)
	r = r - float32(k*-2.12194440e-4)
	p := float32(1.9875691500e-4)
	p = float32(p*r) + 1.3981999507e-3
	p = float32(p*r) + 8.3334519073e-3
	p = float32(p*r) + 4.1665795894e-2
	p = float32(p*r) + 1.6666665459e-1
	p = float32(p*r) + 5.0000001201e-1
	rr := float32(r * r)
	y := float32(p*rr) + r + 1
	ki := int32(k)
	switch {
	case ki > 127:
		return float32(y*2) * pow2(ki-1)
	case ki < -126:
		return float32(y*pow2(ki+126)) * pow2(-126)
	}
	return y * pow2(ki)
}

func pow2(e int32) float32 { return math.Float32frombits(uint32(e+127) << 23) }

// siluMulPortable computes silu(g)·u in place in g: SwiGLU.
func siluMulPortable(g, u []float32) {
	u = u[:len(g)]
	for i, x := range g {
		s := x / (1 + expf(-x))
		g[i] = s * u[i]
	}
}

// rmsNorm writes x / sqrt(mean(x²) + eps) · w to out. The sum of squares
// is in float64, where each square is exact, so its order alone fixes it.
func rmsNorm(out, x, w []float32, eps float32) {
	ss := 0.0
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w = w[:len(x)]
	out = out[:len(x)]
	for i, v := range x {
		out[i] = float32(v*scale) * w[i]
	}
}

// softmaxPortable is softmax's definition: e_i = expf(s_i − max s), their
// sum in order (sequential, as ggml's soft_max sums), then each e_i times
// 1/sum.
func softmaxPortable(s []float32) {
	m := float32(math.Inf(-1))
	for _, v := range s {
		if v > m {
			m = v
		}
	}
	sum := float32(0)
	for i, v := range s {
		e := expf(v - m)
		s[i] = e
		sum += e
	}
	inv := 1 / sum
	for i := range s {
		s[i] *= inv
	}
}

// softmaxSinkPortable is a softmax whose denominator holds one more term,
// exp(sink), that takes no value (gpt-oss's attention sinks): the max
// counts the sink too, as ggml's soft_max with sinks does.
func softmaxSinkPortable(s []float32, sink float32) {
	m := sink
	for _, v := range s {
		if v > m {
			m = v
		}
	}
	sum := float32(0)
	for i, v := range s {
		e := expf(v - m)
		s[i] = e
		sum += e
	}
	sum += expf(sink - m)
	inv := 1 / sum
	for i := range s {
		s[i] *= inv
	}
}

// softmaxRowsPortable is softmaxRows' definition: each row of n values in
// s through softmaxPortable, or softmaxSinkPortable with sinks[g] on row g.
func softmaxRowsPortable(s []float32, n int, sinks []float32) {
	for g := 0; n > 0 && g < len(s)/n; g++ {
		if sinks != nil {
			softmaxSinkPortable(s[g*n:(g+1)*n], sinks[g])
		} else {
			softmaxPortable(s[g*n : (g+1)*n])
		}
	}
}

// expConsts are expf's constants as float32, in the order the AVX-512
// kernels read them (EXPSETUP, EXPF).
var expConsts = [...]float32{1.44269504088896341, 0.693359375, -2.12194440e-4,
	1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
	88.72283, -103.97208, 0.5, 1, float32(math.Inf(1))}
