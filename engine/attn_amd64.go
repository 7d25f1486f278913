package engine

//go:noescape
func attnAV64(out *float32, v *float32, vstride int, p *float32, np int)

//go:noescape
func attnAV64Z(out *float32, v *float32, vstride int, p *float32, np int)

// attnAV adds Σ_j p[j]·v[j·stride:][:len(out)] to out, j in order, each
// output its own sequential sum (the portable loop's bits), 64 outputs a
// kernel call where the CPU has AVX (AVX-512: 16 lanes a register).
func attnAV(out, v []float32, stride int, p []float32) {
	i := 0
	if useSIMD && hasAVX && len(p) > 0 {
		_ = v[(len(p)-1)*stride+len(out)-1]
		kernel := attnAV64
		if hasAVX512 {
			kernel = attnAV64Z
		}
		for ; i+64 <= len(out); i += 64 {
			kernel(&out[i], &v[i], stride, &p[0], len(p))
		}
	}
	if i < len(out) { // the portable loop walks p even for no outputs
		attnAVPortable(out[i:], v[i:], stride, p)
	}
}

//go:noescape
func maxF32(s *float32, n int) float32

//go:noescape
func expF32(s *float32, n int, m float32, c *float32)

//go:noescape
func scaleF32(s *float32, n int, f float32)

// scale multiplies each value by f in place, 16 a step where the CPU has
// AVX-512 (each product rounded once either way).
func scale(s []float32, f float32) {
	if !useSIMD || !hasAVX512 || len(s) == 0 {
		scalePortable(s, f)
		return
	}
	scaleF32(&s[0], len(s), f)
}

//go:noescape
func siluMulF32(gate, up *float32, n int, c *float32)

// siluMul is siluMulPortable's bits, 16 values a step where the CPU has
// AVX-512.
func siluMul(g, u []float32) {
	if !useSIMD || !hasAVX512 || len(g) == 0 {
		siluMulPortable(g, u)
		return
	}
	_ = u[len(g)-1]
	siluMulF32(&g[0], &u[0], len(g), &expConsts[0])
}

// softmax is softmaxPortable's bits: the max, the exponentials and the
// scaling 16 values a step where the CPU has AVX-512, the sum in order.
// (Summing in lanes instead moved one of refcheck's quantised models past
// its bound against ggml, 0.0147 → 0.0209: activations quantised from
// slightly other hidden states round differently.)
func softmax(s []float32) {
	if !useSIMD || !hasAVX512 || len(s) == 0 {
		softmaxPortable(s)
		return
	}
	m := maxF32(&s[0], len(s))
	expF32(&s[0], len(s), m, &expConsts[0])
	sum := float32(0)
	for _, e := range s {
		sum += e
	}
	scaleF32(&s[0], len(s), 1/sum)
}

// softmaxSink is softmaxSinkPortable's bits, as softmax is softmaxPortable's.
func softmaxSink(s []float32, sink float32) {
	if !useSIMD || !hasAVX512 || len(s) == 0 {
		softmaxSinkPortable(s, sink)
		return
	}
	m := max(maxF32(&s[0], len(s)), sink)
	expF32(&s[0], len(s), m, &expConsts[0])
	sum := float32(0)
	for _, e := range s {
		sum += e
	}
	sum += expf(sink - m)
	scaleF32(&s[0], len(s), 1/sum)
}
